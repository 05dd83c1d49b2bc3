"""The Grafana dashboard, Prometheus scrape config and alerting rules in monitoring/ stay
true: every metric they read is one /metrics exports (counters read as ``_total``), every
label a rule's message names is on the series it alerts on, and promtool accepts them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from podfleet import compose
from podfleet.api.leadership import LeaderCollector, Sole
from podfleet.api.metrics import ApiMetrics
from podfleet.api.usage_metrics import UsageCollector
from podfleet.engine.timeline import Timeline
from podfleet.health.metrics import HealthCollector
from podfleet.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[2] / "monitoring"
DASHBOARD = ROOT / "grafana" / "podfleet.json"
RULES = ROOT / "prometheus" / "alerts.yml"
CONFIG = ROOT / "prometheus" / "prometheus.yml"
NAME = re.compile(r"\bpodfleet_[a-z0-9_]+\b")
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Family name -> (type, label names seen), scraped from a twin pod running a job and a
    cluster of local worker slots."""
    parts = compose.build(MemoryStore(), Timeline(seed=4), workdir=str(tmp_path_factory.mktemp("mon")))
    plane = parts.plane
    plane.create_cluster({"name": "pod", "type": "trn2-ultraserver"}, actor="t")
    plane.create_cluster({"name": "loc", "fabric": "local", "chips": 2}, actor="t")
    plane.tl.run(plane.tl.now + 30)
    plane.jobs.submit("pod", {"model": "llama3-8b", "chips": 16, "steps": 100_000}, actor="t")
    plane.tl.run(plane.tl.now + 60)
    try:
        metrics = ApiMetrics(plane)
        metrics.registry.register(HealthCollector(plane, parts.health, parts.recovery))
        metrics.registry.register(UsageCollector(plane))
        metrics.registry.register(LeaderCollector(Sole("t")))
        fams = text_string_to_metric_families(generate_latest(metrics.registry).decode())
        yield {f.name: (f.type, {k for s in f.samples for k in s.labels}) for f in fams}
    finally:
        for name in ("pod", "loc"):
            plane.delete_cluster(name, actor="t")


def _exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "query", "definition") and isinstance(v, str):
                yield v
            else:
                yield from _exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _exprs(v)


def _rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def _family(name: str, exported: dict[str, Any]) -> str:
    """The exported family a name in a query reads; counters only as ``_total``."""
    if name in exported:
        assert exported[name][0] != "counter", f"counter {name} must be read as {name}_total"
        return name
    for suffix in SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and base in exported:
            kind = exported[base][0]
            assert (suffix == "_total") == (kind == "counter") or kind in ("histogram", "summary"), name
            return base
    raise AssertionError(f"{name} is not exported by /metrics")


def test_every_metric_the_dashboard_and_rules_read_is_exported(exported: dict[str, Any]) -> None:
    dash = json.loads(DASHBOARD.read_text())
    queries = list(_exprs(dash["panels"])) + list(_exprs(dash["templating"])) + [r["expr"] for r in _rules()]
    names = {n for q in queries for n in NAME.findall(q)}
    assert len(names) >= 20  # the dashboard reads chips, links, jobs, scheduler and alerts
    for n in sorted(names):
        _family(n, exported)


def test_the_dashboard_has_its_sections_and_a_coordinate_heatmap() -> None:
    dash = json.loads(DASHBOARD.read_text())
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    assert {p["title"] for p in panels if p["type"] == "row"} == {"Cluster overview", "Chips", "Links", "Jobs"}
    heatmaps = [p for p in panels if p["type"] == "heatmap"]
    assert heatmaps and all("group_left (coords, x, y, z) podfleet_chip_info" in t["expr"]
                            for p in heatmaps for t in p["targets"])
    titles = " ".join(p["title"] for p in panels)
    for want in ("Link bandwidth", "Job throughput", "Recoveries", "Chips up"):
        assert want in titles
    for p in panels:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]


def test_alert_rules_cover_the_faults_and_name_only_labels_their_series_have(exported: dict[str, Any]) -> None:
    rules = {r["alert"]: r for r in _rules()}
    assert set(rules) == {"PodfleetChipDown", "PodfleetEccUncorrectable", "PodfleetLinkDown",
                          "PodfleetJobStuckRecovering", "PodfleetThermalThrottling"}
    for name, r in rules.items():
        assert r["labels"]["severity"] in ("critical", "warning") and r["annotations"]["summary"], name
        labels = set().union(*(exported[_family(n, exported)][1] for n in NAME.findall(r["expr"])))
        used = set(re.findall(r"\$labels\.([a-z_]+)", json.dumps(r["annotations"])))
        assert used and used <= labels, (name, used - labels)


def test_no_series_carries_a_target_label_prometheus_sets(exported: dict[str, Any]) -> None:
    """With ``honor_labels: true`` a series' own ``job`` / ``instance`` (or a label the
    config attaches to the target) would replace Prometheus' and ``{job="podfleet"}`` would
    match only ``up``: the job holding a chip is ``job_id``."""
    [scrape] = yaml.safe_load(CONFIG.read_text())["scrape_configs"]
    reserved = {"job", "instance"} | {k for sc in scrape["static_configs"] for k in sc.get("labels", {})}
    clashes = {name: sorted(labels & reserved) for name, (_kind, labels) in exported.items() if labels & reserved}
    assert not clashes, clashes
    assert "job_id" in exported["podfleet_job_step"][1] and "job_id" in exported["podfleet_chip_up"][1]


def test_every_label_a_dashboard_legend_names_is_on_its_series(exported: dict[str, Any]) -> None:
    dash = json.loads(DASHBOARD.read_text())
    targets = [t for p in dash["panels"] for t in p.get("targets", []) if t.get("legendFormat")]
    assert any("{{job_id}}" in t["legendFormat"] for t in targets)
    for t in targets:
        used = set(re.findall(r"\{\{\s*([a-z_]+)\s*\}\}", t["legendFormat"]))
        fams = [exported[_family(n, exported)][1] for n in NAME.findall(t["expr"])]
        if not all(fams):
            continue  # a family with no sample in this scrape (no alert fired): its labels are unseen
        labels = set().union(*fams)
        assert used <= labels, (t["expr"], used - labels)


def test_the_scrape_config_reads_the_rules_and_keeps_the_cluster_label() -> None:
    cfg = yaml.safe_load(CONFIG.read_text())
    assert cfg["rule_files"] == ["alerts.yml"] and (CONFIG.parent / "alerts.yml").exists()
    [job] = cfg["scrape_configs"]
    # podfleet's `cluster` clashes with no target label, so it needs no honor_labels; and
    # with it a stray `job` label would replace the scrape job's (issue 30 item 11).
    assert job["metrics_path"] == "/metrics" and job.get("honor_labels", False) is False


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool: apt-get install prometheus (.ci/run does)")
def test_promtool_accepts_the_rules_and_the_config() -> None:
    for args in (["check", "rules", str(RULES)], ["check", "config", str(CONFIG)]):
        out = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
