"""DescribeClusterHardware's chips, links and fleet summaries, and a chip's lifecycle."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from podfleet.api.schemas.base import ResponseBody


class ChipOut(ResponseBody):
    index: int
    coords: list[int]
    state: str
    spare: bool
    metrics: dict[str, Any]


class LinkOut(ResponseBody):
    src: int
    dst: int
    axis: str
    state: str
    metrics: dict[str, Any]


class Hardware(ResponseBody):
    cluster_id: str
    chips: list[ChipOut]
    links: list[LinkOut]


class PodSummary(ResponseBody):
    pod: int
    block: int
    chips: int
    healthy: int
    failed: int
    spare: int
    busy: int
    utilization: float
    jobs: list[str]


class BlockSummary(ResponseBody):
    block: int
    pods: list[int]
    chips: int
    healthy: int
    failed: int
    spare: int
    busy: int
    utilization: float


class HardwareSummary(ResponseBody):
    """DescribeClusterHardware with ``summary=true``: counts per pod and per network block."""

    cluster_id: str
    pods: list[PodSummary]
    blocks: list[BlockSummary]



class ChipLifecycleOut(ResponseBody):
    cluster_id: str
    cluster: str
    chip: int
    state: str = Field(..., description="the fabric's: healthy, degraded, failed, isolated, updating")
    mode: str = Field(..., description="the operator's: schedulable, cordoned, draining; or unavailable: left "
                      "schedulable, but its state (not healthy) keeps placement off it")
    spare: bool
    job: str | None = None
