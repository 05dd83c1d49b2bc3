"""The Ray actor that runs one rank: ``run_worker`` inside the actor process.

Plain Python here; ``RayFabric`` wraps it with ``ray.remote`` at launch so this module
imports without Ray. The actor is threaded (``max_concurrency`` > 1): ``run`` trains in
one thread while ``poll`` answers from another, returning the reports buffered since
the last poll plus the process's own CPU and memory (psutil), so the driver needs no
access to the worker's host.

An actor's process inherits the environment of the raylet that started it, and a
private Ray instance started by the server inherits the server's (``PODFLEET_ADMIN_TOKEN``,
database URLs...). ``run`` therefore scrubs the process's environment before the job's
code runs (``scrub_environment``): the same allow-list as a local worker, plus Ray's own
``RAY_*`` variables (the process is Ray's, connected to its cluster either way) and what
the fabric's ``runtime_env`` declares in ``env_vars``. A checkpoint key declared there is
taken out of the environment and handed to the worker in memory.

An actor that runs as root (a raylet started as root) never runs job code in its own
process: ``run`` hands the rank to a child under the job's own uid (``child.run_as_child``),
unless the node's settings opt into root workers (``PODFLEET_WORKER_USER=root``); a node
whose settings refuse root (``PODFLEET_WORKER_UIDS=off``, no user) fails the rank with the
fix in the message. An unprivileged actor runs the rank in-process, undumpable
(``security.harden``) before the key is taken.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import psutil

from podfleet.errors import PodfleetError
from podfleet.security.harden import set_undumpable
from podfleet.security.sandbox import from_env, key_material
from podfleet.security.workerenv import worker_env
from podfleet.training.config import EXIT_BAD_INPUT, WorkerConfig

PROGRESS_RING = 4096  # progress reports kept per rank after delivery (the loss history)


class _BufferReporter:
    """The ``Reporter`` a rank sees, and the rank's journal: every report gets a sequence
    number and stays until the control plane acknowledges it (``drain(acked)``), so the
    reports of a plane that died after reading them, or while none was reading, are read
    again by the next one (at least once). The last ``PROGRESS_RING`` progress reports are
    kept after their acknowledgement: a plane that re-attaches rebuilds the loss history
    (its own was in memory) and the step from them, as from the local agent's ring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.msgs: list[dict[str, Any]] = []
        self.seq = 0
        self.last_progress: dict[str, Any] | None = None
        self.history: deque[dict[str, Any]] = deque(maxlen=PROGRESS_RING)
        self.last_beat = time.monotonic()

    def _put(self, msg: dict[str, Any]) -> None:
        msg.setdefault("t", time.time())  # a child's relayed progress keeps its own (child.py)
        with self._lock:
            self.seq += 1
            msg["seq"] = self.seq
            self.msgs.append(msg)
            if msg["type"] == "progress":
                self.last_progress = msg
                self.history.append(msg)
            self.last_beat = time.monotonic()

    def progress(self, step: int, loss: float, tokens_per_s: float, step_time_s: float) -> None:
        self._put({"type": "progress", "step": step, "loss": loss, "tokens_per_s": tokens_per_s,
                   "step_time_s": step_time_s})

    def heartbeat(self) -> None:
        with self._lock:
            self.last_beat = time.monotonic()

    def log(self, line: str) -> None:
        self._put({"type": "log", "line": line})

    def checkpoint(self, step: int, path: str) -> None:
        self._put({"type": "checkpoint", "step": step, "path": path})

    def send(self, type_: str, **fields: object) -> None:
        """Typed messages (a ``MessageReporter``): ``regrouped`` tells the fabric a rank move's
        gang re-formed (``rankmove.py``); ``running`` and ``replica`` are journaled alike."""
        self._put({**fields, "type": type_})

    def journal(self) -> list[dict[str, Any]]:
        """The progress history and every unacknowledged report, in report order."""
        with self._lock:
            return sorted({m["seq"]: m for m in [*self.history, *self.msgs]}.values(), key=lambda m: m["seq"])

    def drain(self, acked: int | None = None) -> tuple[list[dict[str, Any]], float]:
        """The reports after ``acked`` (None: every report not yet acknowledged); those up
        to it are dropped."""
        with self._lock:
            if acked is not None:
                self.msgs = [m for m in self.msgs if m["seq"] > acked]
            return list(self.msgs), time.monotonic() - self.last_beat


