"""The API's replies for the main nouns (cluster, job, queue) as typed models, shared by
both edges: the server declares them as its response models (``api/schemas`` re-exports
them, so ``/openapi.json`` describes exactly these) and ``PodfleetClient`` returns them.

A reply keeps every field the server sent (``extra="allow"``: a newer server's fields
reach an older client), and reads like the dict the SDK returned before, so
``job["state"]``, ``job.get("reason")`` and ``"plan" in job`` keep working beside
``job.state``; ``to_dict()`` is its JSON form (what ``--output json`` prints)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# control/lifecycle.JobState's values (tests/api/test_presets.py checks they agree): the
# SDK stands above the wire, not on the engine.
JOB_STATE_NAMES = ("PENDING", "PLACING", "RUNNING", "CHECKPOINTING", "RECOVERING", "SUCCEEDED", "FAILED", "STOPPED")
JobStateName = Literal[JOB_STATE_NAMES]  # type: ignore[valid-type]


class Reply(BaseModel):
    """A reply's fields by attribute, and read as a mapping too (the SDK's dicts of before)."""

    model_config = ConfigDict(extra="allow")

    def _fields(self) -> dict[str, Any]:
        # The fields it holds (a reply kept unvalidated may lack some), then the undeclared ones.
        return {**{k: v for k, v in self.__dict__.items() if k in type(self).model_fields}, **(self.model_extra or {})}

    def __getitem__(self, key: str) -> Any:
        fields = self._fields()
        if key not in fields:
            raise KeyError(key)
        return fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._fields().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._fields()

    def keys(self) -> list[str]:
        return list(self._fields())

    def items(self) -> list[tuple[str, Any]]:
        return list(self._fields().items())

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # a mapping's keys, as the dict's were
        return iter(self._fields())

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, as the server sent it (no defaults added for fields it left out)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def __eq__(self, other: object) -> bool:
        # Equal to the dict it was read from, as the SDK's dicts were to their JSON.
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dicts it stands for


class PageBody(Reply):
    """A page of a list: ``next_token`` asks for the next one. ``nextToken`` repeats it for
    one release, for clients written against the camelCase spelling."""

    model_config = ConfigDict(extra="ignore")  # a page is its items and its token, nothing else

    next_token: str | None = None
    nextToken: str | None = Field(None, json_schema_extra={"deprecated": True},
                                  description="deprecated spelling of next_token; sent for one release")

    @model_validator(mode="before")
    @classmethod
    def _both_spellings(cls, data: Any) -> Any:
        if isinstance(data, dict) and "next_token" in data:
            return {**data, "nextToken": data["next_token"]}
        return data




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
