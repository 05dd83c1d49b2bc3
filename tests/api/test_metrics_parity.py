"""/metrics across fabrics: a twin pod and a cluster of local worker slots export per-chip
series under the same names and labels (``cluster`` is the name everywhere, so chip,
job and scheduler series join), ``podfleet_build_info`` is there, and the series of an
ended job or a deleted cluster go away. The exposition parses with prometheus_client's
parser (the one ``promtool check metrics`` agrees with on these names)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import podfleet
from podfleet import compose
from podfleet.api.chip_metrics import CHIP_LABELS, EXPORTED
from podfleet.api.metrics import ApiMetrics
from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.health.metrics import HealthCollector
from podfleet.store.memory import MemoryStore

CHIP_SERIES = ("podfleet_chip_up", "podfleet_chip_utilization_ratio", "podfleet_chip_memory_used_bytes",
               "podfleet_chip_memory_capacity_bytes")


def scrape(plane: ControlPlane, parts: compose.Parts) -> dict[str, list]:
    metrics = ApiMetrics(plane)
    metrics.registry.register(HealthCollector(plane, parts.health, parts.recovery))
    text = generate_latest(metrics.registry).decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


@pytest.fixture
def parts(tmp_path) -> Iterator[compose.Parts]:
    built = compose.build(MemoryStore(), Timeline(seed=2), workdir=str(tmp_path))
    plane = built.plane
    plane.create_cluster({"name": "pod", "type": "trn2-ultraserver"}, actor="t")
    plane.create_cluster({"name": "loc", "fabric": "local", "chips": 2}, actor="t")
    plane.tl.run(plane.tl.now + 30)
    try:
        yield built
    finally:
        for name in ("pod", "loc"):
            if name in plane.names:
                plane.delete_cluster(name, actor="t")


def _by_cluster(samples: list, cluster: str) -> list:
    return [s for s in samples if s.labels.get("cluster") == cluster]


def test_chip_series_have_the_same_names_and_labels_on_every_fabric(parts: compose.Parts) -> None:
    fams = scrape(parts.plane, parts)
    [info] = fams["podfleet_build_info"]
    assert info.value == 1 and info.labels["version"] == podfleet.__version__
    ids = {rt.rec.name: rt.id for rt in parts.plane.clusters.values()}
    for name in CHIP_SERIES:
        for cluster, n in (("pod", 64), ("loc", 2)):
            got = _by_cluster(fams[name], cluster)
            assert len(got) == n, (name, cluster, len(got))
            assert all(sorted(s.labels) == sorted(CHIP_LABELS) for s in got)
            assert {s.labels["cluster_id"] for s in got} == {ids[cluster]}
    loc = _by_cluster(fams["podfleet_chip_memory_capacity_bytes"], "loc")
    pod = _by_cluster(fams["podfleet_chip_memory_capacity_bytes"], "pod")
    assert all(s.value > 0 for s in loc + pod)
    assert {s.labels["chip_type"] for s in pod} == {"trn2"} and all(s.labels["host"] for s in loc)
    assert all(0.0 <= s.value <= 1.0 for s in fams["podfleet_chip_utilization_ratio"])
    # Temperature only where the device reports one (the twin), never a made-up 0.
    assert _by_cluster(fams["podfleet_chip_temperature_celsius"], "pod")
    assert not _by_cluster(fams["podfleet_chip_temperature_celsius"], "loc")
    # The cluster label joins chip series with the scheduler's.
    sched = {s.labels["cluster"] for s in fams["podfleet_free_chips"]}
    assert sched == {"pod", "loc"} == {s.labels["cluster"] for s in fams["podfleet_chip_up"]}
    assert {s.labels["cluster"] for s in fams["podfleet_chip_health"]} <= sched
    assert set(fams) >= EXPORTED
    # Torus coordinates for the dashboard's heatmap: the 4x4x4 pod's 64 distinct points.
    info = _by_cluster(fams["podfleet_chip_info"], "pod")
    assert len({(s.labels["x"], s.labels["y"], s.labels["z"]) for s in info}) == 64
    assert {s.labels["z"] for s in info} == {"0", "1", "2", "3"}


def test_series_of_ended_jobs_and_deleted_clusters_go_away(parts: compose.Parts) -> None:
    plane = parts.plane
    job = plane.jobs.submit("pod", {"model": "llama3-8b", "chips": 16, "steps": 100_000}, actor="t")
    plane.tl.run(plane.tl.now + 30)
    fams = scrape(plane, parts)
    steps = [s for s in fams["podfleet_job_step"] if s.labels["job_id"] == job["id"]]
    assert [s.labels["cluster"] for s in steps] == ["pod"]
    assert [s.value for s in fams["podfleet_job_recovering"] if s.labels["job_id"] == job["id"]] == [0.0]
    held = [s for s in fams["podfleet_chip_up"] if s.labels["job_id"] == job["id"]]
    assert len(held) == 16
    plane.jobs.stop(job["id"], actor="t")
    plane.delete_cluster("loc", actor="t")
    plane.tl.run(plane.tl.now + 5)
    fams = scrape(plane, parts)
    assert not [s for f in fams.values() for s in f if s.labels.get("job_id") == job["id"]]
    assert not [s for f in fams.values() for s in f if s.labels.get("cluster") == "loc"]
    assert len(_by_cluster(fams["podfleet_chip_up"], "pod")) == 64


def test_a_neuron_cluster_exports_what_its_tools_measure_under_the_same_names(tmp_path) -> None:
    """neuron-ls and neuron-monitor replayed (tests/fabric/neuron): device memory used and
    capacity and NeuronCore utilization, labelled like every chip; no temperature, which
    neuron-monitor does not report."""
    import shlex
    import sys
    import time
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "fabric" / "neuron"
    ls = shlex.join([sys.executable, str(data / "replay_ls.py"), str(data / "data" / "neuron-ls-trn2-48xlarge.json")])
    mon = shlex.join([sys.executable, str(data / "replay.py"),
                      str(data / "data" / "neuron-monitor-trn2-48xlarge.jsonl")])
    from podfleet.control.fabricaccess import FabricAccess

    built = compose.build(MemoryStore(), Timeline(seed=2), workdir=str(tmp_path),
                          fabric_access=FabricAccess(neuron_commands=(ls, mon)))  # the replayed tools
    plane = built.plane
    plane.create_cluster({"name": "trn", "fabric": "neuron", "neuron_ls": ls, "neuron_monitor": mon}, actor="t")
    try:
        deadline = time.monotonic() + 60
        while True:
            plane.tl.run(plane.tl.now + 1)
            fams = scrape(plane, built)
            used = _by_cluster(fams["podfleet_chip_memory_used_bytes"], "trn")
            if used or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(used) == 16 and all(sorted(s.labels) == sorted(CHIP_LABELS) for s in used)
        cap = _by_cluster(fams["podfleet_chip_memory_capacity_bytes"], "trn")
        assert len(cap) == 16 and all(s.value > 0 for s in cap)
        assert len(_by_cluster(fams["podfleet_chip_utilization_ratio"], "trn")) == 16
        assert not _by_cluster(fams["podfleet_chip_temperature_celsius"], "trn")
        assert {s.labels["chip_type"] for s in used} == {"trn2"} and all(s.labels["host"] for s in used)
    finally:
        plane.delete_cluster("trn", actor="t")