class WorkerActor:
    def __init__(self, job_id: str, rank: int) -> None:
        self.job_id, self.rank = job_id, rank
        self.reporter = _BufferReporter()
        self._proc = psutil.Process()
        self._proc.cpu_percent(None)  # the first call only sets the baseline
        self.running = False
        self.result: dict[str, Any] | None = None  # run's, kept until the actor is killed

    def preload(self) -> float:
        """A warm standby's imports (torch, the training modules) before it has a rank
        (``standby.py``); the seconds they took."""
        from podfleet.training.worker import preload

        t0 = time.perf_counter()
        preload()
        return time.perf_counter() - t0

    def hello(self) -> dict[str, Any]:
        """Where this rank lives; rank 0's answer gives the job's master address and port."""
        import ray

        ctx = ray.get_runtime_context()
        ids = ctx.get_accelerator_ids() if hasattr(ctx, "get_accelerator_ids") else {}
        return {
            "pid": os.getpid(),
            "ip": ray.util.get_node_ip_address(),
            "node_id": ctx.get_node_id(),
            "port": _free_port(),
            "accelerators": {k: [str(v) for v in vs] for k, vs in ids.items() if vs},
            "neuron_rt_visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
        }

    def run(self, cfg_json: str, jobdir: str | None = None) -> dict[str, Any]:
        from podfleet.training.worker import run_worker

        cfg = WorkerConfig.from_json(cfg_json)
        declared = _declared_env()
        if cfg.neuron_visible_cores is not None:
            # The rank's Trainium device on this node (a child process inherits it too).
            os.environ["NEURON_RT_VISIBLE_CORES"] = cfg.neuron_visible_cores
            self.reporter.log(f"rank {cfg.rank}: NEURON_RT_VISIBLE_CORES={cfg.neuron_visible_cores} on Ray node "
                              f"{_node_id()[:12]}")
        if os.geteuid() == 0:
            try:
                sandbox = from_env()
            except PodfleetError as exc:
                return {"rank": cfg.rank, "steps_done": 0, "final_loss": None, "exit_code": EXIT_BAD_INPUT,
                        "error": exc.message, "extra": {"kind": "sandbox"}}
            if not sandbox.root_opt_in:
                from podfleet.fabric.ray.child import run_as_child

                where = Path(jobdir) if jobdir else Path(tempfile.mkdtemp(prefix=f"podfleet-{cfg.job_id}-"))
                self.running = True
                try:
                    # The child is not Ray's: it keeps what the runtime_env declares, not RAY_*.
                    return run_as_child(cfg, sandbox, self.reporter, where, keep_env=declared - {cfg.key_env})
                finally:
                    self.running = False
        if os.geteuid() != 0:
            # Before the key: no other process of this uid can read it out of memory. (A root
            # actor here runs root job code on purpose, which could read everything anyway;
            # observed: an undumpable root actor made torch's start-up in it much slower.)
            set_undumpable()
        scrub_environment(cfg, declared)
        self.running = True
        try:
            result = run_worker(cfg, self.reporter)
        finally:
            self.running = False
        out = dataclasses.asdict(result)
        out["extra"] = {k: v for k, v in out.get("extra", {}).items() if isinstance(v, str | int | float | bool)}
        return out

    def control(self, path: str, doc: str) -> None:
        """Write a control file of this rank's gang on this rank's node (the work split, a
        slow-down, an on-demand checkpoint request): the built-in loop reads it between
        steps as on a local slot (training/loop.py). Atomic, so a half file is never read."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(doc, encoding="utf-8")
        os.chmod(tmp, 0o644)  # a sandboxed child of another uid reads it
        os.replace(tmp, target)

    def journal(self) -> dict[str, Any]:
        """What a plane that re-attaches reads: ``poll``'s answer whose reports are the
        progress history and every report not yet acknowledged (``_BufferReporter.journal``)."""
        return {**self.poll(None), "msgs": self.reporter.journal()}

    def start(self, cfg_json: str, jobdir: str | None = None) -> None:
        """Run the rank on a thread of this actor and return at once: the result waits in
        the actor for ``poll`` (a ``run`` call's result would be the caller's, and lost
        with a control plane that dies while the rank trains)."""

        def body() -> None:
            try:
                out = self.run(cfg_json, jobdir)
            except Exception as exc:  # the rank's failure, reported like a worker's
                out = {"exit_code": 1, "error": f"{type(exc).__name__}: {exc}"}
            self.result = out

        threading.Thread(target=body, name=f"podfleet-rank-{self.rank}", daemon=True).start()

    def poll(self, acked: int | None = None) -> dict[str, Any]:
        """Unacknowledged reports, the process's CPU and memory, and the rank's result once
        it ended (read before the reports, so no report after it is missed)."""
        result = self.result
        msgs, beat_age_s = self.reporter.drain(acked)
        try:
            cpu = self._proc.cpu_percent(None)
            rss = float(self._proc.memory_info().rss)
        except psutil.Error:
            cpu, rss = 0.0, 0.0
        return {"msgs": msgs, "cpu_percent": cpu, "mem_bytes": rss, "heartbeat_age_s": beat_age_s,
                "running": self.running, "mem_total_bytes": float(psutil.virtual_memory().total),
                "result": result, "last_progress": self.reporter.last_progress}


def _node_id() -> str:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # outside Ray (tests)
        return "?"


def _declared_env() -> set[str]:
    """The variable names the actor's ``runtime_env`` sets (``env_vars``)."""
    try:
        import ray

        renv = ray.get_runtime_context().runtime_env
    except Exception:  # outside Ray (tests): nothing declared
        return set()
    return set((renv or {}).get("env_vars") or {})


def scrub_environment(cfg: WorkerConfig, declared: set[str]) -> None:
    """Leave this process only the environment a worker may have (see the module's docstring)."""
    from podfleet.training.worker import deliver_key

    if cfg.encrypt_checkpoints and not cfg.key_file:
        material = key_material(None, cfg.key_env)
        if material is not None:
            deliver_key(material)
    keep = (declared - {cfg.key_env}) | {k for k in os.environ if k.startswith("RAY_")}
    clean = worker_env(os.environ, keep=keep)
    for k in list(os.environ):
        if k not in clean:
            del os.environ[k]


def _free_port() -> int:
    # Bind-and-release: the usual way (torchrun, Ray Train) to pick a port for the
    # rendezvous; the tiny race with other binders on the node is accepted.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])
