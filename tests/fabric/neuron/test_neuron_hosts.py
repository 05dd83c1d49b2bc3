"""A neuron cluster across Ray nodes (``NeuronHostsFabric``): two raylets of this machine
(the head and a second node, 64 ``neuron_cores`` each) are two Trainium hosts whose
neuron-ls and neuron-monitor are replayed per node (``NEURON_REPLAY_HOST`` in each
raylet's environment picks the host's documents). One Ray cluster and one fabric for the
module: the joined topology, each host's monitor faults on its own chips, and a job's
ranks on their devices' nodes with their devices' cores."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.fabric.base import ChipState, FabricEvent, WorkerGroupSpec
from podfleet.fabric.neuron.hosts import join_hosts
from podfleet.hardware.catalog import custom_grid, get_topology

HERE = Path(__file__).parent
DATA = HERE / "data"

PROBE = """
    import json, os, sys
    import ray

    with open(os.path.join(sys.argv[1], f"rank-{os.environ['RANK']}.json"), "w") as f:
        json.dump({"cores": os.environ.get("NEURON_RT_VISIBLE_CORES"),
                   "host": os.environ.get("NEURON_REPLAY_HOST"),
                   "node_id": ray.get_runtime_context().get_node_id()}, f)
"""


def test_hosts_join_as_the_z_rings() -> None:
    node = get_topology("trn2-node")
    four = join_hosts([node] * 4)
    us = get_topology("trn2-ultraserver")
    assert (four.name, four.n_chips) == ("trn2-ultraserver", 64)
    assert [four.coords(c) for c in range(64)] == [us.coords(c) for c in range(64)]
    assert {(lk.src, lk.dst, lk.axis) for lk in four.links} == {(lk.src, lk.dst, lk.axis) for lk in us.links}
    two = join_hosts([node] * 2)
    assert two.n_chips == 32 and two.coords(16 + 5) == (1, 1, 1)  # host 1's device 5
    with pytest.raises(InvalidInputError, match="wiring differs: 4x4 / 16"):
        join_hosts([node, custom_grid([16])])
    with pytest.raises(InfeasibleError, match="trn1 hosts are not joined"):
        join_hosts([get_topology("trn1-node")] * 2)


AGENT = """
    import sys, time
    from podfleet.fabric.neuron.command import MonitorSupervisor

    sup = MonitorSupervisor(sys.argv[1], on_report=lambda r: None, on_trouble=print, die_with_parent=True)
    sup.start()
    while sup.pid is None:
        time.sleep(0.05)
    print(sup.pid, flush=True)
    time.sleep(60)
