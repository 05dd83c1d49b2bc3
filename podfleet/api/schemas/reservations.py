"""Advance reservations."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from podfleet.api.schemas.base import QUEUE_PATTERN, RequestBody
from podfleet.control.specs import MAX_CLUSTER_CHIPS
from podfleet.timespec import DURATION_PATTERN, MAX_S, TIME_PATTERN


class CreateReservationRequest(RequestBody):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "big-run", "chips": 32, "start": "2026-12-04T08:00:00Z", "duration": "6h", "queue": "team-a"}]})

    name: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN,
                             description="default: its id")
    chips: int = Field(..., ge=1, le=MAX_CLUSTER_CHIPS, description="chips held for the window")
    start: str = Field("now", min_length=1, max_length=64, pattern=TIME_PATTERN,
                       description="RFC 3339 (UTC unless it says), now, or now+DURATION (now+1h)")
    duration: Annotated[str, Field(min_length=1, max_length=32, pattern=DURATION_PATTERN)] | \
        Annotated[float, Field(gt=0, le=MAX_S)] = Field(..., description="seconds, or 2h, 30m, 1h30m, 1d, HH:MM:SS")
    queue: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN,
                              description="whose jobs may use the chips in the window (none: nobody's)")
