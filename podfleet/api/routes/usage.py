"""Accounting: GetUsage (chip-seconds per user, queue or team; ``control.accounting``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from podfleet.api.deps import Plane
from podfleet.api.schemas import UsageReport
from podfleet.control import accounting

router = APIRouter(prefix="/v1", tags=["usage"])


@router.get("/usage", operation_id="GetUsage", response_model=UsageReport)
async def get_usage(plane: Plane,
                    by: Annotated[Literal["user", "queue", "team"], Query(description="group by")] = "user",
                    since: Annotated[float | None, Query(ge=0, description="unix seconds: jobs submitted since")] = None,
                    cluster: Annotated[str | None, Query(max_length=63, pattern=r"^[a-z0-9][a-z0-9-]*$")] = None,
                    bucket: Annotated[Literal["1m", "5m", "15m", "1h", "6h", "1d"] | None,
                                      Query(description="also chip-hours over time per group, in buckets "
                                                        "this long")] = None,
                    ) -> dict[str, Any]:
    """Chip-seconds busy, reserved and lost (to failures and recovery), kept past each job;
    with ``bucket``, each group's chip-hours per bucket from ``since`` (or its first use) to now."""
    cluster_id = plane.resolve(cluster).id if cluster else None

    def run() -> dict[str, Any]:
        return accounting.report(plane.table, plane.now(), by=by, since=since, cluster_id=cluster_id,
                                 bucket=bucket)

    return await plane.call(run)
