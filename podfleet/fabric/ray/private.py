"""The private local Ray of a data directory: a Ray head of its own that outlives the server.

A Ray cluster created without an address used to be ``ray.init()`` inside the server's
process, so Ray, and every gang's detached actors with it, ended with the server. Now
the factory starts ``ray start --head --block`` in a session of its own (what an operator
runs; ``local_cluster.py`` starts the test clusters the same way), records it in
``<data dir>/ray/head.json`` (0600, in a 0700 directory) and connects to it by address:
the gangs live on a Ray cluster that outlives the server, exactly as on an addressed one,
and a restarted server re-attaches to them (``reattach.py``).

One head per data directory, not per cluster: a process holds one Ray connection
(``fabric._Connection``), so the private-Ray clusters of one server share the head, as
they shared the in-process instance before; each cluster's gangs live in its own
namespace (``podfleet-<cluster id>``).

Its lifetime:

* a crash of the server (kill -9, OOM, a lost host session) leaves it running, and so
  does a clean shutdown (SIGTERM) while a cluster on it has running gangs, which the
  next server adopts as on an addressed cluster. A shutdown that leaves nothing running
  stops it: a Ray head with nothing to keep is not left behind by ``podfleet up``.
* deleting a cluster stops it unless another cluster of the data directory still uses it
  (its fabric is open, or its namespace has gangs on Ray).
* a stop is SIGTERM to the head's process group (``ray start --block`` then takes the
  node down), SIGKILL to the group after ``STOP_WAIT_S``: never ``ray stop``, which would
  end every Ray process of the user.
* a recorded head found dead when the server starts is replaced by a new one (on the
  same port when it is free); its gangs are gone, so the clusters' running jobs resume
  from their checkpoints, with the reason on the job (``PrivateRayFabric.adopt``).
* a head that dies while the server runs is an outage like any Ray head's ("When the Ray
  cluster fails", docs/ray.md: the cluster degraded, its jobs RECOVERING), except that the
  fabric starts the new head itself, on the same port, when it next tries to reconnect.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podfleet.errors import ConflictError, InfeasibleError
from podfleet.fabric.ray import supervisor
from podfleet.fabric.ray.fabric import RayFabric, connected_address
from podfleet.fabric.ray.jobs import RunState
from podfleet.fabric.ray.local_cluster import free_port, head_argv, ray_command, wait_port
from podfleet.fabric.ray.probe import GCS_RECONNECT_ENV, gcs_unreachable
from podfleet.hardware.topology import Topology
from podfleet.security.files import open_private_append, private_dir, write_private
from podfleet.security.workerenv import SERVER_SECRETS

RECORD = "head.json"
TOKEN = "auth_token"  # the head's Ray token (0600), unless the environment sets RAY_AUTH_MODE
AUTH_MODE_ENV, TOKEN_PATH_ENV = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"
# As the in-process instance was: a 100 MB object store (the gangs pass only reports).
OBJECT_STORE_BYTES = 100 * 1024 * 1024
START_TIMEOUT_S = 120.0  # a head's start on two busy cores took 10-30 s
# SIGTERM, then SIGKILL to the group after this: a private head is disposable (what ran on
# it was stopped or is not kept), and a server's shutdown has 5 s for all its cleanup
# (api/server.py CLEANUP_S), where Ray's own shutdown of a head took ~30 s on two cores.
STOP_WAIT_S = 1.0
GONE_WAIT_S = 10.0


def head_dir(cluster_workdir: str | Path) -> Path:
    """Where the head of a cluster's data directory is recorded: ``<data dir>/ray``, beside
    ``<data dir>/clusters/<id>`` (``control.workdir.cluster_workdir``)."""
    return Path(cluster_workdir).parent.parent / "ray"


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the pid: not our head
        return False
    return True


def _is_head(pid: int, port: int) -> bool:
    """Whether ``pid`` is the ``ray start --head`` recorded on ``port`` (not a process that
    reused the pid: its group is signalled when the head stops)."""
    if not _pid_alive(pid):
        return False
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): trust the pid
        return True
    return "--head" in args and f"--port={port}" in args


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return True
    return False


def _kill_leftovers(temp_dir: str) -> None:
    """SIGKILL what is left of a head whose ``ray start`` is gone: Ray's GCS, raylet and
    helpers name its temp directory on their command line (a pid the head's group once
    had may belong to someone else by now; a command line naming that directory does not)."""
    if not temp_dir:
        return
    needle = temp_dir.encode()
    with contextlib.suppress(OSError):
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                with contextlib.suppress(OSError):
                    if needle in (d / "cmdline").read_bytes():
                        os.kill(int(d.name), signal.SIGKILL)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PrivateHead:
    """The private Ray head of one data directory, as this process knows it."""

    def __init__(self, where: Path) -> None:
        self.dir = where
        self.path = where / RECORD
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None  # when this process started it
        self.rec: dict[str, Any] | None = None
        self.users: set[str] = set()  # clusters whose fabric is open on it
        self.keep = False  # a closed fabric left gangs on it for the next server
        self.lost: str | None = None  # why the gangs recorded on it are gone (a dead head replaced)

    @property
    def address(self) -> str:
        assert self.rec is not None
        return str(self.rec["address"])

    @property
    def port(self) -> int:
        assert self.rec is not None
        return int(self.rec["port"])

    def running(self) -> bool:
        if self.rec is None:
            return False
        if self.proc is not None:
            return self.proc.poll() is None
        return _is_head(int(self.rec["pid"]), self.port)

    def ensure(self, cluster_id: str, cpus: int, timeout_s: float = START_TIMEOUT_S) -> bool:
        """Make sure the head runs and listens (``address``): the recorded one when alive,
        else a new one. True when a new one was started (nothing runs on it yet)."""
        with self.lock:
            started = False
            if not self.running():
                rec = self.rec or self._read()
                if rec is not None and _is_head(int(rec["pid"]), int(rec["port"])):
                    self.rec = rec
                    wait_port(self.port, timeout_s, lambda: None if self.running() else -1)
                else:
                    if rec is not None:
                        _kill_leftovers(str(rec.get("temp_dir") or ""))
                        if rec.get("temp_dir"):
                            shutil.rmtree(str(rec["temp_dir"]), ignore_errors=True)
                        self.lost = (f"its private Ray head (pid {rec['pid']}, {rec['address']}) had died while the "
                                     "server was down, and its gangs with it; a new head was started")
                    self._start(cpus, int(rec["port"]) if rec is not None else None, timeout_s)
                    started = True
            self.users.add(cluster_id)
            return started

    def auth_env(self) -> dict[str, str]:
        """Ray's token authentication for the head and every process that talks to it, as
        ``ray.init()`` turned it on for the in-process instance: a token of the data
        directory's own (``<data dir>/ray/auth_token``, 0600). An environment that sets
        ``RAY_AUTH_MODE`` (``disabled``, or ``token`` with its own token) is followed."""
        if os.environ.get(AUTH_MODE_ENV):
            return {}
        path = self.dir / TOKEN
        if not path.exists():
            write_private(path, secrets.token_hex(32).encode())  # 256 bits, as Ray's own generator
        return {AUTH_MODE_ENV: "token", TOKEN_PATH_ENV: str(path)}

    def revive(self) -> str | None:
        """Start a new head on the same port when this one died while the server runs
        (the fabric's reconnect then finds it); None when it runs, else why it cannot."""
        with self.lock:
            if self.rec is None or self.running():
                return None
            port = self.port
            _kill_leftovers(str(self.rec.get("temp_dir") or ""))
            self._remove_temp()
            if not _port_free(port):
                return f"its private Ray head died and port {port} is taken"
            try:
                self._start(int(self.rec.get("cpus") or 2), port, None)
            except InfeasibleError as exc:
                return f"its private Ray head died and could not be started again: {exc.message}"
            return None

    def closed(self, cluster_id: str, *, keep: bool) -> None:
        """A fabric on the head closed; ``keep``: it leaves gangs there (or knows of some).
        The head stops once no fabric of this process is open on it and none keeps it."""
        with self.lock:
            self.users.discard(cluster_id)
            self.keep = self.keep or keep
            if self.users:
                return
            keep, self.keep = self.keep, False
            if not keep:
                self._stop()

    # --- the record and the process ---------------------------------------------------------
    def _read(self) -> dict[str, Any] | None:
        try:
            rec = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return None  # unreadable: start a new head, the record is rewritten
        if not isinstance(rec, dict) or not {"address", "port", "pid"} <= rec.keys():
            return None
        return rec

    def _start(self, cpus: int, port: int | None, timeout_s: float | None) -> None:
        """Spawn the head (``timeout_s`` None: without waiting for it to listen)."""
        ray_bin = ray_command()
        if port is None or not _port_free(port):
            port = free_port()
        private_dir(self.dir)
        tmp = tempfile.mkdtemp(prefix="pfray-", dir="/tmp")  # Ray's socket paths: under 108 bytes
        # Not the server's credentials, and Ray's own wait for a lost GCS: the year the
        # server's driver waits (probe.py) is the server's, not the head's processes'.
        env = {k: v for k, v in os.environ.items() if k not in SERVER_SECRETS and k != GCS_RECONNECT_ENV}
        env.update(self.auth_env())
        with os.fdopen(open_private_append(self.dir / "head.log"), "ab") as log:
            # A session of its own: the server's death, its process group's SIGKILL or its
            # terminal's SIGINT / SIGHUP leave the head (and the gangs on it) running.
            proc = subprocess.Popen(head_argv(ray_bin, port, cpus, tmp, OBJECT_STORE_BYTES), stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                    close_fds=True)
        self.proc = proc
        self.rec = {"address": f"127.0.0.1:{port}", "port": port, "pid": proc.pid, "cpus": cpus, "temp_dir": tmp,
                    "started_at": _rfc3339(time.time()), "log": str(self.dir / "head.log")}
        # Written before the wait: a server killed while the head starts still knows its pid.
        write_private(self.path, json.dumps(self.rec, indent=1).encode())
        if timeout_s is None:
            return
        try:
            wait_port(port, timeout_s, proc.poll)
        except InfeasibleError as exc:
            self._stop()
            raise InfeasibleError(f"cannot start a private Ray head: {exc.message} (see {self.dir / 'head.log'})",
                                  field="ray") from None

    def _stop(self) -> None:
        """SIGTERM to the head's group, SIGKILL after STOP_WAIT_S; the record goes."""
        rec, proc = self.rec, self.proc
        self.rec, self.proc = None, None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        if rec is None:
            return
        pid = int(rec["pid"])
        ours = proc is not None or _is_head(pid, int(rec["port"]))
        if ours:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_WAIT_S
            while time.monotonic() < deadline and not (proc.poll() is not None if proc else not _pid_alive(pid)):
                time.sleep(0.1)
            # The leader gone or not, whatever is left of its group (GCS, raylet, workers).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=GONE_WAIT_S)
            deadline = time.monotonic() + GONE_WAIT_S
            while time.monotonic() < deadline and not _group_gone(pid):
                time.sleep(0.1)
        if rec.get("temp_dir"):
            _kill_leftovers(str(rec["temp_dir"]))  # a worker Ray moved out of the group, if any
            shutil.rmtree(str(rec["temp_dir"]), ignore_errors=True)

    def _remove_temp(self) -> None:
        if self.rec is not None and self.rec.get("temp_dir"):
            shutil.rmtree(str(self.rec["temp_dir"]), ignore_errors=True)


_heads: dict[Path, PrivateHead] = {}
_heads_lock = threading.Lock()


def head_for(where: Path) -> PrivateHead:
    with _heads_lock:
        return _heads.setdefault(where.resolve(), PrivateHead(where))


def others_on(ray: Any, head: PrivateHead, namespace: str) -> bool:
    """Whether gangs of another cluster of the data directory live on the head (a cluster
    whose fabric this process has not built, e.g. one still reconnecting after a restart)."""
    if head.rec is None or gcs_unreachable(("127.0.0.1", head.port)) is not None or not ray.is_initialized():
        return False
    try:
        entries = ray.util.list_named_actors(all_namespaces=True)
    except Exception:  # Ray not answering: nothing to keep that could be reached
        return False
    return any(isinstance(e, dict) and str(e.get("namespace", "")).startswith(supervisor.NAMESPACE_PREFIX)
               and e.get("namespace") != namespace for e in entries)


class PrivateRayFabric(RayFabric):
    """A ``RayFabric`` on the private head of its data directory. ``close`` (a shutdown)
    leaves the head running while gangs run on it; ``dispose`` (the cluster is deleted)
    stops the head unless another cluster uses it. Also ``Disposable``."""

    def __init__(self, head: PrivateHead, cluster_id: str, *args: Any, **kwargs: Any) -> None:
        self.head, self.cluster_id = head, cluster_id
        self.lost = head.lost
        super().__init__(head.address, *args, outlive_plane=True, **kwargs)

    def adopt(self, job_id: str, checkpoint_step: int | None) -> Any:
        if self.lost is not None:  # the gangs died with the old head: say so on the job
            raise ConflictError(self.lost, field="job_id")
        return super().adopt(job_id, checkpoint_step)

    def reconnect(self) -> bool:
        why = self.head.revive()
        if why is not None:
            self.unreachable = f"the Ray cluster at {self.address} is unreachable ({why}); reconnecting"
            return False
        return super().reconnect()

    def close(self) -> None:
        if self._closed:
            return
        with self.state.lock:
            keeps = any(j.state is RunState.RUNNING for j in self.state.jobs.values())
        others = others_on(self.state.ray, self.head, self.namespace)
        super().close()
        self.head.closed(self.cluster_id, keep=keeps or others)

    def dispose(self) -> None:
        if self._closed:
            return
        others = others_on(self.state.ray, self.head, self.namespace)
        super().close()  # stops what still runs: the cluster's jobs were stopped before
        self.head.closed(self.cluster_id, keep=others)


def _speak_auth(env: dict[str, str]) -> None:
    """This process's Ray driver speaks the head's authentication. ``ray.init()`` of the
    in-process instance set the same variable; Ray reads it into its config when it loads
    and caches the token, so a Ray already loaded is told again (as Ray's own
    ``_enable_token_auth`` does), else a driver loaded before sends no token."""
    if not env or all(os.environ.get(k) == v for k, v in env.items()):
        return
    os.environ.update(env)
    raylet = sys.modules.get("ray._raylet")
    if raylet is not None:
        with contextlib.suppress(AttributeError):  # a Ray without token auth
            raylet.Config.initialize("")
            raylet.AuthenticationTokenLoader.instance().reset_cache()


def make_private_fabric(cluster_workdir: str | Path, timeline: Any, topology: Topology, *, resource: str,
                        spares: Iterable[int], per_chip: float, key_file: str | None,
                        namespace: str) -> PrivateRayFabric:
    """Start (or find) the data directory's head and build the cluster's fabric on it."""
    head = head_for(head_dir(cluster_workdir))
    cluster_id = Path(cluster_workdir).name
    ray = sys.modules.get("ray")  # not imported yet: not connected either
    if ray is not None and ray.is_initialized() and head.rec is None:  # before starting a head for nothing
        raise ConflictError(
            f"cannot start a private local Ray: this server is already connected to the Ray cluster at "
            f"{connected_address(ray) or 'another address'} and a process holds one Ray connection (ray.init); "
            "give this cluster that address, or run another podfleet server for a private Ray", field="ray_address")
    _speak_auth(head.auth_env())
    n = topology.n_chips
    started = head.ensure(cluster_id, max(2, n) if resource == "CPU" else 2)
    try:
        return PrivateRayFabric(head, cluster_id, timeline, n, resource=resource, spares=spares, topology=topology,
                                per_chip=per_chip, workdir=str(cluster_workdir), key_file=key_file,
                                namespace=namespace)
    except BaseException:
        # A head found running may hold this cluster's gangs for a later try; one started
        # for this build holds nothing.
        head.closed(cluster_id, keep=not started)
        raise
