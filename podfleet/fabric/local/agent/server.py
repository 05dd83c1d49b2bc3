"""The agent: owns worker processes (their report pipes) and a journal of their reports.

It runs the same ``WorkerPool`` / ``WorkerProcess`` code an in-process fabric runs, with
the server's privileges, so the sandbox is unchanged: per-job uids, limits, the
checkpoint key over a pipe, a scrubbed environment. One pool per *scope* (a local
cluster's workdir); a scope is attached to at most one control-plane connection.

What a worker reports is journalled before it is pushed: progress in a bounded ring
(the loss history a re-attached plane rebuilds, kept after delivery), everything else
(checkpoints, errors, logs, the exit) until the plane acknowledges it. While no plane is
attached the workers keep training and the journal fills; the plane that attaches next
reads it back (``hello``'s answer) and adopts the gang. With ``grace_s`` set, a scope left
without a plane longer than that has its workers stopped.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from podfleet.fabric.local.agent import protocol
from podfleet.fabric.local.pool import WorkerPool
from podfleet.fabric.local.process import Message, WorkerProcess
from podfleet.security.files import private_dir
from podfleet.training.config import WorkerConfig

log = logging.getLogger("podfleet.agent")
PROGRESS_RING = 4096  # progress reports kept per worker (its loss history across a restart)
OTHER_CAP = 2048  # undelivered non-progress reports kept per worker (oldest logs dropped first)
BEAT_S = 0.25


@dataclass(eq=False)
class Held:
    """One worker the agent owns, with what it reported."""

    wp: WorkerProcess
    scope: str
    group: dict[str, Any]  # the WorkerGroupSpec it was launched for (re-attach rebuilds the job)
    progress: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=PROGRESS_RING))
    other: deque[dict[str, Any]] = field(default_factory=deque)
    dropped: int = 0

    def info(self, journal: bool) -> dict[str, Any]:
        wp = self.wp
        out: dict[str, Any] = {
            "pid": wp.pid, "chip": wp.chip, "attempt": wp.attempt, "log": str(wp.log_path),
            "config": wp.cfg.to_json() if wp.cfg else None, "group": self.group, "alive": wp.alive,
            "exit_code": wp.exit_code, "killed_by": wp.killed_by, "heartbeat_age_s": round(wp.heartbeat_age_s(), 3),
            "armed": wp.armed, "dropped": self.dropped,
        }
        if journal:
            out["journal"] = sorted([*self.progress, *self.other], key=lambda e: int(e["seq"]))
        return out


@dataclass(eq=False)
class Scope:
    pool: WorkerPool
    client: Conn | None = None
    detached_mono: float = field(default_factory=time.monotonic)


class Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.scope: str | None = None
        self.version_ok = False
        self.lock = threading.Lock()

    def send(self, obj: dict[str, Any]) -> bool:
        try:
            with self.lock:
                self.sock.sendall(protocol.encode(obj))
            return True
        except OSError:
            return False


class Agent:
    def __init__(self, where: Path, *, grace_s: float | None = None, idle_exit_s: float | None = None) -> None:
        self.where = private_dir(where)
        self.grace_s, self.idle_exit_s = grace_s, idle_exit_s
        self.token = protocol.new_token(self.where)
        self.lock = threading.RLock()
        self.scopes: dict[str, Scope] = {}
        self.held: dict[int, Held] = {}
        self.seq = 0
        self.closed = threading.Event()
        self.idle_since = time.monotonic()
        path = self.where / protocol.SOCKET
        path.unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket is born 0600: no window where others could connect
        try:
            self.listener.bind(str(path))
        finally:
            os.umask(old)
        self.listener.listen(16)
        (self.where / protocol.PIDFILE).write_text(str(os.getpid()))

    # --- running ----------------------------------------------------------------------
    def serve(self) -> None:
        threading.Thread(target=self._beats, name="agent-beats", daemon=True).start()
        self.listener.settimeout(0.5)
        while not self.closed.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            threading.Thread(target=self._serve_conn, args=(Conn(sock),), daemon=True).start()
        self._shutdown_workers()
        with contextlib.suppress(OSError):
            self.listener.close()
        (self.where / protocol.SOCKET).unlink(missing_ok=True)

    def stop(self) -> None:
        self.closed.set()

    def _serve_conn(self, conn: Conn) -> None:
        buf = conn.sock.makefile("rb")
        try:
            for raw in buf:
                if len(raw) > protocol.MAX_LINE_BYTES:
                    break
                try:
                    req = json.loads(raw)
                except json.JSONDecodeError:
                    conn.send({"error": "not JSON"})
                    continue
                rid = req.get("id")
                try:
                    out = self._handle(conn, req)
                except Exception as exc:  # one bad request answers an error; the agent runs on
                    log.exception("agent request %s failed", req.get("op"))
                    out = {"error": f"{type(exc).__name__}: {exc}"}
                if rid is not None:
                    conn.send({"id": rid, **out})
        except OSError:
            pass
        finally:
            self._detach(conn)
            with contextlib.suppress(OSError):
                conn.sock.close()

    def _detach(self, conn: Conn) -> None:
        with self.lock:
            sc = self.scopes.get(conn.scope or "")
            if sc is not None and sc.client is conn:
                sc.client = None
                sc.detached_mono = time.monotonic()

    # --- requests ---------------------------------------------------------------------
    def _handle(self, conn: Conn, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "hello":
            if not hmac.compare_digest(str(req.get("token", "")), self.token):
                return {"error": "bad agent token"}
            conn.version_ok = req.get("version") == protocol.VERSION
            if not conn.version_ok:
                return {"error": protocol.mismatch(req.get("version")), "version": protocol.VERSION}
            if req.get("scope") is None:
                return {"ok": True, "version": protocol.VERSION}
            return self._hello(conn, str(req["scope"]), dict(req.get("pool") or {}))
        if op == "status" and (conn.version_ok or req.get("token") == self.token):
            return {"ok": True, "version": protocol.VERSION, **self.status()}
        if op == "shutdown" and (conn.version_ok or hmac.compare_digest(str(req.get("token", "")), self.token)):
            self.stop()
            return {"ok": True}
        if not conn.version_ok or conn.scope is None:
            return {"error": "say hello (with the agent's token and a scope) first"}
        with self.lock:
            sc = self.scopes[conn.scope]
            return self._scoped(conn, sc, op, req)

    def _hello(self, conn: Conn, scope: str, pool: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            sc = self.scopes.get(scope)
            if sc is None:
                wd = Path(scope)
                chip_env = {int(k): v for k, v in dict(pool.get("chip_env") or {}).items()}
                sc = self.scopes[scope] = Scope(WorkerPool(
                    wd, n_gpus=int(pool.get("n_gpus", 0)), warm_workers=int(pool.get("warm_workers", 0)),
                    refill_delay_s=float(pool.get("refill_delay_s", 5.0)), closed=self.closed,
                    deliver=self._deliver, extra_env=(lambda c: chip_env.get(c, {})) if chip_env else None,
                    keep_env=tuple(pool.get("keep_env") or ())))
            old = sc.client
            sc.client = conn  # the newest plane of a scope wins (the old one is gone or stale)
            conn.scope = scope
            if old is not None and old is not conn:
                with contextlib.suppress(OSError):
                    old.sock.shutdown(socket.SHUT_RDWR)
            workers = [h.info(journal=True) for h in self.held.values() if h.scope == scope]
            # Answered under the lock: no push of this scope can overtake the journal.
            return {"ok": True, "version": protocol.VERSION, "workers": workers, "agent_pid": os.getpid()}

    def _scoped(self, conn: Conn, sc: Scope, op: object, req: dict[str, Any]) -> dict[str, Any]:
        pool = sc.pool
        if op == "spawn":
            cfg = WorkerConfig.from_json(str(req["config"]))
            wp = pool.spawn(cfg, int(req["chip"]), int(req["attempt"]), Path(str(req["log"])),
                            self._on_message, self._on_exit)
            self.held[wp.pid] = Held(wp, str(conn.scope), dict(req.get("group") or {}))
            self.idle_since = time.monotonic()
            return {"ok": True, "pid": wp.pid}
        if op == "kill":
            h = self.held.get(int(req["pid"]))
            if h is not None:
                h.wp.kill(str(req.get("why", "stop")), int(req.get("sig", signal.SIGKILL)))
            return {"ok": True, "known": h is not None}
        if op == "ack":
            self._ack(int(req["pid"]), int(req["seq"]))
            return {"ok": True}
        if op == "job_owner":
            owner = pool.job_owner(Path(str(req["jobdir"])))
            return {"ok": True, "owner": list(owner) if owner else None}
        if op == "release":
            pool.release(Path(str(req["jobdir"])))
            return {"ok": True}
        if op == "gang_started":
            pool.gang_started()
            return {"ok": True}
        if op == "refill":
            pool.refill()
            return {"ok": True}
        if op == "ready":
            return {"ok": True, "ready": pool.ready()}
        if op == "close_pool":
            pool.close()
            return {"ok": True}
        return {"error": f"unknown op {op!r}"}

    def _ack(self, pid: int, seq: int) -> None:
        h = self.held.get(pid)
        if h is None:
            return
        while h.other and int(h.other[0]["seq"]) <= seq:
            e = h.other.popleft()
            if e["kind"] == "exit":
                del self.held[pid]  # delivered: the plane has its exit, nothing left to hold
                if not self.held:
                    self.idle_since = time.monotonic()

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {"pid": os.getpid(), "dir": str(self.where), "grace_s": self.grace_s,
                    "scopes": {s: {"attached": sc.client is not None, "standbys_ready": sc.pool.ready()}
                               for s, sc in self.scopes.items()},
                    "workers": [{**h.info(journal=False), "scope": h.scope,
                                 "job_id": h.wp.cfg.job_id if h.wp.cfg else None, "rank": h.wp.rank,
                                 "undelivered": len(h.other)} for h in self.held.values()]}

    # --- reports from the workers (reader threads) ------------------------------------
    def _deliver(self, fn: Any, *args: Any) -> None:
        with self.lock:  # the pool's refill timer: run here, under the agent's lock
            fn(*args)

    def _journal(self, wp: WorkerProcess, entry: dict[str, Any]) -> None:
        with self.lock:
            h = self.held.get(wp.pid)
            if h is None:
                return
            self.seq += 1
            entry["seq"] = self.seq
            if entry["kind"] == "msg" and entry["msg"].get("type") == "progress":
                h.progress.append(entry)
            else:
                h.other.append(entry)
                if len(h.other) > OTHER_CAP:
                    logs = [e for e in h.other if e["kind"] == "msg" and e["msg"].get("type") == "log"]
                    if logs:
                        h.other.remove(logs[0])
                        h.dropped += 1
            sc = self.scopes.get(h.scope)
            if sc is not None and sc.client is not None and not sc.client.send({"push": "report", "pid": wp.pid,
                                                                                 **entry}):
                sc.client = None
                sc.detached_mono = time.monotonic()

    def _on_message(self, wp: WorkerProcess, msg: Message) -> None:
        msg.pop("recv_mono", None)  # the plane's own clock stamps it on arrival
        self._journal(wp, {"kind": "msg", "msg": msg})

    def _on_exit(self, wp: WorkerProcess, code: int) -> None:
        self._journal(wp, {"kind": "exit", "code": code, "killed_by": wp.killed_by})

    def _beats(self) -> None:
        """Heartbeat ages to each attached plane (its hang detection), the grace, idling out."""
        while not self.closed.wait(BEAT_S):
            now = time.monotonic()
            with self.lock:
                for scope, sc in self.scopes.items():
                    mine = [h for h in self.held.values() if h.scope == scope and h.wp.alive]
                    if sc.client is not None:
                        ages = {str(h.wp.pid): [round(h.wp.heartbeat_age_s(), 3), h.wp.armed] for h in mine}
                        if not sc.client.send({"push": "beats", "ages": ages}):
                            sc.client, sc.detached_mono = None, now
                    elif self.grace_s is not None and mine and now - sc.detached_mono > self.grace_s:
                        log.warning("no control plane for %s for %.0f s: stopping %d workers", scope,
                                    now - sc.detached_mono, len(mine))
                        for h in mine:
                            h.wp.kill("stop", signal.SIGTERM)
                attached = any(sc.client is not None for sc in self.scopes.values())
                idle = not attached and not any(h.wp.alive for h in self.held.values())
                if not idle:
                    self.idle_since = now
            if self.idle_exit_s is not None and idle and now - self.idle_since > self.idle_exit_s:
                log.info("idle for %.0f s with no workers and no control plane: exiting", self.idle_exit_s)
                self.stop()

    def _shutdown_workers(self) -> None:
        with self.lock:
            for h in self.held.values():
                if h.wp.alive:
                    h.wp.kill("stop")
            for sc in self.scopes.values():
                sc.pool.close()


def run(where: Path, *, grace_s: float | None = None, idle_exit_s: float | None = None) -> None:
    """Serve until SIGTERM / SIGINT or a ``shutdown`` request (then its workers are stopped)."""
    from podfleet.security.files import private_umask
    from podfleet.security.harden import set_undumpable

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    private_umask()
    set_undumpable()  # workers of the server's uid cannot read its memory (the token)
    agent = Agent(where, grace_s=grace_s, idle_exit_s=idle_exit_s)
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    signal.signal(signal.SIGINT, lambda *_: agent.stop())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    log.info("agent %d serving %s (protocol %d, grace %s)", os.getpid(), where / protocol.SOCKET, protocol.VERSION,
             "never" if grace_s is None else f"{grace_s:g} s")
    agent.serve()
