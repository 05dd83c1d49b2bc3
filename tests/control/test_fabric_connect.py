"""Fabrics that reach outside the process are built off the engine thread (control.connect).

A served plane (paced timeline, engine thread) with a fabric factory whose ``ray`` builds
wait on the test: a build that hangs leaves every other write answering, and the
cluster ends ``failed`` with the reason within the connection timeout. The allow-list
of Ray addresses and Neuron commands refuses what an administrator did not list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from podfleet.control import ControlPlane
from podfleet.control.fabricaccess import FabricAccess
from podfleet.engine.timeline import Timeline
from podfleet.errors import ConflictError, ForbiddenError, InfeasibleError, InvalidInputError
from podfleet.fabric.base import Fabric
from podfleet.fabric.factory import make_fabric, reaches_out
from podfleet.hardware.topology import Topology
from podfleet.store.memory import MemoryStore
from podfleet.store.protocol import StoreProtocol

ADDR = "10.9.8.7:6379"
TIMEOUT_S = 1.5


class Unowned:
    """What a late build brings: nobody installs it, so it must be closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


class Factory:
    """``ray`` builds: a local fabric of worker slots after ``gate`` opens (or ``error``);
    other kinds as the real factory builds them."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.gate = threading.Event()
        self.error: Exception | None = None
        self.late: Unowned | None = None  # returned instead of a fabric, when set
        self.builds = 0
        self.threads: list[str] = []

    def __call__(self, kind: str, topology: Topology, timeline: Any, spares: tuple[int, ...], seed: int,
                 *, options: Mapping[str, Any] | None = None) -> Fabric:
        if kind != "ray":
            return make_fabric(kind, topology, timeline, spares, seed, options=options)
        self.builds += 1
        self.threads.append(threading.current_thread().name)
        self.gate.wait(60)
        if self.error is not None:
            raise self.error
        if self.late is not None:
            return self.late  # type: ignore[return-value]
        from podfleet.fabric.local import LocalFabric

        return LocalFabric(topology.n_chips, timeline, spares=spares, workdir=str(self.tmp / "work"))


def served(store: StoreProtocol, factory: Factory, access: FabricAccess | None = None) -> ControlPlane:
    plane = ControlPlane(store, Timeline(seed=1, speed=1.0), fabric_factory=factory, telemetry_interval_s=0.2,
                         fabric_access=access or FabricAccess(ray_addresses=(ADDR,)), connect_timeout_s=TIMEOUT_S,
                         reaches_out=reaches_out)
    plane.start()
    return plane


@pytest.fixture
def factory(tmp_path: Path) -> Factory:
    return Factory(tmp_path)


@pytest.fixture
def plane(factory: Factory) -> Iterator[ControlPlane]:
    p = served(MemoryStore(), factory)
    try:
        yield p
    finally:
        factory.gate.set()
        p.stop()


def ray_body(name: str = "r", address: str | None = ADDR) -> dict[str, Any]:
    return {"name": name, "fabric": "ray", "chips": 2, **({"ray_address": address} if address else {})}


def until(cond: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def state(plane: ControlPlane, ref: str) -> str:
    return str(plane.call_sync(plane.describe_cluster, ref)["state"])


def test_a_hanging_connection_blocks_no_write_and_fails_the_cluster_in_time(plane: ControlPlane,
                                                                           factory: Factory) -> None:
    t0 = time.monotonic()
    view = plane.call_sync(plane.create_cluster, ray_body(), actor="t")
    # Answered while the build waits (a blocked engine would not answer at all: call_sync
    # gives up after 30 s); the bound is loose for a loaded machine.
    assert time.monotonic() - t0 < 5.0
    assert view["state"] == "deploying" and view["deployment"]["state"] == "connecting"
    assert f"connecting to fabric ray at {ADDR}" in view["reason"]
    assert factory.threads == [f"podfleet-connect-{view['id']}"]  # never the engine thread
    # Writes to other clusters keep answering while it connects (the build is still held).
    for i in range(3):
        t = time.monotonic()
        other = plane.call_sync(plane.create_cluster, {"name": f"sim-{i}", "type": "trn2-node"}, actor="t")
        plane.call_sync(plane.delete_cluster, other["id"], actor="t")
        assert time.monotonic() - t < 5.0 and not factory.gate.is_set()
    # Reads and writes naming it say it is connecting, never hang.
    with pytest.raises(ConflictError, match="still connecting"):
        plane.call_sync(plane.jobs.submit, "r", {"model": "debug", "chips": 1}, actor="t")
    until(lambda: state(plane, "r") == "failed", TIMEOUT_S + 10)
    assert time.monotonic() - t0 < TIMEOUT_S + 10  # the timeout, not the build, ended it
    out = plane.call_sync(plane.describe_cluster, "r")
    assert out["reason"] == f"cannot connect to fabric ray at {ADDR}: timed out after {TIMEOUT_S:g} s"
    assert out["deployment"]["state"] == "failed"
    assert [c["name"] for c in plane.call_sync(plane.list_clusters)[0]] == ["r"]
    logs, _progress = plane.cluster_log("r")
    assert logs.closed and "timed out" in logs.since(0)[-1]["message"]
    # The build that answers after the timeout is closed, not installed.
    factory.late = Unowned()
    factory.gate.set()
    assert factory.late.closed.wait(5)
    assert state(plane, "r") == "failed"
    plane.call_sync(plane.delete_cluster, "r", actor="t")  # failed clusters are deleted like others
    assert plane.call_sync(plane.list_clusters)[0] == []


def test_a_build_that_answers_is_installed_and_deploys(plane: ControlPlane, factory: Factory) -> None:
    view = plane.call_sync(plane.create_cluster, ray_body(), actor="t")
    assert view["state"] == "deploying"
    factory.gate.set()
    until(lambda: state(plane, "r") == "active")
    out = plane.call_sync(plane.describe_cluster, "r")
    assert out["chips"] == 2 and out["reason"] == "deployment succeeded"
    lines = [ln["message"] for ln in plane.cluster_log("r")[0].since(0)]
    assert lines[0].startswith(f"connecting to fabric ray at {ADDR}") and lines[1] == f"connected to fabric ray at {ADDR}"
    assert plane.call_sync(plane.hardware, "r")  # a runtime with its snapshot, as any cluster
    plane.call_sync(plane.delete_cluster, "r", actor="t")


def test_a_build_error_is_the_reason(plane: ControlPlane, factory: Factory) -> None:
    factory.error = InfeasibleError("the Ray cluster has 1 CPU; a chip needs 2", field="resource")
    factory.gate.set()
    plane.call_sync(plane.create_cluster, ray_body(), actor="t")
    until(lambda: state(plane, "r") == "failed")
    reason = plane.call_sync(plane.describe_cluster, "r")["reason"]
    assert reason == f"cannot connect to fabric ray at {ADDR}: the Ray cluster has 1 CPU; a chip needs 2"
    with pytest.raises(ConflictError, match=r"has no fabric: .*delete it"):
        plane.call_sync(plane.refresh_hardware, "r")


def test_delete_while_connecting_discards_the_late_fabric(plane: ControlPlane, factory: Factory) -> None:
    plane.call_sync(plane.create_cluster, ray_body(), actor="t")
    out = plane.call_sync(plane.delete_cluster, "r", actor="t")
    assert out["state"] == "deleted"
    factory.late = Unowned()
    factory.gate.set()
    assert factory.late.closed.wait(5)
    again = plane.call_sync(plane.create_cluster, ray_body(), actor="t")  # the name is free again
    assert again["id"] != out["id"]


def test_a_cluster_that_never_connected_reloads_failed_without_a_build(tmp_path: Path) -> None:
    store, factory = MemoryStore(), Factory(tmp_path)
    factory.error = InfeasibleError("cannot connect to Ray at '10.9.8.7:6379': Connection refused")
    factory.gate.set()
    p1 = served(store, factory)
    try:
        p1.call_sync(p1.create_cluster, ray_body(), actor="t")
        until(lambda: state(p1, "r") == "failed")
    finally:
        p1.stop()
    p2 = served(store, factory)
    try:
        out = p2.call_sync(p2.describe_cluster, "r")
        assert out["state"] == "failed" and "Connection refused" in out["reason"]
        assert factory.builds == 1  # not tried again: the operator deletes and re-creates it
        p2.call_sync(p2.delete_cluster, "r", actor="t")
    finally:
        p2.stop()


def test_a_deployed_cluster_reconnects_off_the_engine_after_a_restart(tmp_path: Path) -> None:
    store, factory = MemoryStore(), Factory(tmp_path)
    factory.gate.set()
    p1 = served(store, factory)
    try:
        p1.call_sync(p1.create_cluster, ray_body(), actor="t")
        until(lambda: state(p1, "r") == "active")
    finally:
        p1.stop()
    factory.gate.clear()
    p2 = served(store, factory)  # starts at once: the reload does not wait for Ray
    try:
        out = p2.call_sync(p2.describe_cluster, "r")
        assert out["state"] == "active" and "reconnecting" in out["reason"]
        factory.gate.set()
        until(lambda: "r" in [c["name"] for c in p2.call_sync(p2.list_clusters)[0]] and "r" not in p2.connecting
              and p2.names["r"] in p2.clusters)
        assert p2.call_sync(p2.describe_cluster, "r")["reason"] == "fabric reconnected after a restart"
    finally:
        p2.stop()


def test_a_restart_while_the_fabric_is_down_retries_with_backoff_and_keeps_the_jobs(tmp_path: Path) -> None:
    # A Ray head down while the server restarts: the cluster stays listed (describe
    # answers, create says it exists), its connection is tried again with backoff, and
    # its job waits with the reason instead of failing; once Ray is back it reconnects.
    store, factory = MemoryStore(), Factory(tmp_path)
    factory.gate.set()
    p1 = served(store, factory)
    try:
        p1.call_sync(p1.create_cluster, ray_body(), actor="t")
        until(lambda: state(p1, "r") == "active")
        jid = p1.call_sync(p1.jobs.submit, "r", {"model": "debug", "chips": 1, "steps": 100_000,
                                                 "checkpoint_interval": 0, "options": {"step_delay_s": 0.05}},
                           actor="t")["id"]
        until(lambda: p1.call_sync(p1.jobs.describe, jid)["state"] == "RUNNING", 60)
    finally:
        p1.stop()
    factory.error = InfeasibleError("cannot connect to Ray at '10.9.8.7:6379': Connection refused")
    p2 = served(store, factory)
    try:
        until(lambda: "trying again in 2 s (attempt 1)" in p2.call_sync(p2.describe_cluster, "r")["reason"])
        with pytest.raises(ConflictError):
            p2.call_sync(p2.create_cluster, ray_body(), actor="t")
        until(lambda: "attempt 2" in p2.call_sync(p2.describe_cluster, "r")["reason"], 30)
        job = p2.call_sync(p2.jobs.describe, jid)
        assert job["state"] != "FAILED" and "waiting for its cluster's fabric" in job["reason"]
        factory.error = None
        until(lambda: p2.names["r"] in p2.clusters, 30)
        assert p2.call_sync(p2.describe_cluster, "r")["state"] == "active"
        until(lambda: p2.call_sync(p2.jobs.describe, jid)["state"] in ("RECOVERING", "RUNNING"), 30)
        assert factory.builds >= 4
    finally:
        p2.stop()


def test_an_address_no_longer_allowed_is_not_reconnected_after_a_restart(tmp_path: Path) -> None:
    store, factory = MemoryStore(), Factory(tmp_path)
    factory.gate.set()
    p1 = served(store, factory)
    try:
        p1.call_sync(p1.create_cluster, ray_body(), actor="t")
        until(lambda: state(p1, "r") == "active")
    finally:
        p1.stop()
    p2 = served(store, factory, FabricAccess())  # the administrator removed the address
    try:
        out = p2.call_sync(p2.describe_cluster, "r")
        assert out["reason"].startswith(f"not reconnected after a restart: ray_address '{ADDR}' is not allowed")
        assert factory.builds == 1
        with pytest.raises(ConflictError, match="has no fabric: ray_address"):
            p2.call_sync(p2.jobs.submit, "r", {"model": "debug", "chips": 1}, actor="t")
        p2.call_sync(p2.delete_cluster, "r", actor="t")
    finally:
        p2.stop()


# --- the allow-list -----------------------------------------------------------------------------
def test_an_address_not_allowed_is_refused_naming_the_setting(plane: ControlPlane) -> None:
    with pytest.raises(ForbiddenError, match="PODFLEET_RAY_ADDRESSES") as exc:
        plane.call_sync(plane.create_cluster, ray_body(address="127.0.0.1:1"), actor="t")
    assert "'127.0.0.1:1' is not allowed" in exc.value.message and "\n" not in exc.value.message
    assert plane.call_sync(plane.list_clusters)[0] == []
    assert plane.store.list_audit(limit=10)[-1].result == "error:forbidden"


@pytest.mark.parametrize(("access", "address", "ok"), [
    (FabricAccess(), "127.0.0.1:1", False),  # unset: only the server's own Ray
    (FabricAccess(), "auto", False),
    (FabricAccess(), None, True),  # a private local Ray (or PODFLEET_RAY_ADDRESS)
    (FabricAccess(own_ray_address="head:6379"), "head:6379", True),
    (FabricAccess(ray_addresses=()), "head:6379", False),
    (FabricAccess.parse("a:1, ray://b:10001", None, None), "ray://b:10001", True),
    (FabricAccess.parse("a:1, ray://b:10001", None, None), "b:10001", False),
])
def test_ray_allow_list(access: FabricAccess, address: str | None, ok: bool) -> None:
    from podfleet.control.specs import ClusterSpec

    spec = ClusterSpec.parse(ray_body(address=address))
    if ok:
        access.check(spec)
    else:
        with pytest.raises(ForbiddenError, match="PODFLEET_RAY_ADDRESSES"):
            access.check(spec)


@pytest.mark.parametrize(("allowed", "command", "ok"), [
    (None, "neuron-ls --json-output", True),
    (None, "neuron-monitor -c /etc/nm.json", True),
    (None, "/bin/sh -c 'curl evil'", False),
    (None, "neuron-lsx", False),
    ('["/opt/tools/replay.py /data/ls.json"]', "/opt/tools/replay.py /data/ls.json --delay 1", True),
    ('["/opt/tools/replay.py /data/ls.json"]', "/opt/tools/replay.py /etc/shadow", False),
])
def test_neuron_command_allow_list(allowed: str | None, command: str, ok: bool) -> None:
    from podfleet.control.specs import ClusterSpec

    access = FabricAccess.parse(None, None, allowed)
    spec = ClusterSpec.parse({"name": "n", "fabric": "neuron", "neuron_ls": command})
    if ok:
        access.check(spec)
    else:
        with pytest.raises(ForbiddenError, match="PODFLEET_NEURON_COMMANDS"):
            access.check(spec)


@pytest.mark.parametrize("bad", ["neuron-ls", "[1]", '[""]', "[\"x 'unclosed\"]"])
def test_a_malformed_command_list_names_the_setting(bad: str) -> None:
    with pytest.raises(InvalidInputError, match="PODFLEET_NEURON_COMMANDS"):
        FabricAccess.parse(None, None, bad)


def test_a_malformed_allow_list_stops_the_server_before_it_opens_anything(tmp_path: Path) -> None:
    from podfleet.api.server import build_server
    from podfleet.settings import Settings

    db = tmp_path / "pf.db"
    with pytest.raises(InvalidInputError, match="PODFLEET_NEURON_COMMANDS must be a JSON list"):
        build_server(Settings(neuron_commands="neuron-ls,neuron-monitor", db=f"sqlite:///{db}"))
    assert not db.exists()


def test_processes_a_build_starts_outlive_its_thread(tmp_path: Path) -> None:
    # Ray starts its private GCS and raylet with PR_SET_PDEATHSIG, which Linux sends when
    # the *thread* that started them exits: a finished build thread must not exit.
    import ctypes
    import signal
    import subprocess

    def die_with_parent_thread() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

    factory = Factory(tmp_path)
    factory.gate.set()
    children: list[subprocess.Popen[bytes]] = []
    real_call = factory.__call__

    def build(kind: str, topology: Topology, timeline: Any, spares: tuple[int, ...], seed: int,
              *, options: Mapping[str, Any] | None = None) -> Fabric:
        if kind == "ray":
            children.append(subprocess.Popen(["sleep", "60"], preexec_fn=die_with_parent_thread))
        return real_call(kind, topology, timeline, spares, seed, options=options)

    plane = ControlPlane(MemoryStore(), Timeline(seed=1, speed=1.0), fabric_factory=build,
                         fabric_access=FabricAccess(ray_addresses=(ADDR,)), connect_timeout_s=TIMEOUT_S,
                         reaches_out=reaches_out)
    plane.start()
    try:
        plane.call_sync(plane.create_cluster, ray_body(), actor="t")
        until(lambda: state(plane, "r") == "active")
        time.sleep(0.5)
        assert children and children[0].poll() is None, "the build thread's exit killed its child"
    finally:
        plane.stop()
        for child in children:
            child.kill()
            child.wait(5)
