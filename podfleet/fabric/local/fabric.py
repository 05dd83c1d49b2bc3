"""``LocalFabric``: each chip is a worker slot on this host (a CPU process, or a CUDA device).

Threads: one reader per worker process (its report pipe), one monitor (telemetry and
hang detection). Those threads never change fabric or job state themselves: they hand
a callable to ``timeline.submit`` (or, with no timeline attached, to a dispatcher
thread; ``delivery.py``), so state changes and ``FabricEvent`` callbacks happen on one thread, the
engine's. An RLock guards the state too, for callers on other threads (tests, the CLI).

What leaves the fabric from a worker (logs, failure tails, event details) passes a
``security.redact.Redactor`` first: a secret a job got hold of is not published.
"""

from __future__ import annotations

import functools
import os
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from podfleet.checkpoint import keys
from podfleet.errors import ConflictError, InvalidInputError, NotFoundError, UnknownNameError
from podfleet.fabric.base import (
    DEFAULT_HANG_RESTARTS,
    Adoption,
    ChipState,
    CollectiveRow,
    CommandResult,
    FabricEvent,
    LinkState,
    MatmulRate,
    RunState,
    RunStatus,
    WorkerGroupSpec,
    check_chip_transition,
)
from podfleet.fabric.commands import run_host_command
from podfleet.fabric.local import control, gangstart, probes, rankmove, reattach, reports, telemetry
from podfleet.fabric.local.agent.client import AgentSpawner
from podfleet.fabric.local.delivery import Delivery
from podfleet.fabric.local.faultlog import FaultLog
from podfleet.fabric.local.jobs import TERMINAL, JobStatus, LocalJob
from podfleet.fabric.local.monitor import Monitor
from podfleet.fabric.local.pool import WorkerPool
from podfleet.fabric.local.process import Message, WorkerProcess
from podfleet.fabric.local.recovery import handle_exit
from podfleet.fabric.local.spawner import Spawner
from podfleet.fabric.local.speed import RankSpeed
from podfleet.fabric.local.state import LocalState
from podfleet.hardware.topology import SwitchedTopology
from podfleet.security.files import private_dir
from podfleet.security.jobfiles import write_for_job
from podfleet.security.redact import Redactor
from podfleet.security.sandbox import from_env
from podfleet.training.config import KEY_ENV_DEFAULT

_HOST = gangstart.HOST  # every slot's worker runs on this host


