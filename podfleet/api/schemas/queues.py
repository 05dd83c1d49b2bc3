"""Cluster queues (quota, cohorts, fair share) and priority classes."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from podfleet.api.schemas.base import QUEUE_PATTERN, RequestBody
from podfleet.control.specs import MAX_CLUSTER_CHIPS

ReclaimPolicy = Literal["never", "lower-priority", "any"]


class CreateQueueRequest(RequestBody):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"name": "team-a", "nominal": 32, "cohort": "research", "borrowing_limit": 16}]})

    name: str = Field(..., min_length=1, max_length=63, pattern=QUEUE_PATTERN)
    nominal: int = Field(..., ge=0, le=MAX_CLUSTER_CHIPS, description="chips the queue owns")
    cohort: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN,
                               description="queues of one cohort lend each other idle quota")
    borrowing_limit: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS,
                                        description="most chips above nominal it may borrow (none: no limit)")
    lending_limit: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS,
                                      description="most of its idle nominal chips it lends (none: all)")
    weight: float = Field(1.0, gt=0, le=1000, description="fair-share weight in its cohort")
    reclaim: ReclaimPolicy = Field("any", description="which borrowing jobs it may preempt to get its quota back")


class UpdateQueueRequest(RequestBody):
    nominal: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS)
    cohort: str | None = Field(None, min_length=1, max_length=63, pattern=QUEUE_PATTERN)
    borrowing_limit: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS)
    lending_limit: int | None = Field(None, ge=0, le=MAX_CLUSTER_CHIPS)
    weight: float | None = Field(None, gt=0, le=1000)
    reclaim: ReclaimPolicy | None = None


class CreatePriorityClassRequest(RequestBody):
    name: str = Field(..., min_length=1, max_length=63, pattern=r"^[a-z][a-z0-9-]*$")
    value: int = Field(..., ge=0, le=100, description="the priority its jobs get")
    preemption: Literal["lower", "never"] = Field("lower", description="lower: its jobs may preempt "
                                                  "lower-priority jobs; never: they wait")
