"""Serve a control plane in this process for tests: uvicorn on a free port, in a thread.

    with serve_in_thread(plane) as url: PodfleetClient(url, token)...
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from podfleet.api import connections
from podfleet.api.main import create_app
from podfleet.compose import Parts
from podfleet.control.plane import ControlPlane
from podfleet.health.service import HealthService
from podfleet.security.tokens import Role, generate_token, hash_token, new_token_id
from podfleet.store.protocol import StoreProtocol
from podfleet.store.records import TokenRecord


def role_tokens(store: StoreProtocol, admin_token: str) -> dict[str, str]:
    """Role -> bearer token: ``admin_token`` for admin, and a fresh operator and viewer
    token added to ``store`` (for tests that act as each role)."""
    tokens = {"admin": admin_token}
    for role in (Role.OPERATOR, Role.VIEWER):
        tok = generate_token()
        store.add_token(TokenRecord(new_token_id(), role.value, role.value, hash_token(tok), 0.0))
        tokens[role.value] = tok
    return tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve_in_thread(plane: ControlPlane, *, start_plane: bool = True,
                    health: HealthService | None = None, parts: Parts | None = None,
                    app: FastAPI | None = None,
                    header_timeout_s: float = connections.HEADER_TIMEOUT_S, http: str = "auto") -> Iterator[str]:
    """``parts``: serve all of what ``compose.build`` made (health, recovery, firmware);
    ``health``: the health service alone; ``app``: serve this one (built by ``create_app``
    with other settings) instead. Served as ``podfleet up`` serves
    (``api/connections.options``); ``http``: auto, httptools or h11."""
    port = free_port()
    if app is None:
        app = (create_app(plane, parts.health, recovery=parts.recovery, firmware=parts.firmware,
                                 maintenance=parts.maintenance) if parts is not None
               else create_app(plane, health))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                           **connections.options(header_timeout_s=header_timeout_s, impl=http)))
    if start_plane:
        plane.start()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        if start_plane:
            plane.stop()


def spawn_server(db: Path, port: int, token: str, *args: str, log: Path | None = None,
                 timeout_s: float = 60.0) -> subprocess.Popen[bytes]:
    """Start a real ``podfleet up`` process (SQLite at ``db``, admin token ``token``) and
    return once ``/healthz`` answers. Extra CLI ``args`` are appended; stderr goes to
    ``log`` when given. Raises AssertionError (with the log's tail) if it exits or does
    not come up in time. For tests and benchmarks that need a separate server process."""
    return spawn_url_server(f"sqlite:///{db}", port, token, *args, log=log, timeout_s=timeout_s)


def stop_server(proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Stop a server from ``spawn_server`` the way an operator does (SIGTERM: a clean
    shutdown), killing it only if it has not exited within ``timeout_s``."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def spawn_url_server(db_url: str, port: int, token: str, *args: str, env: dict[str, str] | None = None,
                     log: Path | None = None, timeout_s: float = 90.0,
                     wait: bool = True) -> subprocess.Popen[bytes]:
    """``spawn_server`` for any store URL (PostgreSQL: several servers on one store, each
    with its own ``port``); ``env`` is added to this process's environment. ``wait``:
    return once ``/healthz`` answers (a follower answers it too) and, on a leader, says its
    engine has reloaded (not ``starting``)."""
    full = {**os.environ, "PODFLEET_ADMIN_TOKEN": token, **(env or {})}
    err = log.open("ab") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(
        [sys.executable, "-m", "podfleet", "up", "--db", db_url, "--port", str(port), "--output", "json", *args],
        env=full, stdout=subprocess.DEVNULL, stderr=err,
    )
    if wait:
        wait_healthz(proc, port, timeout_s, log)
    return proc


def wait_healthz(proc: subprocess.Popen[bytes], port: int, timeout_s: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            # A leader listens before its engine has reloaded: ready for /v1 once not starting.
            if r.status_code == 200 and not r.json().get("starting"):
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            tail = log.read_text()[-2000:] if log is not None else ""
            raise AssertionError(f"podfleet up exited with {proc.returncode}: {tail}")
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"podfleet up did not answer /healthz within {timeout_s:.0f} s")


def role_of(port: int) -> str | None:
    """``leader``/``follower`` from a server's ``/healthz``; None when it does not answer."""
    try:
        return str(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()["role"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


class CuttableProxy:
    """A TCP proxy (threads and sockets) in front of a server, e.g. PostgreSQL, that can be
    cut: ``cut()`` closes every connection and refuses new ones until ``restore()``, as a
    network partition or a database restart does."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.open = threading.Event()
        self.open.set()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: Any, dst: Any) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with suppress(OSError):
                    s.close()

    def cut(self) -> None:
        self.open.clear()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def restore(self) -> None:
        self.open.set()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.listener.close()
