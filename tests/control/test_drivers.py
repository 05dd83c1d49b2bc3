"""Job drivers are chosen from what a fabric declares, and the process driver follows a
fabric of worker processes through the job table (a fake fabric that records what it is
asked and reports what a real one would)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest

from podfleet.control import ControlPlane
from podfleet.control.drivers import ProcessDriver, TwinDriver
from podfleet.control.jobtable import Job, JobStatus, Progress
from podfleet.control.lifecycle import JobState
from podfleet.control.placement import Allocation
from podfleet.control.specs import JobSpec
from podfleet.engine.timeline import Timeline
from podfleet.errors import InvalidInputError, InvalidTransitionError
from podfleet.fabric.base import (
    ChipState,
    FabricEvent,
    LinkState,
    RunState,
    RunStatus,
    WorkerGroupSpec,
)
from podfleet.hardware.topology import Topology
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster, advance


class FakeProcessFabric:
    """Declares Introspection and WorkerKill, nothing the twin has."""

    kind = "fake"

    def __init__(self, topology: Topology, timeline: Any, spares: tuple[int, ...], seed: int, *,
                 options: Mapping[str, Any] | None = None) -> None:
        self.topology = topology
        self.tl = timeline
        self.launches: list[WorkerGroupSpec] = []
        self.stopped: list[str] = []
        self.subs: list[Callable[[FabricEvent], None]] = []
        self.logs: dict[str, list[str]] = {}

    def attach(self, timeline: Any) -> None: ...

    def chip_states(self) -> list[ChipState]:
        return [ChipState.HEALTHY] * self.topology.n_chips

    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None: ...

    def link_states(self) -> list[LinkState]:
        return [LinkState.UP] * len(self.topology.links)

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        return {}

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        return {}

    def launch(self, group: WorkerGroupSpec) -> None:
        self.launches.append(group)
        self.logs.setdefault(group.job_id, []).append(f"attempt {len(self.launches)} started")

    def stop(self, job_id: str) -> None:
        self.stopped.append(job_id)

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None:
        self.subs.append(callback)

    def run_status(self, job_id: str) -> RunStatus | None:
        g = next((g for g in reversed(self.launches) if g.job_id == job_id), None)
        return None if g is None else RunStatus(job_id, RunState.RUNNING, g.chips, 0, log_tail=("boom",))

    def run_logs(self, job_id: str) -> list[str]:
        return list(self.logs.get(job_id, []))

    def kill_worker(self, job_id: str, rank: int) -> int | None:
        return 4242

    def emit(self, kind: str, job_id: str, chip: int | None = None, **detail: Any) -> None:
        for cb in self.subs:
            cb(FabricEvent(kind, self.tl.now, chip=chip, job_id=job_id, detail=detail))


def fake_plane() -> tuple[ControlPlane, list[FakeProcessFabric]]:
    made: list[FakeProcessFabric] = []

    def factory(kind: str, topology: Topology, timeline: Any, spares: tuple[int, ...], seed: int, *,
                options: Mapping[str, Any] | None = None) -> FakeProcessFabric:
        made.append(FakeProcessFabric(topology, timeline, spares, seed, options=options))
        return made[-1]

    return ControlPlane(MemoryStore(), Timeline(seed=0), fabric_factory=factory), made


def test_driver_follows_the_fabrics_capabilities(plane: ControlPlane) -> None:
    view = active_cluster(plane)
    assert isinstance(plane.jobs.drivers[view["id"]], TwinDriver)
    fp, _made = fake_plane()
    v = fp.create_cluster({"name": "p", "fabric": "local", "chips": 8, "spares": 2}, actor="t")
    assert isinstance(fp.jobs.drivers[v["id"]], ProcessDriver)
    # A twin fault on a fabric that declares no FaultInjection: a clear 4xx, not a crash.
    advance(fp, 5)
    with pytest.raises(InvalidInputError, match="needs the twin"):
        fp.inject_fault("p", "chip-failure", chip=1, actor="t")


def test_process_driver_relaunches_a_gang_that_ended_and_counts_failures() -> None:
    plane, made = fake_plane()
    plane.create_cluster({"name": "p", "fabric": "local", "chips": 8, "spares": 2}, actor="t")
    advance(plane, 5)
    fab = made[0]
    job = plane.jobs.submit("p", {"model": "debug", "chips": 4, "steps": 100, "checkpoint_interval": 10,
                                  "max_retries": 1}, actor="t")
    advance(plane, 0.1)
    assert plane.jobs.describe(job["id"])["state"] == "RUNNING"
    first = fab.launches[-1]
    assert "resume" not in first.options and first.options["max_retries"] == 1

    fab.emit("progress", job["id"], step=7, loss=2.5, tokens_per_s=100.0, step_time_s=0.1)
    fab.emit("checkpoint", job["id"], step=10, path="/ckpt/step-10")
    advance(plane, 0.1)
    d = plane.jobs.describe(job["id"])
    assert d["progress"]["step"] == 7 and d["progress"]["step_time_s"] == 0.1 and d["checkpoint_step"] == 10
    ck = plane.store.latest_checkpoint(job["id"])
    assert ck is not None and (ck.step, ck.path) == (10, "/ckpt/step-10")

    # The infrastructure lost rank 1's node: the gang is relaunched from the checkpoint,
    # rank 1 on another chip, and it does not count against the retry budget.
    fab.emit("worker-exited", job["id"], chip=first.chips[1], rank=1, cause="infra", gang_ended=True,
             reason="node lost")
    advance(plane, 0.1)
    second = fab.launches[-1]
    assert len(fab.launches) == 2 and second.options["resume"] is True
    assert second.chips[1] != first.chips[1] and second.chips[0] == first.chips[0]
    d = plane.jobs.describe(job["id"])
    # RECOVERING for the whole relaunch: until the fabric says the new gang started.
    assert d["state"] == "RECOVERING" and d["runtime"]["infra_failures"] == 1
    assert "waiting for the gang to start" in d["reason"]
    fab.emit("job-started", job["id"], chips=list(second.chips))
    advance(plane, 0.1)
    d = plane.jobs.describe(job["id"])
    assert d["state"] == "RUNNING" and d["allocation"]["chips"] == list(second.chips)
    assert plane.clusters[d["cluster_id"]].owner.get(first.chips[1]) is None

    # kill-worker goes to the fabric that declares WorkerKill, and says which pid.
    out = plane.inject_fault("p", "kill-worker", rank=0, actor="t")
    assert out["pid"] == 4242 and out["job_id"] == job["id"]

    # Two user-code crashes with max_retries=1: retried once, then failed with the reason.
    for n in (1, 2):
        fab.emit("worker-exited", job["id"], chip=second.chips[0], rank=0, cause="user-code", gang_ended=True,
                 reason=f"crash {n}")
        advance(plane, 0.1)
    d = plane.jobs.describe(job["id"])
    assert d["state"] == "FAILED" and "max_retries=1" in d["reason"] and d["runtime"]["user_failures"] == 2
    assert plane.clusters[d["cluster_id"]].owner == {}
    logs = [ln["message"] for ln in plane.jobs.job_logs(job["id"]).since(0)]
    assert "attempt 1 started" in logs  # the fabric's own log lines are copied


def test_job_table_enforces_transitions_and_round_trips_the_typed_status() -> None:
    plane, _ = fake_plane()
    table = plane.table
    job = Job("job-x", "cl-x", JobState.PENDING, JobSpec("debug", 1, steps=5),
              JobStatus(Progress(steps=5), reason="waiting"), 0.0, 0.0)
    table.add(job)
    with pytest.raises(InvalidTransitionError, match="PENDING to RUNNING"):
        table.transition(job, JobState.RUNNING, "skipping PLACING")
    table.transition(job, JobState.PLACING, "bound", allocation=Allocation((3,), (1,), "r"))
    table.record_checkpoint(job, 4, "twin://job-x/step-4", {"why": "test", "nested": {"dropped": 1}})
    table.save(job)  # a checkpoint's job record is persisted with the next transition (or save)
    saved = plane.store.get_job("job-x")
    assert saved is not None and saved.state == "PLACING"
    again = Job.from_record(plane.store.get_job("job-x") or saved)
    assert again.status == job.status and again.chips == (3,)
    ck = plane.store.latest_checkpoint("job-x")
    assert ck is not None and (ck.step, ck.detail) == (4, {"why": "test"}) and job.status.checkpoint_step == 4


def test_a_gang_that_keeps_hanging_fails_as_user_code_after_the_hang_restarts() -> None:
    # A fabric that relaunches nothing itself (Ray): each hang ends the gang; the driver
    # relaunches it PODFLEET_HANG_RESTARTS times, then fails the job as its code's fault.
    plane, made = fake_plane()
    plane.hang_restarts = 1
    plane.create_cluster({"name": "p", "fabric": "local", "chips": 4, "spares": 1}, actor="t")
    advance(plane, 5)
    fab = made[0]
    job = plane.jobs.submit("p", {"model": "debug", "chips": 2, "steps": 100}, actor="t")
    advance(plane, 0.1)
    for n in (1, 2):
        chips = fab.launches[-1].chips
        fab.emit("worker-exited", job["id"], chip=chips[0], rank=0, cause="infra", gang_ended=True,
                 killed_by="hang", reason="rank 0 (chip 0) hung: no heartbeat for 30.2 s")
        advance(plane, 0.1)
        d = plane.jobs.describe(job["id"])
        if n == 1:
            assert d["state"] == "RECOVERING" and len(fab.launches) == 2 and d["runtime"]["hang_restarts"] == 1
            fab.emit("job-started", job["id"], chips=list(fab.launches[-1].chips))
            advance(plane, 0.1)
            assert plane.jobs.describe(job["id"])["state"] == "RUNNING"
    assert len(fab.launches) == 2  # not relaunched a third time
    assert d["state"] == "FAILED" and d["reason"].startswith("the job's code stopped responding: rank 0"), d
    assert "hang restarts allowed: 1" in d["reason"] and "user-code failure" in d["reason"]
    assert d["runtime"]["user_failures"] == 1 and d["runtime"]["infra_failures"] == 1
