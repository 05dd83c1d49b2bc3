"""The main nouns' replies: clusters and their deployment, jobs, queues, logs, faults, and the
hardware (DescribeClusterHardware) with a chip's lifecycle."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from podfleet.sdk.models.reply import Envelope, JobStateName, PageBody, Reply


class DeploymentStep(Reply):
    name: str
    state: str


class Deployment(Reply):
    state: str
    percent: int
    steps: list[DeploymentStep]


class Cluster(Reply):
    id: str
    name: str
    state: str
    type: str | None = None
    chips: int | None = None
    spares: list[int] = []
    deployment: Deployment | None = None
    fabric: str | None = Field(None, description="sim, local, ray or neuron")
    spec: dict[str, Any] | None = Field(None, description="what it was created with (pods, pods_per_block, ...)")
    scheduler: dict[str, Any] = Field({}, description="pods (utilization, free_chips, largest_free_block, "
                                      "fragmentation), utilization, fragmentation, pending_jobs, running_jobs, "
                                      "queue_wait_p50_s, queue_wait_p95_s, balance_degree (per job)")


class ClusterList(PageBody):
    clusters: list[Cluster]


class Progress(Reply):
    step: int
    steps: int
    loss: float | None = None
    tokens_per_s: float | None = None


class AllocationOut(Reply):
    chips: list[int]
    shape: list[int]
    reason: str


class Job(Reply):
    id: str
    cluster_id: str
    state: JobStateName
    model: str
    chips: int
    progress: Progress
    allocation: AllocationOut | None = None
    reason: str = ""
    name: str | None = None
    queue: str | None = Field(None, description="the cluster queue it was admitted through")
    scheduling: dict[str, Any] = Field({}, description="queue_wait_s, balance_degree, preemptions, rebalances")
    timestamps: dict[str, str] = {}


class JobList(PageBody):
    jobs: list[Job]


class Queue(Reply):
    name: str
    cluster_id: str
    nominal: int | None = Field(None, description="chips it owns (none: the implicit, unlimited default queue)")
    cohort: str | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    weight: float = 1.0
    reclaim: str = "any"
    used: int = Field(0, description="chips its jobs hold now")
    borrowed: int = Field(0, description="chips it uses above nominal")
    lent: int = Field(0, description="chips of its nominal quota other queues use now")
    capacity: int | None = Field(None, description="the most chips it can ever hold")
    share: float = Field(0.0, description="dominant share: chips held over the cohort's nominal chips, per "
                                          "normalized weight")
    usage: float = Field(0.0, description="decayed chip-seconds (fair-share history)")
    fair_share: float = Field(0.0, description="Slurm's fair-share factor 2^(-usage/shares), 0-1 (1: unused)")
    defined: bool = Field(True, description="false for the implicit default queue")
    jobs: dict[str, int] = Field({}, description="its jobs by scheduler phase")


class QueueList(Reply):
    model_config = ConfigDict(extra="ignore")

    queues: list[Queue]




class LogLine(Reply):
    offset: int
    time: str
    message: str


class Logs(Envelope):
    lines: list[LogLine]
    next: int


class FaultOut(Reply):
    cluster_id: str
    kind: str


# --- hardware (DescribeClusterHardware) and a chip's lifecycle ---------------------------------
class ChipOut(Reply):
    index: int
    coords: list[int]
    state: str
    spare: bool
    metrics: dict[str, Any]


class LinkOut(Reply):
    src: int
    dst: int
    axis: str
    state: str
    metrics: dict[str, Any]


class Hardware(Reply):
    cluster_id: str
    chips: list[ChipOut]
    links: list[LinkOut]


class PodSummary(Reply):
    pod: int
    block: int
    chips: int
    healthy: int
    failed: int
    spare: int
    busy: int
    utilization: float
    jobs: list[str]


class BlockSummary(Reply):
    block: int
    pods: list[int]
    chips: int
    healthy: int
    failed: int
    spare: int
    busy: int
    utilization: float


class HardwareSummary(Reply):
    """DescribeClusterHardware with ``summary=true``: counts per pod and per network block."""

    cluster_id: str
    pods: list[PodSummary]
    blocks: list[BlockSummary]


class ChipLifecycleOut(Reply):
    cluster_id: str
    cluster: str
    chip: int
    state: str = Field(..., description="the fabric's: healthy, degraded, failed, isolated, updating")
    mode: str = Field(..., description="the operator's: schedulable, cordoned, draining; or unavailable: left "
                      "schedulable, but its state (not healthy) keeps placement off it")
    spare: bool
    job: str | None = None