class LocalFabric:
    """Capabilities: ``Introspection``, ``WorkerKill``, ``WorkerSlowdown``, ``Reattachable`` (with an agent), ``Closeable``, ``Rebalanceable``,
    ``OnDemandCheckpoints`` (the built-in loop saves at its next step boundary and holds there),
    ``ChipCheck``, ``WorkerPlacement``, ``TelemetrySource`` (what its monitor measures: CPU, memory,
    step time, samples/s, heartbeat age per slot; NVML where GPUs exist), ``HardwareErrors``
    (its workers' faults: hangs, outside kills, OOM kills, crashes; ``faultlog``),
    ``ComputeProbe`` and ``CollectiveProbe`` (``probes``: real kernels on spawned workers)."""

    kind = "local"

    def __init__(
        self,
        n_slots: int,
        timeline: Any = None,
        *,
        spares: tuple[int, ...] = (),
        workdir: str | Path | None = None,
        key_file: str | None = None,
        hang_timeout_s: float = 1.0,
        max_hang_restarts: int = DEFAULT_HANG_RESTARTS,
        startup_timeout_s: float = 180.0,
        replica_grace_s: float = 3.0,
        sample_interval_s: float = 0.5,
        warm_workers: int = 0,
        refill_delay_s: float = 5.0,
        chip_env: Callable[[int], Mapping[str, str]] | None = None,
        agent: str | Path | None = None,
    ) -> None:
        if n_slots < 1:
            raise InvalidInputError(f"n_slots must be >= 1, got {n_slots}", field="chips")
        bad = [c for c in spares if not 0 <= c < n_slots]
        if bad:
            raise InvalidInputError(f"spares {bad} not in [0, {n_slots})", field="spares")
        self.n_slots, self.spares = n_slots, tuple(spares)
        # Who workers run as, first: a root server that would run job code as root refuses
        # here (the fix in the message), before any thread or directory exists.
        sandbox = from_env()
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="podfleet-local-"))
        if agent is None:
            private_dir(self.workdir)  # checkpoints and logs: owner-only
        else:
            # Owner-only too, but the search bit a running job's uid was given to reach its
            # directory (``security.jobfiles.prepare_job_dir``) stays: the agent's workers
            # run on through this restart and must not lose their checkpoint directory.
            self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
            mode = stat.S_IMODE(self.workdir.stat().st_mode)
            if mode & 0o066:
                self.workdir.chmod(mode & ~0o066)
        self.hang_timeout_s, self.startup_timeout_s = hang_timeout_s, startup_timeout_s
        # A job whose ranks keep hanging (code that holds the GIL, or blocks without a
        # heartbeat) is restarted this many times, then fails as its own code's fault.
        self.max_hang_restarts = max_hang_restarts
        self.replica_grace_s, self.sample_interval_s = replica_grace_s, sample_interval_s
        self.warm_workers, self.refill_delay_s = warm_workers, refill_delay_s
        # Extra environment per slot (e.g. the Neuron fabric's NEURON_RT_VISIBLE_CORES).
        self.chip_env = chip_env
        self._nvml = telemetry.Nvml.open()
        self.n_gpus = self._nvml.count if self._nvml else 0
        # Loopback / shared memory between slots: nominal figures for a single host.
        self.topology = SwitchedTopology(f"local-{n_slots}", "cuda" if self.n_gpus else "cpu", n_slots, 10e9, 20e-6)
        key_from_env = key_file is None and bool(os.environ.get(KEY_ENV_DEFAULT))
        if key_file is None and not key_from_env:
            # One KEK per workdir, kept across restarts so old checkpoints stay readable,
            # and kept outside the workdir so the checkpoint tree never holds its own key.
            key_file = str(keys.ensure_kek_file(self.workdir))
        self.key_file = key_file
        self.redactor = Redactor.for_server(key_files=[key_file])
        self._chips = [ChipState.HEALTHY] * n_slots
        self._busy: dict[int, str] = {}
        self.faults = FaultLog()
        self.state = LocalState(n_slots, telemetry.empty(n_slots, bool(self.n_gpus)))
        self._delivery = Delivery(self.state, self.redactor, self.faults)  # starts the dispatcher thread
        self.events = self._delivery.events
        keep = (KEY_ENV_DEFAULT,) if key_from_env else ()
        # Who parents the workers (``spawner``): this process, or the host's agent, whose
        # workers outlive this process and are adopted by the next plane (``adopt``).
        self._pool: Spawner
        if agent is not None:
            self._pool = AgentSpawner(Path(agent), self.workdir, n_gpus=self.n_gpus, warm_workers=warm_workers,
                                      refill_delay_s=refill_delay_s, keep_env=keep,
                                      chip_env={c: dict(chip_env(c)) for c in range(n_slots)} if chip_env else None)
        else:
            self._pool = WorkerPool(self.workdir, n_gpus=self.n_gpus, warm_workers=warm_workers,
                                    refill_delay_s=refill_delay_s, closed=self.state.closed, deliver=self.deliver,
                                    extra_env=chip_env, keep_env=keep, sandbox=sandbox)
        self._monitor = Monitor(self.state, sampler=telemetry.ProcessSampler(), nvml=self._nvml, n_gpus=self.n_gpus,
                                hang_timeout_s=hang_timeout_s, startup_timeout_s=startup_timeout_s,
                                sample_interval_s=sample_interval_s, deliver=self.deliver, emit=self.emit)
        self._monitor_thread = threading.Thread(target=self._monitor.watch, name="local-fabric-monitor",
                                                daemon=True)
        self._monitor_thread.start()
        if timeline is not None:
            self.attach(timeline)
        with self.state.lock:
            self._pool.refill()

    # --- Fabric protocol --------------------------------------------------------------
    def attach(self, timeline: Any) -> None:
        self._delivery.timeline = timeline

    def chip_states(self) -> list[ChipState]:
        with self.state.lock:
            return list(self._chips)

    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None:
        with self.state.lock:
            self.topology.check_chip(chip)
            check_chip_transition(self._chips[chip], state)
            self._chips[chip] = state
            self.emit("chip-state", chip=chip, state=state.value, reason=reason)
            job_id = self._busy.get(chip)
            if job_id and state in (ChipState.FAILED, ChipState.ISOLATED):
                # Taking a slot away from a running job evicts its worker; recovery moves the rank.
                for wp in self.state.jobs[job_id].workers.values():
                    if wp.chip == chip and wp.alive:
                        wp.kill("fault")

    def link_states(self) -> list[LinkState]:
        return [LinkState.UP] * len(self.topology.links)

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        with self.state.lock:
            return telemetry.with_scan_metrics({k: v.copy() for k, v in self.state.metrics.items()})

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        return telemetry.link_view(len(self.topology.links))

    # --- TelemetrySource, HardwareErrors ------------------------------------------------------
    def telemetry_metrics(self) -> frozenset[str]:
        """What the monitor and the workers' reports measure; the scan's other names are NaN."""
        return telemetry.measured(gpus=bool(self.n_gpus), speed=True)

    def hardware_errors(self) -> list[FabricEvent]:
        with self.state.lock:
            return self.faults.all()

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None:
        with self.state.lock:
            self._delivery.subs.append(callback)

    def launch(self, group: WorkerGroupSpec) -> None:
        with self.state.lock:
            if group.job_id in self.state.jobs and self.state.jobs[group.job_id].state not in TERMINAL:
                raise ConflictError(f"job {group.job_id} is already running on this fabric")
            if not group.chips:
                raise InvalidInputError("a worker group needs at least one chip", field="chips")
            for c in group.chips:
                self.topology.check_chip(c)
                if self._chips[c] is not ChipState.HEALTHY:
                    raise ConflictError(f"chip {c} is {self._chips[c].value}, not healthy")
                if c in self._busy:
                    raise ConflictError(f"chip {c} is busy with job {self._busy[c]}")
            if len(set(group.chips)) != len(group.chips):
                raise InvalidInputError(f"chips repeat: {list(group.chips)}", field="chips")
            job = gangstart.new_job(group, self.workdir, self.key_file)
            self.state.jobs[group.job_id] = job
            for c in job.chips:
                self._busy[c] = group.job_id
            self.start_attempt(job, resume=job.base_cfg.resume)
            self.emit("job-started", job_id=group.job_id, chips=list(job.chips), attempt=job.attempt)

    def stop(self, job_id: str) -> None:
        with self.state.lock:
            job = self._job(job_id)
            if job.state in TERMINAL or job.state is RunState.STOPPING:
                return
            job.set_state(RunState.STOPPING)
            # The slots are free at once: the control plane may place the next job on them
            # while these workers exit (SIGTERM now, SIGKILL after 2 s).
            for c in job.chips:
                if self._busy.get(c) == job_id:
                    del self._busy[c]
            live = [wp for wp in job.workers.values() if wp.alive]
            for wp in live:
                wp.kill("stop", signal.SIGTERM)
            # Exits not yet handled will finish the job from handle_exit, in event order.
            if all(wp.exit_handled for wp in job.workers.values()):
                self.finish(job, RunState.STOPPED, "stopped")
                return
            attempt = job.attempt
            threading.Timer(2.0, lambda: self.deliver(self._force_stop, job, attempt)).start()

    # --- capabilities: Rebalanceable, WorkerKill, Introspection, Closeable (control.py) -----
    def set_work_split(self, job_id: str, shares: Sequence[int]) -> None:
        """Give rank r ``shares[r]`` / sum of the global batch from the workers' next step
        (the file rank 0 reads between steps); later gangs of the job start with it."""
        with self.state.lock:
            control.set_work_split(self._job(job_id), shares, self._write_job_file)

    def slow_worker(self, job_id: str, rank: int, factor: float) -> None:
        """Fault injection: rank ``rank`` computes ``factor`` times slower per sample from its
        next step (1.0 restores it); later gangs of the job keep it (training/loop ``SlowDown``)."""
        with self.state.lock:
            control.slow_worker(self._job(job_id), rank, factor, self._write_job_file)

    def checkpoint_now(self, job_id: str) -> int | None:
        """OnDemandCheckpoints: ask the gang to save at its next step boundary and hold
        there (the request file rank 0 reads between steps, training/loop.py). Returns the
        last step every rank completed: the checkpoint reported (``run_status``'s
        ``checkpoint_step``) holds at least it. None when the job does not run here."""
        with self.state.lock:
            job = self.state.jobs.get(job_id)
            if job is None or job.state is not RunState.RUNNING:
                return None
            return control.checkpoint_now(job, self._write_job_file)

    def set_ring_order(self, job_id: str, ring: Sequence[int]) -> None:
        """One host's workers share loopback / shared memory: there is no ring to choose; recorded."""
        with self.state.lock:
            self._job(job_id).log.append(f"ring order {list(ring)} noted (loopback: no effect)")


    # --- ChipCheck, WorkerPlacement -------------------------------------------------------------
    def check_chip_health(self, chip: int) -> str | None:
        """A slot passes when it is healthy and no live worker runs on it."""
        self.topology.check_chip(chip)
        state = self._chips[chip]
        if state not in (ChipState.HEALTHY, ChipState.DEGRADED):
            return f"slot {chip} is {state.value}"
        live = [wp for wp in self.state.live_workers() if wp.chip == chip]
        return f"slot {chip} still runs pid {live[0].pid}" if live else None

    def chip_hosts(self) -> list[str]:
        return [_HOST] * self.n_slots

    def host_command(self, chip: int, argv: Sequence[str], *, env: Mapping[str, str],
                     timeout_s: float) -> Callable[[], CommandResult]:
        """HostCommands: every slot is on this host, so the command runs here."""
        self.topology.check_chip(chip)
        return functools.partial(run_host_command, _HOST, tuple(argv), dict(env), timeout_s)

    def chip_workers(self) -> dict[int, dict[str, Any]]:
        return {wp.chip: {"job_id": wp.cfg.job_id if wp.cfg else None, "rank": wp.rank, "node_id": _HOST,
                          "ip": "127.0.0.1", "pid": wp.pid} for wp in self.state.live_workers()}

    def kill_worker(self, job_id: str, rank: int, sig: int = signal.SIGKILL) -> int | None:
        """Fault injection: kill one rank's process (an infrastructure failure). Returns its pid."""
        with self.state.lock:
            job = self._job(job_id)
            if rank not in job.workers:
                raise InvalidInputError(f"rank {rank} not in [0, {len(job.workers)})", field="rank")
            wp = job.workers[rank]
            if not wp.alive:
                raise ConflictError(f"rank {rank} of job {job_id} is not running")
            wp.kill("fault", sig)
            return wp.pid

    def run_status(self, job_id: str) -> RunStatus | None:
        with self.state.lock:
            if job_id not in self.state.jobs:
                return None
            st = self.job_status(job_id)
        return RunStatus(st.job_id, RunState(st.state.value), st.chips, st.step, st.loss, st.attempt,
                         st.infra_failures, st.user_failures, st.max_retries, st.reason, st.checkpoint_step,
                         st.log_tail)

    def run_logs(self, job_id: str) -> list[str]:
        with self.state.lock:
            job = self.state.jobs.get(job_id)
            return self.redactor.lines(job.log) if job is not None else []

    # --- probes (ComputeProbe, CollectiveProbe): real kernels on this host's workers -----------
    def matmul_dtypes(self) -> tuple[str, ...]:
        return ("bf16", "fp16", "fp32") if self.n_gpus else ("bf16", "fp32")

    def matmul_probe(self, chips: Sequence[int], dtype: str) -> Callable[[], list[MatmulRate]]:
        slots = [int(c) for c in chips]
        for c in slots:
            self.topology.check_chip(c)
        if dtype not in self.matmul_dtypes():
            raise UnknownNameError("dtype", dtype, self.matmul_dtypes(), field="dtype")

        def measure() -> list[MatmulRate]:  # spawns one process per slot: never on the engine
            return [replace(r, chip=slots[r.chip]) for r in probes.matmuls(len(slots), dtype)]

        return measure

    def collective_groups(self) -> Mapping[str, tuple[int, ...]]:
        return {"local": tuple(range(self.topology.n_chips))}

    def collective_probe(self, group: str, ops: Sequence[str],
                         sizes_bytes: Sequence[int]) -> Callable[[], list[CollectiveRow]]:
        groups = self.collective_groups()
        if group not in groups:
            raise UnknownNameError("collective group", group, groups, field="group")
        world = len(groups[group])

        def measure() -> list[CollectiveRow]:
            return probes.collectives(world, tuple(ops), tuple(sizes_bytes))[0]

        return measure

    def job_status(self, job_id: str) -> JobStatus:
        """The fabric's own, richer record (losses, recoveries); NotFoundError if unknown."""
        with self.state.lock:
            j = self._job(job_id)
            tail = [ln for wp in j.workers.values() for ln in wp.log_tail(10)]
            red = self.redactor
            return JobStatus(
                j.spec.job_id, j.state, tuple(j.chips), j.step, j.loss, j.attempt, j.infra_failures,
                j.user_failures, j.max_retries, red.redact(j.reason) if j.reason else j.reason, j.checkpoint_step,
                dict(j.losses), tuple(dict(r) for r in j.recoveries), tuple(red.lines(list(j.log)[-40:] + tail)),
            )

    def job_logs(self, job_id: str) -> list[str]:
        with self.state.lock:
            return self.redactor.lines(self._job(job_id).log)

    def pids(self, job_id: str) -> dict[int, int]:
        with self.state.lock:
            return {r: wp.pid for r, wp in self._job(job_id).workers.items() if wp.alive}

    def wait(self, job_id: str, timeout_s: float = 120.0, until: Callable[[JobStatus], bool] | None = None) -> JobStatus:
        """Poll until ``until(status)`` holds or the job is terminal; raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.job_status(job_id)
            if st.state in TERMINAL or (until is not None and until(st)):
                return st
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {st.state.value} at step {st.step} after {timeout_s} s")
            time.sleep(0.05)

    def close(self) -> None:
        self.state.closed.set()
        with self.state.lock:
            if self._pool.outlives_fabric:
                # The agent keeps the workers running (and journals them) for the next plane.
                self._pool.close()
                self._delivery.wake()
                return
            for job in self.state.jobs.values():
                for wp in job.workers.values():
                    if wp.alive:
                        wp.kill("stop")
            self._pool.close()
        self._delivery.wake()

    def __enter__(self) -> LocalFabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals used by recovery.py ------------------------------------------------------
    def start_attempt(self, job: LocalJob, *, resume_from: str | None = None, resume: bool = False) -> None:
        if self.state.closed.is_set():
            # ``close`` killed the gang and a relaunch raced it (the kill's exits look like a
            # lost gang): a closed fabric starts nothing, or its workers would outlive it.
            return
        job.attempt += 1
        job.workers, job.failed_ranks, job.replica, job.pending_ckpt, job.pending_loss = {}, {}, None, {}, {}
        job.hung_ranks, job.moving = {}, None
        port = gangstart.free_port()
        cfg0 = job.base_cfg
        if job.spec.entrypoint is None and len(job.chips) > 1:
            even = (cfg0.global_batch // len(job.chips),) * len(job.chips)
            job.speed = RankSpeed(len(job.chips), [(0, tuple(cfg0.shares) or even)])
        for rank in range(len(job.chips)):
            self._spawn(job, rank, port=port, resume_from=resume_from, resume=resume)
        self._pool.gang_started()

    def spawn_rank(self, job: LocalJob, rank: int, *, port: int, join: bool = False) -> WorkerProcess:
        """Start one rank of the running gang on ``job.chips[rank]`` (a rank move's replacement:
        ``join`` takes its state from the peers at the rendezvous on ``port``)."""
        wp = self._spawn(job, rank, port=port, join=join)
        self._pool.gang_started()
        return wp

    def publish_rendezvous(self, job: LocalJob) -> int:
        """Write the job's next rendezvous (``job.generation``, a fresh port) for its workers."""
        port = gangstart.free_port()
        path = job.base_cfg.regroup_file
        assert path is not None  # only rank-move jobs have one
        self._write_job_file(Path(path), rankmove.rendezvous_doc(job.generation, port, len(job.chips)))
        return port

    def _spawn(self, job: LocalJob, rank: int, *, port: int, resume_from: str | None = None, resume: bool = False,
               join: bool = False) -> WorkerProcess:
        if self.state.closed.is_set():
            raise ConflictError(f"the fabric is closed: rank {rank} of {job.spec.job_id} is not started")
        return gangstart.spawn(self._pool, self.workdir, job, rank, self._on_msg, self._on_exit, port=port,
                               resume_from=resume_from, resume=resume, join=join)

    def _write_job_file(self, path: Path, data: bytes) -> None:
        # Atomic (a worker never reads half a file), and never through a link the job
        # planted at the temporary name in its own directory.
        owner = self._pool.job_owner(path.parent) or (None, None)
        write_for_job(path, data, *owner)

    def warm_ready(self) -> int:
        """How many warm standbys have finished preloading."""
        with self.state.lock:
            return self._pool.ready()

    def finish(self, job: LocalJob, state: RunState, reason: str | None) -> None:
        job.set_state(state)
        job.reason = reason
        for c in job.chips:
            if self._busy.get(c) == job.spec.job_id:
                del self._busy[c]
        kind = {RunState.FINISHED: "job-finished", RunState.FAILED: "job-failed"}.get(state, "job-stopped")
        self.emit(kind, job_id=job.spec.job_id, reason=reason, step=job.step, loss=job.loss)
        # Its uid back to the pool (and anything still running as it killed), its directory
        # back to the server: the next job to draw the uid finds nothing of this one.
        self._pool.release(self.workdir / "jobs" / job.spec.job_id)

    def pick_spare(self) -> int | None:
        """A healthy idle spare first, else any healthy idle slot."""
        idle = [c for c in range(self.n_slots) if c not in self._busy and self._chips[c] is ChipState.HEALTHY]
        spares = [c for c in idle if c in self.spares]
        pick = spares or idle
        return pick[0] if pick else None

    def retire_chip(self, chip: int, reason: str) -> None:
        if self._chips[chip] in (ChipState.HEALTHY, ChipState.DEGRADED, ChipState.UPDATING):
            self._chips[chip] = ChipState.FAILED
            self.emit("chip-failed", chip=chip, reason=reason)
        if self._chips[chip] is ChipState.FAILED:
            self._chips[chip] = ChipState.ISOLATED
            self.emit("chip-state", chip=chip, state="isolated", reason=reason)
        self._busy.pop(chip, None)

    def claim(self, chip: int, job_id: str) -> None:
        self._busy[chip] = job_id

    def release_chip(self, chip: int, job_id: str) -> None:
        """The job's rank left ``chip``, which stays in service (its worker died, not the slot)."""
        if self._busy.get(chip) == job_id:
            del self._busy[chip]

    def busy_with(self, chip: int) -> str | None:
        return self._busy.get(chip)

    # --- Reattachable -------------------------------------------------------------------------
    def adopt(self, job_id: str, checkpoint_step: int | None) -> Adoption | None:
        """Take back ``job_id``'s gang when the agent kept it running through a restart
        of the control plane (``reattach``); None when there is none to take."""
        pool = self._pool
        if not isinstance(pool, AgentSpawner):
            return None
        with self.state.lock:
            return reattach.take_back(self, pool, job_id, checkpoint_step, self._on_msg, self._on_exit)

    def discard_unadopted(self) -> list[str]:
        """Stop the workers the agent held for jobs the plane did not adopt."""
        pool = self._pool
        if not isinstance(pool, AgentSpawner):
            return []
        with self.state.lock:
            return reattach.discard_unadopted(pool)

    # --- private ----------------------------------------------------------------------------
    def _on_msg(self, wp: WorkerProcess, msg: Message) -> None:
        self.deliver(self._report, wp, msg)

    def _on_exit(self, wp: WorkerProcess, code: int) -> None:
        self.deliver(self._exited, wp, code, time.monotonic())

    def _report(self, wp: WorkerProcess, msg: Message) -> None:
        reports.handle_message(self.state, self.emit, wp, msg)
        if isinstance(self._pool, AgentSpawner):  # handled: the agent may drop it from its journal
            self._pool.handled(wp.pid, msg.get("agent_seq"))

    def _exited(self, wp: WorkerProcess, code: int, detected_mono: float) -> None:
        handle_exit(self, wp, code, detected_mono)
        if isinstance(self._pool, AgentSpawner):
            self._pool.handled_exit(wp.pid)

    def _job(self, job_id: str) -> LocalJob:
        if job_id not in self.state.jobs:
            raise NotFoundError(f"job {job_id} is not on this local fabric")
        return self.state.jobs[job_id]

    def emit(self, kind: str, *, chip: int | None = None, job_id: str | None = None, **detail: Any) -> None:
        self._delivery.emit(kind, chip=chip, job_id=job_id, **detail)

    def deliver(self, fn: Callable[..., Any], *args: Any) -> None:
        self._delivery.deliver(fn, *args)

    def _force_stop(self, job: LocalJob, attempt: int) -> None:
        if job.attempt == attempt and job.state is RunState.STOPPING:
            for wp in job.workers.values():
                if wp.alive:
                    wp.kill("stop")

