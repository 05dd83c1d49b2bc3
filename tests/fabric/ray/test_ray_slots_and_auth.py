"""What a Ray cluster's chips say they are, and a token the cluster refuses, without a Ray
instance: ``ray.init`` is replaced by one that raises Ray's own ``AuthenticationError``."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podfleet.control import ControlPlane
from podfleet.control.fabricaccess import FabricAccess
from podfleet.engine.timeline import Timeline
from podfleet.errors import ConflictError, InfeasibleError
from podfleet.fabric.factory import make_fabric, reaches_out
from podfleet.hardware.catalog import custom_grid
from podfleet.hardware.topology import SwitchedTopology
from podfleet.store.memory import MemoryStore

ray = pytest.importorskip("ray")

from podfleet.fabric.ray.fabric import RayFabric, ray_topology  # noqa: E402  (after the importorskip)

MISSING = "Token authentication is enabled but no authentication token was found"


@pytest.mark.parametrize(("resource", "chip_type"), [("CPU", "cpu"), ("GPU", "cuda")])
def test_cpu_and_gpu_slots_are_not_trainium_chips(resource: str, chip_type: str) -> None:
    own = ray_topology(resource, 3)
    assert isinstance(own, SwitchedTopology) and own.chip_type == chip_type and own.n_chips == 3
    asked = ray_topology(resource, 2, custom_grid([2]))  # what `cluster create --chips 2` hands it
    assert asked.chip_type == chip_type and asked.name == "custom" and asked.n_chips == 2


def test_neuron_cores_keep_the_clusters_trainium_type() -> None:
    grid = custom_grid([4], "trn1")
    assert ray_topology("neuron_cores", 4, grid) is grid
    assert ray_topology("neuron_cores", 2, chip_type="trn2").chip_type == "trn2"


@pytest.fixture
def refusing_ray(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def init(**kwargs: Any) -> None:
        calls.append(kwargs)
        raise ray.exceptions.AuthenticationError(MISSING)

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    return calls


def test_a_missing_token_is_one_line_naming_the_fix(refusing_ray: list[dict[str, Any]]) -> None:
    with pytest.raises(InfeasibleError) as info:
        RayFabric(None, None, n_chips=1)
    assert refusing_ray, "ray.init was not called"
    msg = info.value.message
    assert "\n" not in msg and info.value.field == "ray_address"
    assert msg.startswith("cannot connect to Ray at None: the cluster uses token authentication")
    assert MISSING in msg and "RAY_AUTH_TOKEN" in msg and "RAY_AUTH_MODE=token" in msg


@pytest.fixture
def gcs() -> Iterator[str]:
    """A port that accepts TCP (the fabric's probe before ray.init), standing for a GCS."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        yield f"127.0.0.1:{srv.getsockname()[1]}"


def test_a_served_cluster_fails_with_the_reason_not_a_library_error(refusing_ray: list[dict[str, Any]],
                                                                   gcs: str, tmp_path: Path) -> None:
    plane = ControlPlane(MemoryStore(), Timeline(seed=1, speed=1.0), fabric_factory=make_fabric,
                         fabric_access=FabricAccess(ray_addresses=(gcs,)), connect_timeout_s=20.0,
                         reaches_out=reaches_out, workdir=str(tmp_path))
    plane.start()
    try:
        plane.call_sync(plane.create_cluster, {"name": "r", "fabric": "ray", "chips": 2, "ray_address": gcs},
                        actor="t")
        deadline = time.monotonic() + 20
        while (view := plane.call_sync(plane.describe_cluster, "r"))["state"] != "failed":
            assert time.monotonic() < deadline, view
            time.sleep(0.05)
        reason = view["reason"]
        assert reason.startswith(f"cannot connect to fabric ray at {gcs}: cannot connect to Ray at '{gcs}': "
                                 "the cluster uses token authentication"), reason
        assert "RAY_AUTH_TOKEN" in reason and "AuthenticationError" not in reason
        assert view["chip_type"] is None  # not "trn2": unknown until the fabric says (Ray CPU slots: cpu)
    finally:
        plane.stop()


def test_an_inline_build_raises_the_reason_the_api_answers(refusing_ray: list[dict[str, Any]], gcs: str,
                                                            tmp_path: Path) -> None:
    # Not served (virtual time): the fabric is built in the request, so the error is the answer.
    plane = ControlPlane(MemoryStore(), Timeline(seed=1), fabric_factory=make_fabric,
                         fabric_access=FabricAccess(ray_addresses=(gcs,)), workdir=str(tmp_path))
    with pytest.raises(InfeasibleError, match=r"token authentication.*RAY_AUTH_TOKEN"):
        plane.create_cluster({"name": "r", "fabric": "ray", "chips": 2, "ray_address": gcs}, actor="t")
    assert "r" not in plane.names


# --- one Ray connection a process (issue 30 item 11) -------------------------------------


@pytest.fixture
def connected(monkeypatch: pytest.MonkeyPatch) -> Any:
    """This process already connected (by a fabric) to the Ray cluster at 10.0.0.5:6379;
    ``ray.init`` must not be called again."""
    from podfleet.fabric.ray import fabric as fr

    def init(**kwargs: Any) -> None:
        raise AssertionError(f"ray.init called again: {kwargs}")

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(fr._connection, "started", True)
    monkeypatch.setattr(fr._connection, "address", "10.0.0.5:6379")
    monkeypatch.setattr(fr._connection, "users", 0)
    return fr


def test_another_address_is_refused_naming_both(connected: Any) -> None:
    with pytest.raises(ConflictError) as info:
        RayFabric._connect(ray, "127.0.0.1:1", 2, "CPU", None)
    msg = info.value.message
    assert info.value.http_status == 409 and info.value.field == "ray_address"
    assert "'127.0.0.1:1'" in msg and "10.0.0.5:6379" in msg and "\n" not in msg


def test_a_private_instance_is_refused_beside_a_remote_connection(connected: Any) -> None:
    with pytest.raises(ConflictError, match=r"private local Ray.*10\.0\.0\.5:6379"):
        RayFabric._connect(ray, None, 2, "CPU", None)


@pytest.mark.parametrize("address", ["10.0.0.5:6379", "auto"])
def test_the_same_cluster_shares_the_connection(connected: Any, address: str) -> None:
    RayFabric._connect(ray, address, 2, "CPU", None)


def test_a_connection_the_embedding_program_opened_is_compared_by_its_gcs(connected: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connected._connection, "started", False)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: type("Ctx", (), {"gcs_address": "10.0.0.7:6379"})())
    RayFabric._connect(ray, None, 2, "CPU", None)
    RayFabric._connect(ray, "10.0.0.7:6379", 2, "CPU", None)
    with pytest.raises(ConflictError, match=r"'127\.0\.0\.1:1'.*10\.0\.0\.7:6379"):
        RayFabric._connect(ray, "127.0.0.1:1", 2, "CPU", None)


def test_an_inline_build_beside_another_connection_is_a_409(connected: Any, tmp_path: Path) -> None:
    plane = ControlPlane(MemoryStore(), Timeline(seed=1), fabric_factory=make_fabric,
                         fabric_access=FabricAccess(ray_addresses=("127.0.0.1:1",)), workdir=str(tmp_path))
    with pytest.raises(ConflictError, match=r"already connected to the Ray cluster at 10\.0\.0\.5:6379"):
        plane.create_cluster({"name": "r", "fabric": "ray", "chips": 2, "ray_address": "127.0.0.1:1"}, actor="t")
    assert "r" not in plane.names
