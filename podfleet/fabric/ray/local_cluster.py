"""A Ray cluster of several raylets on this machine: a head and extra nodes started with
``ray start --block`` (what an operator runs on each machine), for tests and benchmarks
that need a real multi-node placement without more machines.

Each node is its own process group; ``stop`` sends it SIGTERM (``ray start --block``
then takes its node down) and SIGKILL only if it lingers, so nothing else on the machine
is touched (never ``ray stop``, which ends every Ray process of the user).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from podfleet.errors import InfeasibleError

# A private cluster is disposable: after SIGTERM its `ray start --block` processes get a
# few seconds to exit, then the process group is killed (Ray's own shutdown of a head
# and its raylets took about 30 s on two cores, most of a Ray test module's teardown).
STOP_WAIT_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_command() -> str:
    """The ``ray`` command of this interpreter's environment."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    if not Path(ray_bin).exists():
        raise InfeasibleError(f"no ray command beside {sys.executable}: pip install 'podfleet[ray]'", field="ray")
    return ray_bin


# Every node: in the foreground of its process (its group's leader, so one signal to the
# group takes the node down), on loopback, no usage report.
NODE_ARGS = ("--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats")


def head_argv(ray_bin: str, port: int, cpus: int, temp_dir: str, object_store_bytes: int = 80_000_000) -> list[str]:
    """``ray start`` of a head on ``port`` with ``cpus`` CPUs and no dashboard; Ray's
    socket paths must stay under 108 bytes, so ``temp_dir`` is short (under /tmp)."""
    return [ray_bin, "start", "--head", f"--port={port}", f"--num-cpus={cpus}", "--include-dashboard=false",
            f"--temp-dir={temp_dir}", f"--object-store-memory={object_store_bytes}", *NODE_ARGS]


def wait_port(port: int, timeout_s: float, exited: Callable[[], int | None]) -> None:
    """Until the head listens on ``port``; ``exited`` says whether (with what status) its
    ``ray start`` ended meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rc = exited()
        if rc is not None:
            raise InfeasibleError(f"ray start --head exited with {rc}", field="ray")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.5)
    raise InfeasibleError(f"the Ray head did not listen on {port} within {timeout_s:g} s", field="ray")


@dataclass
class LocalRayCluster:
    """``start()`` a head with ``head_cpus`` and one raylet per entry of ``node_cpus``."""

    head_cpus: int = 2
    node_cpus: Sequence[int] = (1,)
    env: Mapping[str, str] = field(default_factory=dict)  # e.g. {"RAY_AUTH_MODE": "token"}
    log_dir: Path | None = None
    # Per node, the head first: custom resources (``--resources``, e.g. {"neuron_cores": 64})
    # and environment of its own (what a command run on that node sees).
    resources: Sequence[Mapping[str, float]] = ()
    node_env: Sequence[Mapping[str, str]] = ()
    address: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _tmp: str = ""
    _logs: Path = Path("/tmp")
    _extra_tmp: list[str] = field(default_factory=list)

    def start(self, timeout_s: float = 120.0) -> LocalRayCluster:
        ray_bin = ray_command()
        # Ray's socket paths must stay under 108 bytes: a short directory of our own.
        self._tmp = tempfile.mkdtemp(prefix="pfray-", dir="/tmp")
        logs = self.log_dir or Path(self._tmp)
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        self._logs = logs
        try:
            self._spawn(self._head_argv(ray_bin, port, self._tmp), logs / "head.log", self._env(0))
            self._wait_port(port, timeout_s)
            for cpus in self.node_cpus:
                self.add_node(cpus)
        except BaseException:
            self.stop()
            raise
        return self

    def _env(self, index: int) -> dict[str, str]:
        own = self.node_env[index] if index < len(self.node_env) else {}
        return {**os.environ, **self.env, **own}

    def _resources(self, index: int) -> list[str]:
        own = self.resources[index] if index < len(self.resources) else {}
        return [f"--resources={json.dumps(dict(own))}"] if own else []

    def _head_argv(self, ray_bin: str, port: int, tmp: str) -> list[str]:
        return head_argv(ray_bin, port, self.head_cpus, tmp) + self._resources(0)

    def add_node(self, cpus: int) -> int:
        """Start one more raylet (a replacement for a lost one); its index in ``procs``."""
        index = len(self.procs)
        self._spawn([ray_command(), "start", f"--address={self.address}", f"--num-cpus={cpus}",
                     "--object-store-memory=80000000", *self._resources(index), *NODE_ARGS],
                    self._logs / f"raylet-{index}.log", self._env(index))
        return len(self.procs) - 1

    def kill(self, index: int) -> None:
        """SIGKILL one node's process group (0: the head: its GCS and raylet), as a crash."""
        proc = self.procs[index]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def restart_head(self, timeout_s: float = 120.0) -> None:
        """Start a new head on the same port after ``kill(0)``: a new Ray cluster (no GCS
        fault tolerance) behind the same address, as an operator's restart gives."""
        ray_bin = ray_command()
        port = int(self.address.rsplit(":", 1)[1])
        tmp = tempfile.mkdtemp(prefix="pfray-", dir="/tmp")
        self._extra_tmp.append(tmp)
        self._spawn(self._head_argv(ray_bin, port, tmp), self._logs / "head-2.log", self._env(0))
        self.procs[0] = self.procs.pop()  # the killed head's place
        self._wait_port(port, timeout_s)

    def _spawn(self, argv: list[str], log: Path, env: Mapping[str, str]) -> None:
        with log.open("wb") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=dict(env),
                                               start_new_session=True))

    def _wait_port(self, port: int, timeout_s: float) -> None:
        wait_port(port, timeout_s, self.procs[0].poll)

    @property
    def n_nodes(self) -> int:
        return 1 + len(self.node_cpus)

    def wait_nodes(self, timeout_s: float = 120.0) -> list[str]:
        """Wait until every node is alive; the node ids of the raylets other than the head.
        Connects to the cluster for the wait and disconnects again (one Ray connection per
        process: the fabric makes its own)."""
        import ray

        ray.init(address=self.address, log_to_driver=False, configure_logging=False)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                alive = [n for n in ray.nodes() if n["Alive"]]
                if len(alive) >= self.n_nodes:
                    return sorted(str(n["NodeID"]) for n in alive if "node:__internal_head__" not in n["Resources"])
                if time.monotonic() > deadline:
                    raise InfeasibleError(f"{len(alive)} of {self.n_nodes} Ray nodes alive after {timeout_s:g} s",
                                          field="ray")
                time.sleep(0.5)
        finally:
            ray.shutdown()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()
        for tmp in [self._tmp, *self._extra_tmp]:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
        self._tmp = ""
        self._extra_tmp.clear()

    def __enter__(self) -> LocalRayCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
