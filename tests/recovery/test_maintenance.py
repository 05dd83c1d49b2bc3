"""Maintenance rollouts through the control plane on a fabric of worker processes (a fake
that runs the command for real and moves a rank off an isolated chip the way the local
fabric does), in virtual time: ranks moved away, the command's exit code and output
kept, a failing chip left cordoned with the reason, a pause after N failures."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.errors import ConflictError, InvalidInputError, UnknownNameError
from podfleet.fabric.base import (
    ChipState,
    CommandResult,
    FabricEvent,
    HostCommands,
    LinkState,
    RunState,
    RunStatus,
    WorkerGroupSpec,
    check_chip_transition,
)
from podfleet.fabric.commands import run_host_command
from podfleet.hardware.topology import Topology
from podfleet.recovery.maintenance import MaintenanceFabric
from podfleet.recovery.maintenanceservice import MaintenanceService
from podfleet.recovery.rollouts import FirmwareService
from podfleet.recovery.service import RecoveryService
from podfleet.security.policy import MFA_KEY, builtin, evaluate
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster, advance, make_plane


class HostFabric:
    """Slots on two hosts; isolating a slot that runs a rank moves the rank to a free
    healthy slot (what the local fabric's rank move reports), the other ranks untouched."""

    kind = "fake"

    def __init__(self, topology: Topology, timeline: Any, spares: tuple[int, ...], seed: int, *,
                 options: Mapping[str, Any] | None = None) -> None:
        self.topology, self.tl = topology, timeline
        self.states = [ChipState.HEALTHY] * topology.n_chips
        self.runs: dict[str, list[int]] = {}
        self.subs: list[Callable[[FabricEvent], None]] = []
        self.moves: list[tuple[int, int]] = []
        self.step = 3
        self.trains_after_move = True
        self.pending: list[dict[str, Any]] = []

    def attach(self, timeline: Any) -> None: ...

    def chip_states(self) -> list[ChipState]:
        return list(self.states)

    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None:
        check_chip_transition(self.states[chip], state)
        self.states[chip] = state
        if state is ChipState.ISOLATED:
            for job_id, chips in self.runs.items():
                if chip in chips:
                    self._move(job_id, chips.index(chip))

    def _move(self, job_id: str, rank: int) -> None:
        chips = self.runs[job_id]
        busy = {c for cs in self.runs.values() for c in cs}
        to = next(c for c in range(self.topology.n_chips) if c not in busy and self.states[c] is ChipState.HEALTHY)
        old, chips[rank] = chips[rank], to
        self.moves.append((old, to))
        self.emit("worker-exited", job_id, chip=old, rank=rank, cause="infra", exit_code=-9)
        self.emit("job-recovering", job_id, rank=rank, cause="infra", message=f"rank {rank} evicted")
        self.emit("job-resumed", job_id, chips=list(chips), source="replica", restored_step=self.step, attempt=2)
        self.pending.append(dict(chip=old, rank=rank, cause="infra", source="replica", restored_step=self.step,
                                 steps_lost=0, resume_s=0.5, moves={str(rank): [old, to]}, path="free",
                                 last_step=self.step, attempt=1))
        if self.trains_after_move:
            self.train(job_id)

    def train(self, job_id: str) -> None:
        """The re-formed gang trains its next step: as the local fabric does, the move's
        recovery closes then."""
        self.step += 1
        for rec in self.pending:
            self.emit("recovered", job_id, **rec)
        self.pending.clear()
        self.emit("progress", job_id, step=self.step, loss=1.0, tokens_per_s=10.0, step_time_s=0.1)

    def link_states(self) -> list[LinkState]:
        return [LinkState.UP] * len(self.topology.links)

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        return {}

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        return {}

    def launch(self, group: WorkerGroupSpec) -> None:
        self.runs[group.job_id] = list(group.chips)

    def stop(self, job_id: str) -> None:
        self.runs.pop(job_id, None)

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None:
        self.subs.append(callback)

    def run_status(self, job_id: str) -> RunStatus | None:
        chips = self.runs.get(job_id)
        return None if chips is None else RunStatus(job_id, RunState.RUNNING, tuple(chips), self.step)

    def run_logs(self, job_id: str) -> list[str]:
        return []

    def chip_hosts(self) -> list[str]:
        return ["host-a" if c < self.topology.n_chips // 2 else "host-b" for c in range(self.topology.n_chips)]

    def host_command(self, chip: int, argv: Sequence[str], *, env: Mapping[str, str],
                     timeout_s: float) -> Callable[[], CommandResult]:
        return lambda: run_host_command(self.chip_hosts()[chip], argv, env, timeout_s)

    def emit(self, kind: str, job_id: str, chip: int | None = None, **detail: Any) -> None:
        for cb in self.subs:
            cb(FabricEvent(kind, self.tl.now, chip=chip, job_id=job_id, detail=detail))


def _plane() -> tuple[ControlPlane, MaintenanceService, list[HostFabric]]:
    made: list[HostFabric] = []

    def factory(kind: str, topology: Topology, timeline: Any, spares: tuple[int, ...], seed: int, *,
                options: Mapping[str, Any] | None = None) -> HostFabric:
        made.append(HostFabric(topology, timeline, spares, seed, options=options))
        return made[-1]

    plane = ControlPlane(MemoryStore(), Timeline(seed=0), fabric_factory=factory)
    plane.create_cluster({"name": "p", "fabric": "local", "chips": 4}, actor="t")
    advance(plane, 5)
    return plane, MaintenanceService(plane), made


def _until(plane: ControlPlane, svc: MaintenanceService, rid: str, states: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + 20
    while (r := svc.describe("p", rid))["state"] not in states:
        assert time.monotonic() < deadline, r
        advance(plane, 1)
        time.sleep(0.01)  # the command runs on a thread, in real time
    return r


def test_ranks_move_away_the_command_runs_on_each_chip_and_the_chips_return(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PODFLEET_TOKEN", "pf_secret-of-the-server")
    plane, svc, [fab] = _plane()
    assert isinstance(fab, MaintenanceFabric) and isinstance(fab, HostCommands)
    job = plane.jobs.submit("p", {"model": "debug", "chips": 2, "steps": 10**6}, actor="t")
    advance(plane, 1)
    before = list(fab.runs[job["id"]])
    r = svc.start("p", "sh -c 'echo chips=$PODFLEET_CHIPS host=$PODFLEET_HOST token=${PODFLEET_TOKEN:-none}'",
                  actor="u-1:admin")
    assert r["state"] == "running" and r["chips"] == 4
    out = _until(plane, svc, r["id"], ("succeeded", "failed", "paused"))
    assert out["state"] == "succeeded", out
    assert sorted(out["done"]) == [0, 1, 2, 3] and out["failed"] == {}
    assert [run["exit_code"] for run in out["runs"]] == [0, 0, 0, 0]
    # The chips no rank ran on first (2, 3), then the job's: each rank moves once, onto a
    # chip maintained already.
    assert [run["output"].strip() for run in out["runs"]] == [
        "chips=2 host=host-b token=none", "chips=3 host=host-b token=none",
        "chips=0 host=host-a token=none", "chips=1 host=host-a token=none"]
    assert len(fab.moves) == 2 and all(to != 1 for _, to in fab.moves)  # each rank once, onto a done chip
    # Each chip that ran a rank gave it up before its command ran; the job kept running.
    assert {old for old, _ in fab.moves} >= set(before)
    view = plane.jobs.describe(job["id"])
    assert view["state"] == "RUNNING"
    cl = plane.describe_cluster("p")
    assert cl["cordoned"] == [] and cl["draining"] == []
    assert fab.states == [ChipState.HEALTHY] * 4
    audit = plane.store.list_audit(limit=500)
    steps = [a for a in audit if a.action == "MaintenanceStep"]
    assert len(steps) == 5 and steps[-1].detail["state"] == "succeeded"
    assert any(a.action == "DrainChip" and a.actor == "system:maintenance" for a in audit)
    assert any(a.action == "StartMaintenance" and a.actor == "u-1:admin" for a in audit)


def test_a_failing_chip_stays_cordoned_and_the_rollout_pauses_then_resumes() -> None:
    plane, svc, [fab] = _plane()
    r = svc.start("p", """sh -c 'if [ "$PODFLEET_CHIPS" = 1 ]; then echo disk full; exit 3; fi'""",
                  max_failures=1)
    out = _until(plane, svc, r["id"], ("paused", "succeeded", "failed"))
    assert out["state"] == "paused", out
    assert out["done"] == [0] and out["failed"] == {"1": "the command exited 3 (disk full)"}  # no job: chip order
    assert out["runs"][1]["exit_code"] == 3 and "disk full" in out["runs"][1]["output"]
    assert fab.states[1] is ChipState.ISOLATED
    assert plane.describe_cluster("p")["cordoned"] == [1]
    with pytest.raises(ConflictError, match="still paused"):
        svc.start("p", "true")
    svc.resume("p", r["id"])
    out = _until(plane, svc, r["id"], ("succeeded", "failed"))
    assert out["state"] == "failed" and sorted(out["done"]) == [0, 2, 3]
    assert "stay cordoned: chip 1: the command exited 3" in out["reason"]
    assert plane.describe_cluster("p")["cordoned"] == [1] and fab.states[1] is ChipState.ISOLATED
    with pytest.raises(ConflictError, match="not paused"):
        svc.resume("p", r["id"])


def test_by_host_one_command_per_host_and_missing_commands_are_recorded() -> None:
    plane, svc, _ = _plane()
    r = svc.start("p", "no-such-maintenance-tool --now", unit="host", max_failures=5)
    out = _until(plane, svc, r["id"], ("failed", "succeeded", "paused"))
    assert out["state"] == "failed"
    assert [(run["host"], run["chips"]) for run in out["runs"]] == [("host-a", [0, 1]), ("host-b", [2, 3])]
    assert all(run["exit_code"] is None and "could not start" in run["error"] for run in out["runs"])
    assert plane.describe_cluster("p")["cordoned"] == [0, 1, 2, 3]


def test_bad_requests_are_refused_with_a_sentence() -> None:
    _, svc, _ = _plane()
    with pytest.raises(UnknownNameError, match="chip, host"):
        svc.start("p", "true", unit="rack")
    with pytest.raises(InvalidInputError, match="--command"):
        svc.start("p", "   ")
    with pytest.raises(InvalidInputError, match="max_failures"):
        svc.start("p", "true", max_failures=0)
    twin = make_plane()
    active_cluster(twin)
    with pytest.raises(ConflictError, match="no HostCommands"):
        MaintenanceService(twin).start("pod", "true")
    assert svc.list("p") == []


def test_starting_maintenance_needs_a_second_factor_under_mfa_required() -> None:
    policies = [builtin("ClusterAdmin"), builtin("MFARequired")]
    for action in ("StartMaintenance", "ResumeMaintenance"):
        assert not evaluate(policies, action, "cluster/p", {MFA_KEY: "false"}).allowed
        assert evaluate(policies, action, "cluster/p", {MFA_KEY: "true"}).allowed


def test_a_cluster_deleted_under_a_rollout_ends_it_failed_not_the_engine() -> None:
    plane, svc, _ = _plane()
    r = svc.start("p", "sh -c 'sleep 0.3'")
    rollouts = svc.by_cluster[r["cluster_id"]]
    plane.delete_cluster("p", actor="t")
    deadline = time.monotonic() + 20
    while rollouts.get(r["id"]).state.value == "running":
        assert time.monotonic() < deadline
        advance(plane, 1)
        time.sleep(0.01)
    got = rollouts.get(r["id"])
    assert got.state.value == "failed" and got.reason.startswith("stopped: "), got.reason


def test_firmware_update_on_a_host_command_fabric_is_a_maintenance_rollout_of_the_admins_command() -> None:
    plane, svc, _ = _plane()
    recovery = RecoveryService(plane.table, plane.tl, plane.render, resolve=plane.resolve)
    with pytest.raises(ConflictError, match="PODFLEET_FIRMWARE_COMMAND"):
        FirmwareService(plane, recovery, svc).start_firmware("p", "2.22.0")
    fw = FirmwareService(plane, recovery, svc, command="sh -c 'echo flashing $1 on $PODFLEET_CHIPS' fw {version}")
    r = fw.start_firmware("p", "2.22.0", unit="node", actor="u-2:op")
    assert r["id"].startswith("mt-") and r["version"] == "2.22.0" and r["unit"] == "host"
    _until(plane, svc, r["id"], ("succeeded", "failed", "paused"))
    [out] = fw.firmware_rollouts("p")
    assert out["state"] == "succeeded" and sorted(out["done"]) == [0, 1, 2, 3]
    assert [run["output"].strip() for run in out["runs"]] == ["flashing 2.22.0 on 0,1", "flashing 2.22.0 on 2,3"]
    started = [a for a in plane.store.list_audit(limit=500) if a.action == "StartFirmwareUpdate"]
    assert started[-1].actor == "u-2:op" and started[-1].detail.get("version") == "2.22.0", started[-1]
    svc.start("p", "true")  # a plain maintenance rollout is not a firmware update
    assert [x["id"] for x in fw.firmware_rollouts("p")] == [r["id"]]


def test_the_next_chip_waits_until_the_moved_job_trains_again() -> None:
    plane, svc, [fab] = _plane()
    fab.trains_after_move = False
    job = plane.jobs.submit("p", {"model": "debug", "chips": 2, "steps": 10**6}, actor="t")
    advance(plane, 1)
    r = svc.start("p", "true")
    deadline = time.monotonic() + 20
    while len(fab.moves) < 1:
        assert time.monotonic() < deadline
        advance(plane, 1)
        time.sleep(0.01)
    for _ in range(20):  # the gang re-formed but trains no step: chip 1's rank is not moved yet
        advance(plane, 1)
        time.sleep(0.01)
    assert len(fab.moves) == 1 and svc.describe("p", r["id"])["state"] == "running"
    fab.train(job["id"])
    out = _until(plane, svc, r["id"], ("succeeded", "failed", "paused"))
    assert out["state"] == "succeeded" and len(fab.moves) == 2
