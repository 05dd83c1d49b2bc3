"""The control plane's side of the agent: a connection, the ``AgentSpawner`` a ``LocalFabric``
spawns through, and ``RemoteWorker``, the handle of a worker the agent owns.

A ``RemoteWorker`` is a ``WorkerProcess`` to the fabric (its recovery, monitor and report
code read the same fields), but it spawns nothing: the agent's process is the worker's
parent and reads its pipe. Reports arrive as pushes; each is handed to the fabric's
callback, and acknowledged once the fabric handled it (``ack``), so what the plane never
handled stays in the agent's journal for the next plane.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from podfleet.errors import ConflictError, InvalidInputError
from podfleet.fabric.local.agent import protocol
from podfleet.fabric.local.process import Message, OnExit, OnMessage, WorkerProcess
from podfleet.security.jobfiles import read_tail
from podfleet.training.config import WorkerConfig

log = logging.getLogger("podfleet.fabric.local.agent")
REQUEST_TIMEOUT_S = 30.0


class AgentConnection:
    """One authenticated connection; requests are answered in order of their ``id``."""

    def __init__(self, where: Path, *, scope: str | None = None, pool: dict[str, Any] | None = None,
                 on_push: Callable[[dict[str, Any]], None] | None = None, on_lost: Callable[[], None] | None = None,
                 version: int = protocol.VERSION) -> None:
        self.where = where
        self.sock = protocol.connect(where)
        self._ids = itertools.count(1)
        self._waiting: dict[int, Future[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._on_push, self._on_lost = on_push, on_lost
        self.closed = False
        self._reader = threading.Thread(target=self._read, name="agent-client", daemon=True)
        self._reader.start()
        self.hello = self.request("hello", version=version, token=protocol.read_token(where), scope=scope,
                                  pool=pool or {})

    def request(self, op: str, timeout_s: float = REQUEST_TIMEOUT_S, **fields: Any) -> dict[str, Any]:
        fut: Future[dict[str, Any]] = Future()
        with self._lock:
            rid = next(self._ids)
            self._waiting[rid] = fut
            try:
                self.sock.sendall(protocol.encode({"id": rid, "op": op, **fields}))
            except OSError as exc:
                self._waiting.pop(rid, None)
                raise ConflictError(f"the agent at {self.where} is gone: {exc.strerror or exc}", field="agent") from None
        try:
            out = fut.result(timeout_s)
        except TimeoutError:
            raise ConflictError(f"the agent at {self.where} did not answer {op} within {timeout_s:g} s",
                                field="agent") from None
        if "error" in out:
            raise ConflictError(f"agent: {out['error']}", field="agent")
        return out

    def send(self, op: str, **fields: Any) -> None:
        """Fire and forget (acks): no answer is awaited."""
        with self._lock, contextlib.suppress(OSError):  # the agent is gone: the reader reports it
            self.sock.sendall(protocol.encode({"op": op, **fields}))

    def _read(self) -> None:
        try:
            for raw in self.sock.makefile("rb"):
                obj = json.loads(raw)
                rid = obj.get("id")
                if rid is not None:
                    with self._lock:
                        fut = self._waiting.pop(int(rid), None)
                    if fut is not None:
                        fut.set_result(obj)
                elif obj.get("push") and self._on_push is not None:
                    try:
                        self._on_push(obj)
                    except Exception:  # one push's handler must not stop the stream
                        log.exception("agent push %s failed", obj.get("push"))
        except (OSError, ValueError):
            pass
        finally:
            with self._lock:
                waiting, self._waiting = self._waiting, {}
            for fut in waiting.values():
                fut.set_result({"error": "the connection to the agent closed"})
            if not self.closed and self._on_lost is not None:
                self._on_lost()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class RemoteWorker(WorkerProcess):
    """A worker the agent owns. Subclasses ``WorkerProcess`` for its fields only: the
    process is not this one's child (``__init__`` spawns nothing)."""

    def __init__(self, spawner: AgentSpawner, info: dict[str, Any], on_message: OnMessage, on_exit: OnExit) -> None:
        self.spawner = spawner
        self.cfg = WorkerConfig.from_json(info["config"]) if info.get("config") else None
        self.chip, self.attempt, self.log_path = int(info["chip"]), int(info["attempt"]), Path(str(info["log"]))
        self.pid = int(info["pid"])
        self.started_mono = time.monotonic()
        self.last_beat_mono = self.started_mono - float(info.get("heartbeat_age_s") or 0.0)
        self.armed, self.ready = bool(info.get("armed")), True
        self.exit_code = None
        self.exit_handled = False
        self.killed_by = None
        self.kill_mono = None
        self.error = None
        self.hang_reported = False
        self.on_message, self.on_exit = on_message, on_exit
        self.exit_seq: int | None = None
        self.last_seq = 0  # the newest report handed on (pushes and a replayed journal overlap)

    def kill(self, why: str, sig: int = signal.SIGKILL) -> None:
        if self.exit_code is None and self.killed_by is None:
            self.killed_by = why
            self.kill_mono = time.monotonic()
        self.spawner.kill(self.pid, why, sig)

    def log_tail(self, n: int = 20) -> list[str]:
        return read_tail(self.log_path, n)

    def report(self, entry: dict[str, Any]) -> None:
        """One journal entry (pushed, or replayed at re-attach), in ``seq`` order."""
        seq = int(entry["seq"])
        if seq <= self.last_seq:
            return
        self.last_seq = seq
        now = time.monotonic()
        if entry["kind"] == "exit":
            if entry.get("killed_by") and self.killed_by is None:
                self.killed_by = str(entry["killed_by"])  # the agent knows why it killed it
            self.exit_code = int(entry["code"])
            self.exit_seq = seq
            self.on_exit(self, self.exit_code)
            return
        msg: Message = dict(entry["msg"])
        self.last_beat_mono = now
        if msg.get("type") in ("running", "progress"):
            self.armed = True
        msg["recv_mono"] = now
        msg["agent_seq"] = seq
        self.on_message(self, msg)

    def handled(self, seq: int) -> None:
        self.spawner.ack(self.pid, seq)


