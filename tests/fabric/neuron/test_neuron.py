"""neuron-monitor / neuron-ls parsing against sample documents written from the documented schema."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.fabric.base import LinkState
from podfleet.fabric.neuron import (
    CHIP_METRICS,
    LINK_METRICS,
    NeuronMonitorReader,
    NeuronTelemetry,
    build_topology,
    chip_metrics,
    chip_type_of,
    host_metrics,
    parse_monitor_report,
    parse_neuron_ls,
)
from podfleet.fabric.sim.telemetry import METRIC_NAMES as SIM_METRIC_NAMES
from podfleet.hardware.catalog import get_topology

DATA = Path(__file__).parent / "data"


def load(name: str):
    return json.loads((DATA / name).read_text())


@pytest.fixture(scope="module")
def inv48():
    return parse_neuron_ls((DATA / "neuron-ls-trn2-48xlarge.json").read_text())


@pytest.fixture(scope="module")
def full():
    return load("neuron-monitor-trn2-full.json")


# --- neuron-ls ------------------------------------------------------------------------
def test_neuron_ls_fields(inv48):
    assert inv48.n_devices == 16
    assert inv48.instance_type == "trn2.48xlarge"
    d0 = inv48.devices[0]
    assert d0.connected_to == (12, 3, 4, 1)
    assert d0.bdf == "cc:00.0"
    assert d0.nc_count == 4 and d0.logical_core_config == 2
    assert d0.memory_bytes == 103079215104
    assert d0.core_ids == (0, 1, 2, 3)
    assert d0.processes[0].pid == 113985
    assert inv48.core_to_device()[13] == 3


def test_topology_is_trn2_node_torus(inv48):
    w = build_topology(inv48)
    assert w.topology is get_topology("trn2-node")
    assert w.missing == frozenset()
    assert w.order_ok
    assert w.topology.neighbours(0) == [12, 3, 4, 1]
    assert w.topology.neighbours(13) == [9, 12, 1, 14]


def test_minimal_neuron_ls_maps_cores_densely():
    inv = parse_neuron_ls(load("neuron-ls-trn2-minimal.json"))
    assert inv.devices[5].core_ids == ()
    assert inv.core_to_device()[21] == 5  # 4 logical cores per device at LNC=2
    assert build_topology(inv).topology.name == "trn2-node"


def test_single_device_has_no_links():
    inv = parse_neuron_ls(load("neuron-ls-trn2-3xlarge.json"))
    w = build_topology(inv)
    assert w.topology.n_chips == 1 and w.topology.links == ()


def test_missing_link_reported_down(inv48):
    doc = load("neuron-ls-trn2-48xlarge.json")
    doc[0]["connected_to"] = [12, 3, 4]  # 0 - 1 absent at both ends
    doc[1]["connected_to"] = [13, 5, 2]
    tele = NeuronTelemetry(parse_neuron_ls(doc))
    assert tele.wiring.missing == {(0, 1)}
    states = tele.link_states()
    down = [lk for lk, s in zip(tele.topology.links, states, strict=True) if s is LinkState.DOWN]
    assert [(lk.src, lk.dst) for lk in down] == [(0, 1)]
    events = tele.initial_events()
    assert [e.kind for e in events] == ["link-down"]


def test_wiring_that_fits_no_grid_is_refused():
    doc = load("neuron-ls-trn2-48xlarge.json")
    doc[0]["connected_to"] = [12, 3, 4, 1, 10]  # a diagonal no torus has
    doc[10]["connected_to"] = [*doc[10]["connected_to"], 0]
    with pytest.raises(InvalidInputError, match="fits no ring or 2-D torus"):
        build_topology(parse_neuron_ls(doc))


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d[3].__setitem__("connected_to", "0,1"), r"\[3\]\.connected_to must be a list"),
        (lambda d: d[3].__setitem__("connected_to", [99]), "connected_to"),
        (lambda d: d[3].__setitem__("neuron_device", 2), "listed twice"),
        (lambda d: d[3].pop("neuron_device"), r"\[3\]\.neuron_device must be a non-negative integer"),
        (lambda d: d[2].__setitem__("memory_size", "96 GB"), r"\[2\]\.memory_size must be a number"),
        (lambda d: d[2]["neuron_processes"].append(7), r"neuron_processes\[0\] must be an object"),
    ],
)
def test_malformed_neuron_ls(mutate, match):
    doc = load("neuron-ls-trn2-48xlarge.json")
    mutate(doc)
    with pytest.raises(InvalidInputError, match=match):
        parse_neuron_ls(doc)


def test_neuron_ls_not_json():
    with pytest.raises(InvalidInputError, match="not JSON"):
        parse_neuron_ls("+--------+ NEURON DEVICE")
    with pytest.raises(InvalidInputError, match="a JSON list"):
        parse_neuron_ls('{"neuron_device": 0}')


# --- neuron-monitor -----------------------------------------------------------------------
def test_full_report_parses(full):
    r = parse_monitor_report(json.dumps(full))
    assert len(r.runtimes) == 1
    rt = r.runtimes[0]
    assert rt.pid == 113985 and rt.tag == "podfleet-job-1"
    assert [c.core for c in rt.cores] == list(range(8))
    assert rt.cores[0].utilization_pct == pytest.approx(80.0)
    assert rt.cores[0].physical_pct == (79.0, 81.0)
    assert rt.errors["numerical"] == 1
    assert rt.device_latency_s["p99"] == pytest.approx(0.01000012)
    assert rt.core_memory_bytes[0] == 193986816 + 176285056 + 20971520
    assert rt.vcpu_user_pct == pytest.approx(42.01)
    assert r.hardware.device_type == "trainium2" and r.hardware.cores_per_device == 4
    assert r.ecc is not None and r.ecc[1].mem_corrected == 3
    assert r.instance["instance_type"] == "trn2.48xlarge"
    assert host_metrics(r)["host_memory_used_bytes"] == 16042344448
    assert chip_type_of(r.hardware.device_type) == "trn2"


def test_chip_metrics_from_report(full, inv48):
    m = chip_metrics(parse_monitor_report(full), inv48)
    assert set(m) == {d.name for d in CHIP_METRICS}
    assert set(SIM_METRIC_NAMES) <= set(m)  # every metric the twin reports, by the same name
    util = m["neuroncore_utilization"]
    assert util.shape == (16, 8)  # 4 logical cores x LNC 2 = the twin's 8 physical cores
    # logical core 0 has v3d physical values; core 2 has none, so its value is repeated
    assert util[0].tolist() == [79.0, 81.0, 59.0, 61.0, 40.0, 40.0, 20.0, 20.0]
    assert np.all(util[1] == 100.0)
    assert np.all(util[2:] == 0)  # idle chips: 0, not NaN
    assert m["achieved_tflops"][0] == pytest.approx(280.0)
    assert m["hbm_used_bytes"][0] == 2 * (193986816 + 176285056 + 20971520)
    assert m["hbm_used_bytes"][1] == 1e9
    assert m["hbm_total_bytes"][1] == 103079215104
    assert m["mem_ecc_corrected"][1] == 3 and m["sram_ecc_corrected"][1] == 1
    assert m["mem_ecc_corrected"][5] == 0  # unlisted devices 0 when the group ran
    # runtime-level errors land on the chips whose cores the runtime uses
    assert m["execution_errors_numerical"].tolist()[:3] == [1, 1, 0]
    assert m["execution_errors"].tolist()[:3] == [1, 1, 0]
    assert m["executions_completed"][1] == 123
    assert m["device_latency_p50_s"][0] == pytest.approx(0.01000008)
    assert np.isnan(m["device_latency_p50_s"][7])
    assert np.all(np.isnan(m["temperature_c"]))  # not exposed by Neuron tools
    assert not m["throttle"].any()
    assert m["firmware_version"][0] == "2.22.14.0" and m["firmware_version"][5] == "unknown"


def test_chip_metrics_without_inventory_uses_hardware_info(full):
    m = chip_metrics(parse_monitor_report(full))
    assert m["neuroncore_utilization"].shape == (16, 8)
    assert np.all(m["neuroncore_utilization"][1] == 100.0)
    assert m["hbm_total_bytes"][15] == 103079215104


def test_partial_report(inv48):
    r = parse_monitor_report({"instance_info": {"instance_type": "trn2.48xlarge"}})
    m = chip_metrics(r, inv48)
    assert np.all(m["neuroncore_utilization"] == 0)
    assert np.all(np.isnan(m["mem_ecc_uncorrected"]))  # hw counters not in this report
    assert np.all(np.isnan(m["hbm_used_bytes"]))


def test_link_metrics_match_the_twin_names(inv48):
    tele = NeuronTelemetry(inv48)
    lm = tele.link_metrics()
    assert set(lm) == {d.name for d in LINK_METRICS}
    assert len(lm["src"]) == len(tele.topology.links) == 32
    assert np.all(lm["state"] == 0) and np.all(lm["bandwidth_bytes_per_s"] == 256e9)


def test_group_errors_and_unknown_keys_are_kept(full):
    doc = copy.deepcopy(full)
    doc["neuron_runtime_data"][0]["report"]["memory_used"]["error"] = "runtime unreachable"
    doc["system_data"]["neuron_hw_counters"]["error"] = "driver not loaded"
    doc["neuron_future_group"] = {"x": 1}
    doc["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"]["new_field"] = 5
    r = parse_monitor_report(doc)
    assert r.runtimes[0].group_errors == {"memory_used": "runtime unreachable"}
    assert r.group_errors == {"neuron_hw_counters": "driver not loaded"}
    assert r.unknown_keys == ("neuron_future_group",)


def test_null_latency_and_numeric_alias(full):
    doc = copy.deepcopy(full)
    es = doc["neuron_runtime_data"][0]["report"]["execution_stats"]
    es["latency_stats"] = {"total_latency": None, "device_latency": None}
    es["error_summary"] = {"numeric": 4}
    rt = parse_monitor_report(doc).runtimes[0]
    assert rt.device_latency_s == {} and rt.errors == {"numerical": 4}


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.__setitem__("neuron_runtime_data", {}), "neuron_runtime_data must be a list"),
        (lambda d: d["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]["0"].__setitem__(
            "neuroncore_utilization", "80%"),
         r"neuron_runtime_data\[0\]\.report\.neuroncore_counters\.neuroncores_in_use\.0\.neuroncore_utilization must be a number"),
        (lambda d: d["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"].__setitem__("nc0", {}),
         "keyed by non-negative integers"),
        (lambda d: d["system_data"]["neuron_hw_counters"]["neuron_devices"][0].__setitem__("mem_ecc_corrected", True),
         r"neuron_devices\[0\]\.mem_ecc_corrected must be a number"),
        (lambda d: d["system_data"]["neuron_hw_counters"]["neuron_devices"][1].pop("neuron_device_index"),
         r"neuron_devices\[1\]\.neuron_device_index"),
        (lambda d: d.__setitem__("neuron_hardware_info", []), "neuron_hardware_info must be an object"),
    ],
)
def test_malformed_report_names_the_path(full, mutate, path):
    doc = copy.deepcopy(full)
    mutate(doc)
    with pytest.raises(InvalidInputError, match=path):
        parse_monitor_report(doc)


def test_report_not_an_object():
    with pytest.raises(InvalidInputError, match="not JSON"):
        parse_monitor_report("{")
    with pytest.raises(InvalidInputError, match="must be a JSON object"):
        parse_monitor_report("[1, 2]")


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
        st.sampled_from(["neuron_runtime_data", "system_data", "report", "neuroncore_counters",
                         "neuroncores_in_use", "0", "neuron_hw_counters", "neuron_devices",
                         "neuroncore_utilization", "memory_used", "neuron_hardware_info", "x"]),
        kids, max_size=4),
    max_leaves=12,
))
def test_arbitrary_json_never_crashes(doc):
    try:
        r = parse_monitor_report(doc)
    except InvalidInputError as exc:
        assert exc.message.startswith("malformed neuron-monitor document")
        return
    chip_metrics(r, n_chips=4)


# --- the stream -------------------------------------------------------------------------
def test_reader_stream_skips_bad_documents(inv48):
    with open(DATA / "neuron-monitor-trn2-stream.jsonl") as f:
        reader = NeuronMonitorReader(f)
        reports = list(reader)
    assert len(reports) == 3
    assert reader.skipped == 3
    assert any("not JSON" in e for e in reader.errors)
    assert any("neuron_runtime_data must be a list" in e for e in reader.errors)
    assert reports[2].runtimes == () and reports[2].ecc is None
    assert reader.latest is reports[2]


def test_reader_bytes_and_pretty_printed():
    text = (DATA / "neuron-monitor-trn2-full.json").read_bytes()  # multi-line document
    reader = NeuronMonitorReader(io.BytesIO(text + b"\n" + text))
    assert len(list(reader)) == 2 and reader.skipped == 0


def test_reader_strict_raises():
    reader = NeuronMonitorReader(io.StringIO("garbage\n"), strict=True)
    with pytest.raises(InvalidInputError, match="not JSON"):
        list(reader)


def test_reader_truncated_at_end():
    reader = NeuronMonitorReader(io.StringIO('{"system_data": {\n'))
    assert list(reader) == [] and "ended inside a document" in reader.errors[0]


def test_spawn_without_neuron_monitor():
    with pytest.raises(NotFoundError, match="not found on PATH"):
        NeuronMonitorReader.spawn(executable="neuron-monitor-not-installed")


def test_spawn_reads_a_live_process(tmp_path):
    # A stand-in executable that prints the sample stream, as neuron-monitor would.
    fake = tmp_path / "fake-neuron-monitor"
    fake.write_text(f"#!/bin/sh\ncat {DATA / 'neuron-monitor-trn2-stream.jsonl'}\n")
    fake.chmod(0o755)
    with NeuronMonitorReader.spawn(executable=str(fake), period_s=0.5) as reader:
        assert len(list(reader)) == 3


# --- telemetry events ------------------------------------------------------------------------
def test_telemetry_events_from_stream(inv48):
    tele = NeuronTelemetry(inv48)
    seen = []
    tele.subscribe(seen.append)
    with open(DATA / "neuron-monitor-trn2-stream.jsonl") as f:
        reports = list(NeuronMonitorReader(f))
    assert tele.update(reports[0], t=1.0) == []
    events = tele.update(reports[1], t=2.0)
    kinds = {(e.kind, e.chip, e.detail["fault"]) for e in events}
    assert ("chip-failed", 1, "sram-uncorrectable") in kinds
    assert ("chip-degraded", 0, "hbm-corrected-burst") in kinds
    assert ("chip-degraded", 0, "runtime-hardware-error") in kinds
    failed = next(e for e in events if e.kind == "chip-failed")
    assert failed.detail["action"] == "replace" and failed.t == 2.0
    assert seen == events
    # The partial report carries no ECC counters: no new events, old counters kept.
    assert tele.update(reports[2], t=3.0) == []
    again = tele.update(reports[1], t=4.0)  # same cumulative ECC counters: nothing new
    assert {e.detail["fault"] for e in again} == {"runtime-hardware-error"}
    assert tele.chip_metrics()["neuroncore_utilization"].shape == (16, 8)
    # cumulative like the twin's: 1 numerical error in each of 3 runtime periods + 2x2 hardware
    assert tele.chip_metrics()["execution_errors"][0] == 1 + 3 + 3


def test_telemetry_attach_delivers_on_timeline(inv48):
    from podfleet.engine.timeline import Timeline

    tl = Timeline(seed=0)
    tele = NeuronTelemetry(inv48)
    events = []
    tele.subscribe(events.append)
    reader = NeuronMonitorReader(io.StringIO((DATA / "neuron-monitor-trn2-stream.jsonl").read_text()))
    tele.attach(tl, reader).join(timeout=10)
    tl.run(until=1.0)
    assert reader.count == 3 and tele.report is reader.latest
    assert any(e.kind == "chip-failed" and e.chip == 1 for e in events)
