"""The Ray fabric's fault log and heartbeat ages from its own events and rank records
(``fabric/ray/faultlog.py``, ``fabric/ray/telemetry.py``), and where a work split goes in
each state of a gang (``fabric/ray/control.py``): no Ray needed; the real cluster's kill
and hang are in test_ray_fabric.py, its rebalancing in test_ray_balance.py."""

from __future__ import annotations

import json
import os

from podfleet.fabric.base import FabricEvent, WorkerGroupSpec
from podfleet.fabric.ray import control
from podfleet.fabric.ray.faultlog import FaultLog
from podfleet.fabric.ray.jobs import RankRecord, RayJob, RayState, RunState
from podfleet.fabric.ray.nodes import NodeMap
from podfleet.fabric.ray.telemetry import chip_metrics, heartbeat_age
from podfleet.training.data import split_samples


def exited(**detail: object) -> FabricEvent:
    return FabricEvent("worker-exited", 1.0, chip=3, job_id="j", detail={"rank": 1, **detail})


def test_a_starting_rank_is_never_a_stalled_heartbeat() -> None:
    job = RayJob(WorkerGroupSpec("j", (0, 1), "debug", 10), "pack", "/tmp/j", None, state=RunState.RUNNING)
    starting, silent = RankRecord(0, 0, heartbeat_age_s=7.0), RankRecord(1, 1, armed=True, last_seen_mono=100.0)
    job.ranks = [starting, silent]
    assert heartbeat_age(starting, 200.0) == 0.0  # still importing torch: no step to be late with
    assert heartbeat_age(silent, 112.5) == 12.5  # trained, then stopped answering polls
    state = RayState(None)
    state.jobs["j"] = job
    m = chip_metrics(state, NodeMap([], "CPU", 1.0, 3), 3, {})
    assert m["busy"].tolist() == [1.0, 1.0, 0.0] and m["heartbeat_age_s"][0] == 0.0 and m["heartbeat_age_s"][1] > 10


def test_the_fault_log_keeps_faults_with_their_cause_and_drops_our_own_kills() -> None:
    log = FaultLog(keep=3)
    assert log.observe(exited(exit_code=None, killed_by="stop", error="actor died")) is None
    assert log.observe(exited(exit_code=None, killed_by="hang", error="no heartbeat")) is None
    assert log.observe(exited(exit_code=0)) is None  # a clean end
    assert log.observe(exited(exit_code=75)) is None  # peer lost: the first rank's fault is the one logged
    assert log.observe(FabricEvent("progress", 1.0, chip=3, job_id="j", detail={"step": 1})) is None
    died = log.observe(exited(exit_code=None, killed_by=None, error="actor died: worker process died"))
    node = log.observe(exited(exit_code=None, error="actor died: The actor is dead because its node has died."))
    code = log.observe(exited(exit_code=1, error="ValueError"))
    sig = log.observe(exited(exit_code=-9))
    assert died is not None and died.detail["observed"] == "signal" and died.detail["cause"] == "infra"
    assert "injected_kill" not in died.detail
    assert node is not None and node.detail["observed"] == "node-lost"
    assert code is not None and (code.detail["observed"], code.detail["cause"]) == ("exit", "user-code")
    assert sig is not None and sig.detail["signal"] == "SIGKILL"
    assert [e.detail["observed"] for e in log.all()] == ["node-lost", "exit", "signal"]  # bounded, oldest first
    head = log.observe(FabricEvent("worker-exited", 2.0, chip=None, job_id="j", detail={
        "rank": 0, "exit_code": None, "error": "the Ray cluster at 10.0.0.1:6379 is unreachable (refused)"}))
    assert head is not None and head.detail["observed"] == "cluster-unreachable"  # no worker-killed alert
    lost = log.observe(FabricEvent("chip-failed", 2.0, chip=5, detail={"reason": "gone", "node_id": "n" * 56}))
    assert lost is not None and lost.detail["observed"] == "node-lost" and lost.chip == 5


class _Actor:
    """A rank's actor as ``control`` uses it: ``actor.control.remote(path, doc)``."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, object]]] = []
        self.control = self

    def remote(self, path: str, doc: str) -> None:
        self.sent.append((path, json.loads(doc)))


def test_a_split_given_before_the_gang_trains_is_kept_for_its_start() -> None:
    """The balancer takes a split as applied and never sends it again: a gang placing keeps
    it for the ranks it starts, a gang starting gets it in rank 0's control file, and only
    a gang that is stopping drops it."""
    spec = WorkerGroupSpec("j", (0, 1), "debug", 10, options={"global_batch": 24})
    placing = RayJob(spec, "pack", "/tmp/j", None)
    placing.ranks = [RankRecord(0, 0), RankRecord(1, 1)]
    control.set_work_split(placing, [3, 1])
    assert placing.shares == (18, 6) and control.files(placing, 2)["shares"] == (18, 6)
    assert "for the ranks it starts (job placing)" in placing.log[-1]

    starting = RayJob(spec, "pack", "/tmp/j", None, state=RunState.STARTING)
    rank0, rank1 = _Actor(), _Actor()
    starting.ranks = [RankRecord(0, 0, actor=rank0), RankRecord(1, 1, actor=rank1)]
    control.set_work_split(starting, [1, 3])
    want = split_samples([1.0, 3.0], 24)
    assert starting.shares == want and want[0] < want[1] and rank1.sent == []  # rank 0 broadcasts it
    assert rank0.sent == [(control.files(starting, 2)["split_file"], {"shares": list(want)})]

    stopping = RayJob(spec, "pack", "/tmp/j", None, state=RunState.STOPPING)
    other = _Actor()
    stopping.ranks = [RankRecord(0, 0, actor=other), RankRecord(1, 1)]
    control.set_work_split(stopping, [1, 3])
    assert stopping.shares == () and other.sent == [] and "not applied: job stopping" in stopping.log[-1]


def test_a_child_s_progress_keeps_its_own_end_of_step_time() -> None:
    """A rank run as a child under the job's uid (an actor that is root) reports through a
    pipe the actor relays: the per-rank speed is measured from the child's own times, so
    the relay's delay (the actor's thread waking up late on a loaded host) is no part of it."""
    from podfleet.fabric.ray.actor import _BufferReporter
    from podfleet.fabric.ray.child import _relay

    read, write = os.pipe()
    with os.fdopen(write, "w") as f:
        for step, t in ((1, 1000.25), (2, 1000.75)):
            f.write(json.dumps({"type": "progress", "rank": 1, "t": t, "step": step, "loss": 2.0,
                                "tokens_per_s": 10.0, "step_time_s": 0.4}) + "\n")
        f.write(json.dumps({"type": "log", "rank": 1, "t": 1000.8, "line": "hi"}) + "\n")
    reporter = _BufferReporter()
    _relay(read, reporter)
    progress = [m for m in reporter.msgs if m["type"] == "progress"]
    assert [(m["step"], m["t"], m["step_time_s"]) for m in progress] == [(1, 1000.25, 0.4), (2, 1000.75, 0.4)]
    assert reporter.last_progress is progress[-1] and list(reporter.history) == progress
    log = next(m for m in reporter.msgs if m["type"] == "log")
    assert log["line"] == "hi" and log["t"] > 1e9  # stamped by the actor, as before