class AgentSpawner:
    """Spawns a local fabric's workers in the agent (the ``Spawner`` a ``LocalFabric`` uses)."""

    outlives_fabric = True

    def __init__(self, where: Path, scope: Path, *, n_gpus: int, warm_workers: int, refill_delay_s: float,
                 chip_env: dict[int, dict[str, str]] | None = None, keep_env: tuple[str, ...] = ()) -> None:
        self.where, self.scope = where, scope
        self.workers: dict[int, RemoteWorker] = {}
        self.pending: dict[int, list[dict[str, Any]]] = {}
        self._lock = threading.RLock()
        self.lost = threading.Event()
        pool = {"n_gpus": n_gpus, "warm_workers": warm_workers, "refill_delay_s": refill_delay_s,
                "chip_env": {str(k): v for k, v in (chip_env or {}).items()}, "keep_env": list(keep_env)}
        self.conn = AgentConnection(where, scope=str(scope), pool=pool, on_push=self._push, on_lost=self.lost.set)
        # What the agent held when this plane attached: ``LocalFabric.adopt`` takes it from here.
        self.found: list[dict[str, Any]] = list(self.conn.hello.get("workers") or [])
        self.agent_pid = int(self.conn.hello.get("agent_pid") or 0)

    # --- Spawner ----------------------------------------------------------------------
    def spawn(self, cfg: WorkerConfig, chip: int, attempt: int, log_path: Path, on_message: OnMessage,
              on_exit: OnExit, group: Mapping[str, Any] | None = None) -> WorkerProcess:
        out = self.conn.request("spawn", config=cfg.to_json(), chip=chip, attempt=attempt, log=str(log_path),
                                group=dict(group or {}))
        info = {"pid": out["pid"], "chip": chip, "attempt": attempt, "log": str(log_path), "config": cfg.to_json()}
        return self.adopt([info], on_message, on_exit)[0][0]

    def adopt(self, infos: list[dict[str, Any]], on_message: OnMessage, on_exit: OnExit,
              skip: Callable[[dict[str, Any]], bool] = lambda e: False) -> tuple[list[RemoteWorker], int]:
        """Track these workers again and replay, in report order, their journals from
        ``hello`` and what was pushed since; ``skip``-ped entries are acknowledged unread.
        Returns the workers and how many reports were replayed."""
        with self._lock:  # no push for these pids is handed on until the replay is done
            wps = [RemoteWorker(self, info, on_message, on_exit) for info in infos]
            entries: dict[int, tuple[RemoteWorker, dict[str, Any]]] = {}
            for wp, info in zip(wps, infos, strict=True):
                for e in [*(info.get("journal") or ()), *self.pending.pop(wp.pid, [])]:
                    entries[int(e["seq"])] = (wp, e)
                self.workers[wp.pid] = wp
            self.found = [i for i in self.found if int(i["pid"]) not in self.workers]
            replayed = 0
            for seq in sorted(entries):
                wp, e = entries[seq]
                if skip(e):
                    wp.last_seq = seq
                    self.ack(wp.pid, seq)
                    continue
                wp.report(e)
                replayed += 1
        return wps, replayed

    def discard(self, infos: list[dict[str, Any]]) -> None:
        """Workers no plane adopts: killed, their reports acknowledged unread."""
        def drop(wp: WorkerProcess, msg: Message) -> None:
            self.ack(wp.pid, int(msg.get("agent_seq", 0)))

        def gone(wp: WorkerProcess, code: int) -> None:
            self.handled_exit(wp.pid)

        wps, _ = self.adopt(infos, drop, gone)
        for wp in wps:
            if wp.exit_code is None:
                wp.kill("stop")

    def handled(self, pid: int, seq: object) -> None:
        """The fabric handled report ``seq`` of ``pid``: the agent may drop it."""
        if isinstance(seq, int):
            self.ack(pid, seq)

    def handled_exit(self, pid: int) -> None:
        with self._lock:
            wp = self.workers.pop(pid, None)
        if wp is not None and wp.exit_seq is not None:
            self.ack(pid, wp.exit_seq)

    def job_owner(self, jobdir: Path) -> tuple[int, int] | None:
        owner = self.conn.request("job_owner", jobdir=str(jobdir)).get("owner")
        return (int(owner[0]), int(owner[1])) if owner else None

    def release(self, jobdir: Path) -> None:
        self.conn.request("release", jobdir=str(jobdir))

    def gang_started(self) -> None:
        self.conn.request("gang_started")

    def refill(self) -> None:
        self.conn.request("refill")

    def ready(self) -> int:
        return int(self.conn.request("ready").get("ready", 0))

    def close(self) -> None:
        """Detach: the agent keeps the workers (and journals their reports) for the next plane."""
        self.conn.close()

    # --- the agent's side ---------------------------------------------------------------
    def kill(self, pid: int, why: str, sig: int) -> None:
        try:
            self.conn.request("kill", pid=pid, why=why, sig=int(sig))
        except ConflictError as exc:
            log.warning("kill of pid %d through the agent failed: %s", pid, exc.message)

    def ack(self, pid: int, seq: int) -> None:
        self.conn.send("ack", pid=pid, seq=seq)

    def shutdown_agent(self) -> None:
        self.conn.request("shutdown")

    def _push(self, obj: dict[str, Any]) -> None:
        if obj["push"] == "beats":
            now = time.monotonic()
            with self._lock:
                for pid, (age, armed) in dict(obj.get("ages") or {}).items():
                    wp = self.workers.get(int(pid))
                    if wp is not None:
                        wp.last_beat_mono = now - float(age)
                        wp.armed = wp.armed or bool(armed)
            return
        if obj["push"] == "report":
            pid = int(obj["pid"])
            with self._lock:
                wp = self.workers.get(pid)
                if wp is None:  # not adopted (yet), or spawned a moment ago: held for ``adopt``
                    self.pending.setdefault(pid, []).append(obj)
                else:
                    wp.report(obj)


def agent_status(where: Path) -> dict[str, Any]:
    """What the agent of ``where`` holds (``podfleet agent status``)."""
    conn = AgentConnection(where, version=protocol.VERSION)
    try:
        return conn.request("status")
    finally:
        conn.close()


def stop_agent(where: Path) -> None:
    try:
        conn = AgentConnection(where)
    except InvalidInputError:
        raise
    try:
        conn.request("shutdown")
    finally:
        conn.close()
