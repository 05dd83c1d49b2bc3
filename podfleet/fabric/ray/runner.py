"""The Ray fabric's background work: start gangs (each on a starter thread, ``starter.py``),
poll actors, notice exits and hangs, end gangs.

Ray calls are made without the fabric's lock held (they can wait on the network); the
results are applied under the lock, re-checking that the job was not stopped meanwhile.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from podfleet.errors import ConflictError, NotFoundError
from podfleet.fabric.base import ChipState
from podfleet.fabric.ray import control, rankmove, standby, starter, supervisor, telemetry
from podfleet.fabric.ray.actor import WorkerActor
from podfleet.fabric.ray.gang import GangConfig
from podfleet.fabric.ray.jobs import (
    TERMINAL,
    ExitCause,
    RankRecord,
    RayJob,
    RayState,
    RunState,
    cause_of,
)
from podfleet.fabric.ray.nodes import NodeMap, RayNode
from podfleet.fabric.ray.probe import GCS_CHECK_FAILURES, gcs_unreachable

POLL_TIMEOUT_S = 2.0
NODE_REFRESH_S = 2.0  # how often the poller re-reads which Ray nodes are alive
# Reconnect attempts while the Ray cluster is unreachable: 1 s, doubling, at most 30 s.
RECONNECT_FIRST_S = 1.0
RECONNECT_MAX_S = 30.0
# A failing job's first cause is the one reported: a survivor's "peer lost" follows it.
_BLAME = (ExitCause.INFRA, ExitCause.USER_CODE, ExitCause.BAD_INPUT, ExitCause.PEER_LOST, ExitCause.STOPPED)


class RunnerHost(Protocol):
    """What the runner uses of the fabric (``RayFabric`` is the one): its settings and
    public helpers, declared here so this module never imports the fabric."""

    @property
    def resource(self) -> str: ...

    @property
    def placement_timeout_s(self) -> float: ...

    @property
    def hang_timeout_s(self) -> float: ...

    @property
    def poll_interval_s(self) -> float: ...

    @property
    def nodes(self) -> NodeMap: ...

    @property
    def gang(self) -> GangConfig: ...

    @property
    def spares(self) -> tuple[int, ...]: ...

    def chip_states(self) -> list[ChipState]: ...

    @property
    def gcs(self) -> tuple[str, int] | None: ...

    @property
    def namespace(self) -> str: ...

    @property
    def unreachable(self) -> str | None: ...

    def node_died(self, node: RayNode) -> None: ...

    def nodes_joined(self, nodes: Iterable[RayNode]) -> None: ...

    def link_lost(self, why: str) -> None: ...

    def reconnect(self) -> bool: ...

    def on_engine(self, fn: Callable[..., Any], *args: Any) -> None: ...

    def emit(self, kind: str, *, job_id: str | None = None, chip: int | None = None, **detail: Any) -> None: ...


class JobRunner:
    """Background work on the shared ``RayState``; ``fabric`` only for its public settings
    and helpers (bundle, actor options, worker config, emit)."""

    def __init__(self, state: RayState, fabric: RunnerHost) -> None:
        self.state = state
        self.f = fabric
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._actor_cls: Any = None
        self._supervisor_cls: Any = None
        self._nodes_read_mono = 0.0
        self._gcs_failures = 0  # GCS checks failed in a row
        self._backoff_s = RECONNECT_FIRST_S
        self._retry_mono = 0.0
        self.standbys = standby.Standbys(state.ray, fabric.namespace, standby.per_node(fabric.resource),
                                         state.standby_names)

    # --- threads --------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._poll_loop, name="ray-fabric-poller", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self.f.unreachable is None:
            self.standbys.close()

    def start_job(self, job: RayJob) -> None:
        threading.Thread(target=starter.start, args=(self, job), name=f"ray-start-{job.job_id}", daemon=True).start()

    def stop_job(self, job: RayJob) -> bool:
        """Stop the gang (engine thread): False when it had ended or was stopping already."""
        with self.state.lock:
            if job.state in TERMINAL or job.state is RunState.STOPPING:
                return False
            job.set_state(RunState.STOPPING)
            for r in job.ranks:
                if not r.done:
                    r.killed_by = "stop"
        self.teardown(job)
        with self.state.lock:
            for r in job.ranks:
                if not r.done:
                    r.cause = ExitCause.STOPPED
            job.set_state(RunState.STOPPED)
            job.reason = "stopped"
            self.state.free(job)
        return True

    def kill_rank(self, job: RayJob, rank: int) -> int | None:
        """Fault injection: kill one rank's actor (ray.kill); detected like any death.
        Returns the actor process's pid when its node reported it."""
        if not 0 <= rank < len(job.ranks):
            raise NotFoundError(f"job {job.job_id} has ranks 0-{len(job.ranks) - 1}, not {rank}", field="rank")
        r = job.ranks[rank]
        if job.state is not RunState.RUNNING or r.actor is None or r.done:
            raise ConflictError(f"rank {rank} of job {job.job_id} is not running (job {job.state.value})",
                                field="rank")
        if r.killed_by is not None:
            raise ConflictError(f"rank {rank} of job {job.job_id} is being ended already ({r.killed_by})",
                                field="rank")
        r.killed_by = "fault"
        self.state.ray.kill(r.actor, no_restart=True)
        pid = r.info.get("pid")
        return int(pid) if pid is not None else None

    def evict(self, chip: int) -> None:
        """A chip taken out of service under a running rank (a drain; engine thread): end
        that rank's actor, so the poller moves the rank alone as it moves a lost one
        (``rankmove.py``; a relaunch is the fallback). No Ray call while the GCS does not
        answer: the poller then treats the gang as lost."""
        if self.f.unreachable is not None or not self._gcs_answers():
            return
        with self.state.lock:
            held = self.state.chip_job.get(chip)
            job = self.state.jobs.get(held[0]) if held is not None else None
            live = (RunState.RUNNING, RunState.RECOVERING)  # during another rank's move: the gang relaunches
            if job is None or held is None or job.state not in live or held[1] >= len(job.ranks):
                return
            r = job.ranks[held[1]]
            if r.chip != chip or r.actor is None or r.done or r.killed_by is not None:
                return
            r.killed_by = "drain"
            job.log.append(f"[fabric] chip {chip} taken out of service under rank {r.rank}: its actor ends and "
                           "the rank moves")
            actor = r.actor
        with contextlib.suppress(Exception):  # gone already: the poller sees that too
            self.state.ray.kill(actor, no_restart=True)

    # --- what a start uses (starter.py), and a gang that cannot start ---------------------------
    def actor_class(self) -> Any:
        """``WorkerActor`` as a Ray actor class (and the supervisor's), made once."""
        if self._actor_cls is None:
            ray = self.state.ray
            self._actor_cls = ray.remote(WorkerActor)
            self._supervisor_cls = ray.remote(supervisor.GangSupervisor)
        return self._actor_cls

    def supervisor_class(self) -> Any:
        """``GangSupervisor`` as a Ray actor class (made with ``actor_class``)."""
        self.actor_class()
        return self._supervisor_cls

    def stopped(self) -> bool:
        """The runner was closed: a gang still waiting for the Ray cluster gives up."""
        return self._stop.is_set()

    def lose_gang(self, job: RayJob, blamed: RankRecord, why: str) -> None:
        """A gang that cannot start because a rank's node is gone: an infrastructure loss
        of that rank (the control plane moves it to another chip, or waits for one)."""
        self.teardown(job)
        with self.state.lock:
            if job.state in TERMINAL or job.state is RunState.STOPPING:
                return
            for r in job.ranks:
                r.cause = ExitCause.STOPPED if r is not blamed else ExitCause.INFRA
            blamed.result = {"exit_code": None, "error": why}
            job.set_state(RunState.FAILED)
            job.reason = _reason(blamed)
            job.cause = ExitCause.INFRA
            self.state.free(job)
        self.f.emit("worker-exited", job_id=job.job_id, chip=blamed.chip, rank=blamed.rank,
                    cause=ExitCause.INFRA.value, exit_code=None, error=why, killed_by=None, reason=job.reason,
                    infra=True, gang_ended=True)

    # --- polling ---------------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        while not self._stop.wait(self.f.poll_interval_s):
            if not self._link_up():
                continue
            if time.monotonic() - self._nodes_read_mono >= NODE_REFRESH_S:
                self.read_nodes()
                try:
                    self.standbys.refill(self.f.nodes, self.actor_class(), self.f.gang.actor_options())
                except Exception as exc:  # a standby is an optimisation: a move starts a cold actor
                    self.f.emit("standby-failed", reason=f"{type(exc).__name__}: {exc}")
            with self.state.lock:
                jobs = list(self.state.jobs.values())
            for job in jobs:
                if job.state in (RunState.RUNNING, RunState.RECOVERING):
                    try:
                        self._poll(job)
                    except Exception as exc:  # keep watching the other jobs
                        job.log.append(f"[fabric] poll error: {type(exc).__name__}: {exc}")

    def _link_up(self) -> bool:
        """Watch the GCS; while it is lost make no Ray call (a call in flight when a new
        head answers makes Ray abort the process) and reconnect with backoff."""
        f, now = self.f, time.monotonic()
        if f.unreachable is not None:
            if now < self._retry_mono:
                return False
            if f.reconnect():
                self._backoff_s = RECONNECT_FIRST_S
                self._gcs_failures = 0
                self._nodes_read_mono = now
                return True
            self._retry_mono = now + self._backoff_s
            self._backoff_s = min(self._backoff_s * 2, RECONNECT_MAX_S)
            return False
        if f.gcs is None or now - self._nodes_read_mono < NODE_REFRESH_S:
            return True
        why = gcs_unreachable(f.gcs)
        if why is None:
            self._gcs_failures = 0
            return True
        self._gcs_failures += 1
        self._nodes_read_mono = now
        if self._gcs_failures < GCS_CHECK_FAILURES:
            return True
        f.link_lost(why)
        self.lose_all(f.unreachable or why)
        self._retry_mono = now + self._backoff_s
        return False

    def _gcs_answers(self) -> bool:
        """Check the GCS right before a call that needs it (killing actors, removing a
        placement group): ranks dying is often the first sign of a lost head, and such a
        call would wait for the GCS forever. A GCS that does not answer is declared lost."""
        f = self.f
        if f.gcs is None:
            return True
        why = gcs_unreachable(f.gcs)
        if why is None:
            return True
        f.link_lost(why)
        self.lose_all(f.unreachable or why)
        self._retry_mono = time.monotonic() + self._backoff_s
        return False

    def lose_all(self, reason: str) -> None:
        """The Ray cluster is gone: every live gang is lost (its actors went with the head,
        or cannot be reached), without a Ray call. Each is reported as an infrastructure
        loss of the whole gang, so the control plane relaunches it once Ray is back."""
        lost: list[RayJob] = []
        with self.state.lock:
            for job in self.state.jobs.values():
                if job.state in TERMINAL or job.state is RunState.STOPPING:
                    continue
                for r in job.ranks:
                    r.actor = r.pg = None  # handles of the old session: never used again
                    if not r.done:
                        r.cause = ExitCause.INFRA
                        r.result = {"exit_code": None, "error": reason}
                job.pg = None
                job.supervisor = None  # went with the head, as the ranks did
                job.set_state(RunState.FAILED)
                job.reason = reason
                job.cause = ExitCause.INFRA
                job.log.append(f"[fabric] gang lost: {reason}")
                self.state.free(job)
                lost.append(job)
        for job in lost:
            r0 = job.ranks[0]
            self.f.emit("worker-exited", job_id=job.job_id, chip=None, rank=r0.rank, cause=ExitCause.INFRA.value,
                        exit_code=None, error=reason, killed_by=None, reason=reason, infra=True, gang_ended=True)

    def read_nodes(self) -> None:
        """Refresh which nodes are alive (for ``check_chip``); chips of a lost node fail."""
        self._nodes_read_mono = time.monotonic()
        try:
            records = self.state.ray.nodes()
        except Exception:  # the GCS is unreachable for now: the view just grows stale
            return
        with self.state.lock:
            changes = self.f.nodes.apply(records)
        for node in changes.died:
            self.f.on_engine(self.f.node_died, node)
        if changes.joined:
            self.f.on_engine(self.f.nodes_joined, changes.joined)

    def _poll(self, job: RayJob) -> None:
        f, ray = self.f, self.state.ray
        live = [r for r in job.ranks if not r.done and r.actor is not None]  # a moving rank has none yet
        # A rank's poll hands over its unacknowledged reports and, once it ended, its
        # result (the actor's journal); each poll acknowledges what the last one applied.
        refs = {r.actor.poll.remote(r.acked): r for r in live}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=POLL_TIMEOUT_S) if refs else ([], [])
        polled: list[tuple[RankRecord, dict[str, Any]]] = []
        finished: list[tuple[RankRecord, dict[str, Any] | None, str | None]] = []
        for ref in ready:
            r = refs[ref]
            try:
                p = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                finished.append((r, None, f"actor died: {_first_line(exc)}"))
                continue
            polled.append((r, p))
            if p.get("result") is not None:
                finished.append((r, p["result"], None))
        regroup = control.files(job, len(job.ranks)).get("regroup_file")
        # A rank lost with the head (its GCS port closed) is no rank move: the mover's Ray
        # calls would reach a dead GCS, where Ray aborts the whole process (seen: a fatal
        # check in GetAllNodeInfo). The gang ends and is relaunched once Ray is back.
        gcs = f.gcs
        if finished and gcs is not None and gcs_unreachable(gcs) is not None:
            regroup = None
        with self.state.lock:
            if job.state not in (RunState.RUNNING, RunState.RECOVERING):
                return
            for r, p in polled:
                self._apply(job, r, p)
            for r, result, died in finished:
                if r.done and r.cause is not ExitCause.INFRA:
                    continue
                self.settle(r, result, died)
                if rankmove.eligible(job, r, regroup if f.unreachable is None else None):
                    rankmove.begin(self, job, r, _reason(r))  # the other ranks live on
            now = time.monotonic()
            hung = [r for r in job.ranks if not r.done and r.armed and r.silent_s(now) > f.hang_timeout_s]
            for r in hung:
                silent = r.silent_s(now)
                r.killed_by = "hang"
                r.cause = ExitCause.INFRA
                r.result = {"exit_code": None, "error": f"no heartbeat for {silent:.1f} s"}
                f.emit("hang", job_id=job.job_id, chip=r.chip, rank=r.rank, heartbeat_age_s=silent)
            outcome = self._outcome(job)
            if outcome is not None and outcome[0] == "failed" and job.moving is not None:
                # A rank ended during a move (a survivor gave up, another rank lost): the
                # gang ends, charged to the rank that was being moved.
                outcome = ("failed", rankmove.blamed(job) or outcome[1])
        if outcome is not None:
            self._finish(job, *outcome)

    def end_gang(self, job: RayJob, blamed: RankRecord | None) -> None:
        """A rank move gave up (``rankmove.abort``): the gang ends, its loss charged to ``blamed``."""
        self._finish(job, "failed", blamed or job.ranks[0])

    @staticmethod
    def settle(r: RankRecord, result: dict[str, Any] | None, died: str | None) -> None:
        """A rank ended: with its result, or its actor died (``died`` says how)."""
        if died is not None:
            r.cause = ExitCause.STOPPED if r.killed_by == "stop" else ExitCause.INFRA
            r.result = {"exit_code": None, "error": died}
        else:
            assert result is not None
            r.result = result
            r.cause = cause_of(result)

    def _apply(self, job: RayJob, r: RankRecord, p: dict[str, Any], skip_ckpt_upto: int = -1) -> None:
        """One poll of a rank: its figures and its reports in order (a re-attaching plane
        skips checkpoints at or below the step it already recorded)."""
        f = self.f
        r.last_seen_mono = time.monotonic()
        r.cpu_percent = float(p.get("cpu_percent", 0.0))
        r.mem_bytes = float(p.get("mem_bytes", 0.0))
        r.mem_capacity_bytes = float(p.get("mem_total_bytes", 0.0))
        r.heartbeat_age_s = float(p.get("heartbeat_age_s", 0.0))
        for m in p.get("msgs", ()):
            r.acked = max(r.acked or 0, int(m.get("seq", 0)))
            kind = m.get("type")
            if kind == "checkpoint" and int(m.get("step", -1)) <= skip_ckpt_upto:
                continue
            if kind == "progress":
                r.armed = True
                r.step_time_s = float(m["step_time_s"])
                r.tokens_per_s = float(m["tokens_per_s"])
                telemetry.on_progress(job, r, m)
                if r.rank == 0:
                    job.step, job.loss = int(m["step"]), float(m["loss"])
                    rankmove.trained(self, job, job.step)
                    f.emit("progress", job_id=job.job_id, chip=r.chip, step=job.step, loss=job.loss,
                           tokens_per_s=r.tokens_per_s, step_time_s=r.step_time_s)
            elif kind == "log":
                job.log.append(f"[rank {r.rank}] {m.get('line', '')}")
                if r.rank == 0 and job.speed is not None:
                    job.speed.split_logged(str(m.get("line", "")))
            elif kind == "checkpoint":
                self._checkpoint(job, r, int(m["step"]), str(m.get("path", "")))
            elif kind == "regrouped":
                rankmove.finish(self, job, m)

    def replay(self, job: RayJob, journals: dict[int, dict[str, Any]], died: dict[int, str],
               checkpoint_step: int | None) -> int:
        """Apply what an adopted gang's ranks journaled while no plane read them (hold the
        lock); how many reports were replayed."""
        floor = checkpoint_step if checkpoint_step is not None else -1
        job.checkpoint_step = checkpoint_step
        replayed = 0
        for r in job.ranks:
            p = journals.get(r.rank)
            if p is None:
                self.settle(r, None, died.get(r.rank, "its actor is gone"))
                continue
            last = p.get("last_progress")
            if r.rank == 0 and last:
                job.step, job.loss = int(last["step"]), float(last["loss"])
            replayed += len(p.get("msgs", ()))
            self._apply(job, r, p, floor)
            if p.get("result") is not None:
                self.settle(r, p["result"], None)
        return replayed

    def _checkpoint(self, job: RayJob, r: RankRecord, step: int, path: str) -> None:
        """Commit a step once every rank's shard is durable (the worker contract)."""
        ranks = job.pending_ckpt.setdefault(step, set())
        ranks.add(r.rank)
        if len(ranks) < len(job.ranks) or job.checkpoint_dir is None:
            return
        del job.pending_ckpt[step]
        from podfleet.checkpoint import commit
        from podfleet.errors import PodfleetError

        try:
            commit(job.checkpoint_dir, job.job_id, step, len(job.ranks))
        except (OSError, PodfleetError) as exc:
            # A checkpoint_dir that is not shared storage is not visible here.
            job.log.append(f"[fabric] cannot commit checkpoint step {step}: {exc}")
            return
        job.checkpoint_step = step
        self.f.emit("checkpoint", job_id=job.job_id, chip=job.ranks[0].chip, step=step, path=job.checkpoint_dir)

    def _outcome(self, job: RayJob) -> tuple[str, RankRecord | None] | None:
        if all(r.cause is ExitCause.OK for r in job.ranks):
            return ("finished", None)
        failed = [r for r in job.ranks if r.done and r.cause is not ExitCause.OK]
        if not failed:
            return None
        return ("failed", min(failed, key=lambda r: (_BLAME.index(r.cause), r.rank)))  # type: ignore[arg-type]

    def _finish(self, job: RayJob, outcome: str, blamed: RankRecord | None) -> None:
        f, live = self.f, (RunState.RUNNING, RunState.RECOVERING)
        with self.state.lock:
            if job.state not in live:
                return
            for r in job.ranks:
                if not r.done:
                    r.killed_by = r.killed_by or "stop"
        self.teardown(job)
        with self.state.lock:
            if job.state not in live:
                return
            job.moving = job.recovery = None
            for r in job.ranks:
                if not r.done:
                    r.cause = ExitCause.STOPPED
            self.state.free(job)
            if outcome == "finished":
                job.set_state(RunState.FINISHED)
                job.reason = "all steps done"
            else:
                assert blamed is not None
                job.set_state(RunState.FAILED)
                job.reason = _reason(blamed)
                job.cause = blamed.cause
        if outcome == "finished":
            f.emit("job-finished", job_id=job.job_id, chip=job.ranks[0].chip, step=job.step, loss=job.loss)
        else:
            assert blamed is not None
            res = blamed.result or {}
            f.emit("worker-exited", job_id=job.job_id, chip=blamed.chip, rank=blamed.rank,
                   cause=blamed.cause.value if blamed.cause else None, exit_code=res.get("exit_code"),
                   error=res.get("error"), killed_by=blamed.killed_by, reason=job.reason,
                   infra=blamed.cause is ExitCause.INFRA,
                   # The whole gang ended with this rank: whoever launched it relaunches it.
                   gang_ended=True)

    def fail(self, job: RayJob, blamed: RankRecord | None, reason: str) -> None:
        self.teardown(job)
        with self.state.lock:
            if job.state in TERMINAL or job.state is RunState.STOPPING:
                return
            job.set_state(RunState.FAILED)
            job.reason = reason
            job.cause = ExitCause.INFRA
            self.state.free(job)
        self.f.emit("job-failed", job_id=job.job_id, chip=job.ranks[0].chip, reason=reason, cause="infra")

    def teardown(self, job: RayJob) -> None:
        """Kill every actor of the gang and release its placement groups (idempotent).
        Never while the Ray cluster is unreachable (the handles belong to a lost session)."""
        ray = self.state.ray
        if self.f.unreachable is not None or not self._gcs_answers():
            for r in job.ranks:
                r.actor = r.pg = None
            job.pg = None
            job.supervisor = None
            return
        for r in job.ranks:
            if r.actor is not None:
                with contextlib.suppress(Exception):  # already gone
                    ray.kill(r.actor, no_restart=True)
        if job.supervisor is not None:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(job.supervisor, no_restart=True)
            job.supervisor = None
        pgs = [pg for pg in [job.pg, *job.extra_pgs, *(r.pg for r in job.ranks)] if pg is not None]
        if pgs:
            from ray.util.placement_group import remove_placement_group

            for pg in pgs:
                with contextlib.suppress(Exception):  # already removed
                    remove_placement_group(pg)
        job.pg = None
        job.extra_pgs = []
        for r in job.ranks:
            r.pg = None


def _reason(r: RankRecord) -> str:
    err = (r.result or {}).get("error")
    what = {
        ExitCause.INFRA: "was killed" if r.killed_by == "fault" else "was lost",
        ExitCause.USER_CODE: "failed in the job's code",
        ExitCause.BAD_INPUT: "refused its input",
        ExitCause.PEER_LOST: "lost a peer",
        ExitCause.STOPPED: "was stopped",
    }.get(r.cause, "exited")  # type: ignore[arg-type]
    if r.killed_by == "hang":
        what = "hung"
    elif r.killed_by == "drain":
        what = "was drained off its chip"
    return f"rank {r.rank} (chip {r.chip}) {what}" + (f": {err}" if err else "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__

