"""Chip usage reports."""

from __future__ import annotations

from pydantic import BaseModel, Field

from podfleet.api.schemas.base import ResponseBody


class UsageRow(ResponseBody):
    busy: float = Field(..., description="chip-seconds training (less work a failure threw away)")
    reserved: float = Field(..., description="chip-seconds held while placing or checkpointing")
    lost: float = Field(..., description="chip-seconds held while recovering, plus work a failure threw away")
    chip_hours: float
    jobs: int


class UsageGroup(ResponseBody):
    name: str = Field(..., description="the user, queue or team")
    chip_hours: list[float] = Field(..., description="chip-hours held in each bucket (busy + reserved + lost)")


class UsageSeries(BaseModel):
    bucket_s: int
    t: list[float] = Field(..., description="each bucket's start, unix s (the newest 1000 buckets at most)")
    groups: list[UsageGroup]


class UsageReport(BaseModel):
    by: str
    since: float | None = None
    cluster_id: str | None = None
    rows: list[UsageRow]
    total: dict[str, float]
    jobs: int
    series: UsageSeries | None = Field(None, description="usage over time, with ?bucket= only")