"""


@pytest.mark.realproc
def test_a_host_agents_monitor_dies_with_it(tmp_path: Path) -> None:
    """An agent Ray kills (its owner, the control plane, died) leaves no neuron-monitor behind,
    even one that is silent (it would not meet the closed pipe until its next report)."""
    import os
    import signal
    import subprocess

    import psutil

    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(AGENT))
    monitor = shlex.join([sys.executable, str(HERE / "replay.py"), str(DATA / "neuron-monitor-trn2-48xlarge.jsonl"),
                          "--then", "sleep"])
    agent = subprocess.Popen([sys.executable, str(script), monitor], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        assert agent.stdout is not None
        child = psutil.Process(int(agent.stdout.readline()))
        assert "replay.py" in " ".join(child.cmdline())
        time.sleep(1.5)  # past its three reports (0.1 s apart): silent from now on
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        gone, _ = psutil.wait_procs([child], timeout=10)
        assert gone, f"the monitor {child.pid} outlived its agent"
    finally:
        if agent.poll() is None:
            os.kill(agent.pid, signal.SIGKILL)
        if child is not None and child.is_running():
            child.kill()


def test_a_ray_address_names_the_hosts_of_a_neuron_cluster_only() -> None:
    from podfleet.control.specs import ClusterSpec

    spec = ClusterSpec.parse({"name": "us", "type": "trn2-ultraserver", "fabric": "neuron", "ray_address": "head:6379"})
    assert spec.fabric_options() == {"ray_address": "head:6379", "neuron_ls": "neuron-ls --json-output",
                                     "neuron_monitor": "neuron-monitor"}
    with pytest.raises(InfeasibleError, match="ray_address applies to fabric ray or neuron, not 'local'"):
        ClusterSpec.parse({"name": "c", "fabric": "local", "chips": 2, "ray_address": "head:6379"})


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    pytest.importorskip("ray")
    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.neuron.hosts import NeuronHostsFabric
    from tests.fabric.ray.clusters import two_raylets

    tmp = tmp_path_factory.mktemp("neuronhosts")
    ls = json.loads((DATA / "neuron-ls-trn2-48xlarge.json").read_text())
    reports = (DATA / "neuron-monitor-trn2-48xlarge.jsonl").read_text().splitlines()
    for h in (0, 1):
        own = [{**d, "instance_id": f"i-host{h}", "bdf": f"{0xcc + h:02x}:{d['neuron_device']:02x}.0"} for d in ls]
        (tmp / f"ls-{h}.json").write_text(json.dumps(own))
    # Host 0 stays clean; host 1's third report has an uncorrectable SRAM error on its device 5.
    (tmp / "monitor-0.jsonl").write_text("\n".join(reports[:2]) + "\n")
    (tmp / "monitor-1.jsonl").write_text("\n".join(reports) + "\n")
    replay = [sys.executable, str(HERE / "replay_ls.py"), str(tmp / "ls-{host}.json"), "--host-env", "NEURON_REPLAY_HOST"]
    monitor = [sys.executable, str(HERE / "replay.py"), str(tmp / "monitor-{host}.jsonl"), "--delay", "0.2",
               "--host-env", "NEURON_REPLAY_HOST"]
    with two_raylets(tmp, resources=[{"neuron_cores": 64}] * 2,
                     node_env=[{"NEURON_REPLAY_HOST": "0"}, {"NEURON_REPLAY_HOST": "1"}]) as cluster:
        tl = Timeline(seed=0, speed=1.0)
        engine = threading.Thread(target=tl.serve_forever, daemon=True)
        engine.start()
        events: list[FabricEvent] = []
        fab = NeuronHostsFabric(cluster["address"], tl, neuron_ls=shlex.join(replay),
                                neuron_monitor=shlex.join(monitor), workdir=str(tmp / "work"), poll_s=0.2)
        fab.subscribe(events.append)
        try:
            yield {"fab": fab, "events": events, "raylet": cluster["raylet"], "tmp": tmp,
                   "address": cluster["address"], "neuron_ls": shlex.join(replay), "neuron_monitor": shlex.join(monitor)}
        finally:
            fab.close()
            tl.stop()


def wait(pred: Any, timeout_s: float = 60.0, why: Any = lambda: "") -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s {why()}"
        time.sleep(0.2)


@pytest.mark.ray
@pytest.mark.realproc
def test_two_hosts_are_one_torus_of_their_devices(hosts: dict[str, Any]) -> None:
    fab = hosts["fab"]
    head, node = fab.hosts
    assert node.node_id == hosts["raylet"] and head.node_id != node.node_id
    assert [(h.index, h.offset, h.inventory.n_devices) for h in fab.hosts] == [(0, 0, 16), (1, 16, 16)]
    # Each host's own neuron-ls (run on its node): its bdfs.
    assert [h.inventory.devices[5].bdf for h in fab.hosts] == ["cc:05.0", "cd:05.0"]
    topo = fab.topology
    assert (topo.name, topo.n_chips, topo.dims) == ("trn2-4x4x2-hosts", 32, (4, 4, 2))
    assert topo.coords(5) == (1, 1, 0) and topo.coords(16 + 5) == (1, 1, 1)
    assert any({lk.src, lk.dst} == {5, 21} and lk.axis == 2 for lk in topo.links)  # a Z link between the hosts
    assert fab.device_cores(16 + 5) == [20, 21, 22, 23]  # node-local numbering
    assert len(fab.chip_metrics()["mem_ecc_uncorrected"]) == 32


@pytest.mark.ray
@pytest.mark.realproc
def test_a_hosts_monitor_fault_reaches_that_hosts_chip(hosts: dict[str, Any]) -> None:
    fab, events = hosts["fab"], hosts["events"]
    wait(lambda: fab.chip_states()[21] is ChipState.FAILED)
    states = fab.chip_states()
    assert states[5] is ChipState.HEALTHY  # the same device of the other host
    assert [c for c, s in enumerate(states) if s is not ChipState.HEALTHY] == [21]
    [failed] = [e for e in fab.hardware_errors() if e.kind == "chip-failed"]
    assert failed.chip == 21 and failed.detail["cause"] == "sram-uncorrectable"
    assert "Neuron device 5 (bdf cd:05.0) of host 1" in failed.detail["reason"]
    wait(lambda: any(e.kind == "chip-failed" and e.chip == 21 for e in events))
    assert fab.chip_metrics()["sram_ecc_uncorrected"][21] == 1 and fab.chip_metrics()["sram_ecc_uncorrected"][5] == 0
    status = fab.monitor_status()
    assert [h["state"] for h in status["hosts"]] == ["ok", "ok"] and all(h["reports"] for h in status["hosts"])


@pytest.mark.ray
@pytest.mark.realproc
def test_ranks_start_on_their_devices_nodes_with_their_cores(hosts: dict[str, Any]) -> None:
    fab, tmp = hosts["fab"], hosts["tmp"]
    script, out = tmp / "probe.py", tmp / "probe"
    script.write_text(textwrap.dedent(PROBE))
    out.mkdir()
    # Rank 0 on host 0's device 3, rank 1 on host 1's device 2.
    fab.launch(WorkerGroupSpec("job-hosts", (3, 16 + 2), "custom", 1, 0, entrypoint=str(script),
                               options={"entrypoint_args": [str(out)]}))
    wait(lambda: len(list(out.glob("rank-*.json"))) == 2, 240,
         lambda: f"{fab.run_status('job-hosts')} {fab.run_logs('job-hosts')[-5:]}")
    seen = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    head, node = fab.hosts
    assert seen == [{"cores": "12-15", "host": "0", "node_id": head.node_id},
                    {"cores": "8-11", "host": "1", "node_id": node.node_id}]
    wait(lambda: any("NEURON_RT_VISIBLE_CORES=8-11" in line for line in fab.run_logs("job-hosts")), 60,
         lambda: fab.run_logs("job-hosts"))


@pytest.mark.ray
@pytest.mark.realproc
def test_cluster_create_with_a_ray_address_spans_the_hosts(hosts: dict[str, Any]) -> None:
    """``cluster create --fabric neuron --ray-address ADDR``: the control plane's cluster is
    the hosts' joined topology, and host 1's fault shows on its chip in hardware describe."""
    from podfleet import compose
    from podfleet.control.fabricaccess import FabricAccess
    from podfleet.engine.timeline import Timeline
    from podfleet.store.memory import MemoryStore

    access = FabricAccess(ray_addresses=(hosts["address"],), neuron_commands=(sys.executable,))
    built = compose.build(MemoryStore(), Timeline(seed=3, speed=1.0), workdir=str(hosts["tmp"] / "plane"),
                          fabric_access=access, telemetry_interval_s=0.5)
    plane = built.plane
    plane.start()
    plane.call_timeout_s = 120
    try:
        plane.call_sync(plane.create_cluster, {
            "name": "us", "type": "trn2-ultraserver", "fabric": "neuron", "ray_address": hosts["address"],
            "neuron_ls": hosts["neuron_ls"], "neuron_monitor": hosts["neuron_monitor"]}, actor="t")
        wait(lambda: plane.describe_cluster("us")["state"] != "deploying", 120)
        view = plane.describe_cluster("us")
        assert view["state"] == "active", view
        assert view["chips"] == 32, view
        wait(lambda: json.loads(plane.hardware("us", 21))["state"] == "failed", 60)
        assert json.loads(plane.hardware("us", 5))["state"] == "healthy"
    finally:
        plane.stop()


@pytest.mark.ray
@pytest.mark.realproc
def test_a_host_whose_devices_do_not_match_its_cores_is_refused_by_name(hosts: dict[str, Any]) -> None:
    from podfleet.fabric.neuron.hosts import NeuronHostsFabric

    tmp = hosts["tmp"]
    (tmp / "bad-0.json").write_text((tmp / "ls-0.json").read_text())
    (tmp / "bad-1.json").write_text((DATA / "neuron-ls-trn2-3xlarge.json").read_text())  # one device
    ls = shlex.join([sys.executable, str(HERE / "replay_ls.py"), str(tmp / "bad-{host}.json"),
                     "--host-env", "NEURON_REPLAY_HOST"])
    with pytest.raises(InfeasibleError) as err:
        NeuronHostsFabric(hosts["address"], None, neuron_ls=ls, neuron_monitor=hosts["neuron_monitor"])
    assert err.value.message == (f"Ray node {hosts['raylet'][:12]} ({hosts['fab'].hosts[1].ip}) has 16 chips of "
                                 "neuron_cores (4 per chip) but its neuron-ls reports 1 Neuron devices")
    assert hosts["fab"].monitor_status()["state"] == "ok"  # the other cluster on these hosts is untouched
