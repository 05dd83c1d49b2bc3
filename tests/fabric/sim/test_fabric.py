"""SimFabric over any topology: shapes, states, links, injection errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from podfleet.engine import Timeline
from podfleet.errors import (
    ConflictError,
    InvalidInputError,
    InvalidTransitionError,
    NotFoundError,
    UnknownNameError,
)
from podfleet.fabric.base import ChipState, Fabric, LinkState, WorkerGroupSpec
from podfleet.fabric.sim import METRIC_NAMES, SimFabric


@pytest.mark.parametrize(
    ("name", "chips", "links"),
    [("trn2-ultraserver", 64, 192), ("trn2-node", 16, 32), ("dgx-h100", 8, 8), ("trn2-ultraserver:4", 256, 768),
     ("dgx-a100:4", 32, 32)],
)
def test_shapes_over_topologies(name: str, chips: int, links: int) -> None:
    tl = Timeline(1)
    fab = SimFabric(name, tl)
    assert isinstance(fab, Fabric)
    tl.run(10.0)
    assert len(fab.chip_states()) == chips and set(fab.chip_states()) == {ChipState.HEALTHY}
    assert len(fab.link_states()) == links
    m = fab.chip_metrics()
    assert set(m) == set(METRIC_NAMES) and len(METRIC_NAMES) >= 16
    assert m["neuroncore_utilization"].shape == (chips, fab.spec.cores)
    assert all(v.shape[0] == chips for v in m.values())
    lm = fab.link_metrics()
    assert all(v.shape == (links,) for v in lm.values())
    # Every link joins two chips of the topology (or a chip and its switch).
    assert (lm["src"] >= 0).all() and (lm["dst"] < chips).all()


def test_fleet_of_1024_pods_builds_and_samples() -> None:
    tl = Timeline(1)
    fab = SimFabric("trn2-ultraserver:1024", tl)
    tl.run(5.0)
    assert fab.n_chips == 65_536 and fab.links.n == 1024 * 192
    assert fab.ticks == 2
    # Fleet links stay inside their pod.
    assert ((fab.links.src // 64) == (fab.links.dst // 64)).all()


def test_idle_telemetry_is_plausible(pod: SimFabric, tl: Timeline) -> None:
    tl.run(600.0)
    m = pod.chip_metrics()
    assert (m["neuroncore_utilization"] == 0).all()
    assert np.allclose(m["power_w"], 100.0)
    # Idle steady state: 35 C + 100 W * 0.09 C/W = 44 C.
    assert abs(float(m["temperature_c"].mean()) - 44.0) < 0.5
    assert not m["throttle"].any()
    assert (m["firmware_version"] == "2.21.0").all()


def test_metrics_are_read_only_snapshots(pod: SimFabric, tl: Timeline) -> None:
    tl.run(10.0)
    m, lm = pod.chip_metrics(), pod.link_metrics()
    with pytest.raises(ValueError, match="read-only"):
        m["temperature_c"][:] = -1
    with pytest.raises(ValueError, match="read-only"):
        lm["errors"][0] = 5
    kept = {k: v.copy() for k, v in m.items()}
    pod.inject_fault("hbm-corrected-burst", chip=0)
    pod.inject_fault("link-down", link=0)
    pod.launch(WorkerGroupSpec("job-s", (0, 1), "debug", 10**6))
    tl.run(20.0)
    # A snapshot taken earlier keeps its values (copy-on-write), the new one moves on.
    for k, v in kept.items():
        assert np.array_equal(m[k], v), k
    m2 = pod.chip_metrics()
    assert m2["mem_ecc_corrected"][0] > 0 and m2["link_errors"][0] > 0
    assert m2["neuroncore_utilization"][0].mean() > 0
    assert pod.link_metrics()["state"][0] == 2 and lm["state"][0] == 0


def test_chip_state_machine_enforced(pod: SimFabric, events) -> None:
    pod.set_chip_state(3, ChipState.FAILED, "test")
    with pytest.raises(InvalidTransitionError, match="failed to healthy"):
        pod.set_chip_state(3, ChipState.HEALTHY, "too soon")
    pod.set_chip_state(3, ChipState.ISOLATED, "isolate")
    pod.set_chip_state(3, "healthy", "replaced")
    assert [e.kind for e in events] == ["chip-failed", "chip-isolated", "chip-healthy"]
    assert events[0].detail["prev"] == "healthy"
    with pytest.raises(InvalidTransitionError):
        pod.set_chip_state(3, ChipState.HEALTHY, "already healthy")


def test_link_state_machine_enforced(pod: SimFabric) -> None:
    pod.set_link_state(0, LinkState.DOWN, "t")
    with pytest.raises(InvalidTransitionError):
        pod.set_link_state(0, LinkState.DOWN, "again")
    pod.repair_link(0)
    assert pod.link_state(0) == LinkState.UP


def test_spares(tl: Timeline) -> None:
    assert SimFabric("trn2-ultraserver", tl, spares=4).spares == (60, 61, 62, 63)
    assert SimFabric("trn2-ultraserver", Timeline(0), spares=[5, 1]).spares == (1, 5)
    with pytest.raises(NotFoundError):
        SimFabric("trn2-ultraserver", Timeline(0), spares=[64])


def test_injection_errors(pod: SimFabric) -> None:
    with pytest.raises(UnknownNameError, match="chip-failure"):
        pod.inject_fault("meteor-strike", chip=1)
    with pytest.raises(NotFoundError, match="0-63"):
        pod.inject_fault("chip-failure", chip=64)
    with pytest.raises(NotFoundError, match="0-191"):
        pod.inject_fault("link-down", link=192)
    with pytest.raises(InvalidInputError):
        pod.inject_fault("chip-failure", link=3)
    with pytest.raises(InvalidInputError):
        pod.inject_fault("chip-failure", chip="3")  # type: ignore[arg-type]
    pod.inject_fault("chip-failure", chip=1)
    with pytest.raises(ConflictError, match="chip 1 is failed"):
        pod.inject_fault("sram-uncorrectable", chip=1)
    pod.inject_fault("link-down", link=7)
    with pytest.raises(ConflictError):
        pod.inject_fault("link-down", link=7)
    with pytest.raises(NotFoundError):
        pod.chip_info(-1)


def test_injected_faults_update_counters_and_log(pod: SimFabric, tl: Timeline, events) -> None:
    pod.inject_fault("hbm-uncorrectable", chip=2)
    pod.inject_fault("sram-uncorrectable", chip=3)
    pod.inject_fault("hbm-corrected-burst", chip=4)
    pod.inject_fault("firmware-fault", chip=5)
    m = pod.chip_metrics()
    assert m["mem_ecc_uncorrected"][2] == 1 and m["sram_ecc_uncorrected"][3] == 1
    assert m["mem_ecc_corrected"][4] >= 20 and m["execution_errors"][5] == 1
    assert pod.chip_state(4) == ChipState.HEALTHY
    failed = [e for e in events if e.kind == "chip-failed"]
    assert [(e.chip, e.detail["action"]) for e in failed] == [(2, "replace"), (3, "replace"), (5, "reset")]
    assert [r["fault"] for r in tl.log.filter("fault")] == [
        "hbm-uncorrectable", "sram-uncorrectable", "hbm-corrected-burst", "firmware-fault"]
    delivered = [e for e in events if e.kind == "fault"]
    assert [e.detail["fault"] for e in delivered] == [
        "hbm-uncorrectable", "sram-uncorrectable", "hbm-corrected-burst", "firmware-fault"]
    assert delivered[0].detail["action"] == "replace" and "precursor" not in delivered[0].detail
    info = pod.chip_info(2)
    assert info["state"] == "failed" and info["reason"] == "hbm-uncorrectable"


def test_random_chip_and_link_when_not_given(pod: SimFabric) -> None:
    r = pod.inject_fault("chip-failure")
    assert pod.chip_state(r["chip"]) == ChipState.FAILED
    r = pod.inject_fault("link-down", chip=10)
    assert r["link"] in set(pod.links.of_chip(10).tolist())


def test_link_flap_goes_down_up_and_ends_degraded(pod: SimFabric, tl: Timeline, events) -> None:
    pod.inject_fault("link-flap", link=5)
    tl.run(300.0)
    kinds = [e.kind for e in events if e.link == 5]
    assert kinds.count("link-down") >= 3
    assert kinds[-1] == "link-degraded"
    assert pod.link_metrics()["errors"][5] > 0
    assert pod.link_metrics()["bandwidth_bytes_per_s"][5] == pytest.approx(128e9)


def test_auto_repair_brings_chip_back(tl: Timeline) -> None:
    fab = SimFabric("trn2-node", tl, auto_repair_s=600.0)
    fab.inject_fault("chip-failure", chip=0)
    assert fab.chip_state(0) == ChipState.ISOLATED
    tl.run(601.0)
    assert fab.chip_state(0) == ChipState.HEALTHY
    assert fab.chip_hours_lost() == pytest.approx(600.0 / 3600.0)


def test_firmware_update(pod: SimFabric, tl: Timeline) -> None:
    pod.update_firmware(7, "2.22.0", duration_s=30.0)
    assert pod.chip_state(7) == ChipState.UPDATING
    tl.run(31.0)
    assert pod.chip_state(7) == ChipState.HEALTHY
    assert pod.chip_metrics()["firmware_version"][7] == "2.22.0"


def test_summary(pod: SimFabric, tl: Timeline) -> None:
    pod.launch(WorkerGroupSpec("job-s", tuple(range(8)), "debug", 10**6))
    pod.inject_fault("link-down", link=100)
    pod.inject_fault("chip-failure", chip=40)
    tl.run(120.0)
    s = pod.summary()
    assert s["chips"] == 64 and s["links"] == 192 and s["spares"] == [60, 61, 62, 63]
    assert s["chip_states"]["failed"] == 1 and s["link_states"]["down"] == 1
    assert s["jobs"]["running"] == 1 and s["faults_by_kind"] == {"link-down": 1, "chip-failure": 1}
    assert s["temperature_c"]["max"] > s["temperature_c"]["min"]
    assert 0 < s["utilization_pct_mean"] < 100
    assert json.loads(json.dumps(s)) == s
