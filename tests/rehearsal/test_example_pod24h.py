"""``podfleet sim examples/pod-24h.yaml``: the shipped example shows what the product does
(issue 29): a chip failure the job recovers from, a link flap rerouted, a predicted
failure drained before it happens. Everything is read from the report, which takes it
from the recovery journals and the health monitor's alarms (a simulated day of the pod
in virtual time: about 20 s on the 2-core machine)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from podfleet.cli.main import app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pod-24h.yaml"


def test_pod_24h_shows_recovery_reroute_and_drain() -> None:
    r = CliRunner().invoke(app, ["sim", str(EXAMPLE), "--output", "json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert [c["result"] for c in rep["commands"]] == ["ok"] * len(rep["commands"])
    rec = rep["recoveries"]
    seq = rec["sequence"]

    failure = [s for s in seq if s["kind"] == "chip-failure"]
    assert failure, seq
    f = failure[0]
    assert f["job"] == "job-llama3-70b" and f["state"] == "done" and f["path"] in ("replica", "checkpoint")
    assert "move-rank" in f["steps"] and f["steps"][-1] == "resume"
    assert f["duration_s"] is not None and 0 < f["duration_s"] < 60

    links = [s for s in seq if s["kind"] == "link"]
    assert rec["link_reroutes"] == len(links) >= 1
    assert all(s["path"] == "reroute" and s["state"] == "done" and s["job"] is None for s in links)
    assert links[0]["steps"][0] == "reroute" and links[0]["duration_s"] is not None

    # The chip with the precursor (ground truth, from the scenario) is the one predicted,
    # drained with its rank moved live, and it never fails: the failure was averted.
    sc = yaml.safe_load(EXAMPLE.read_text())
    marked = {f["chip"] for f in sc["faults"] if f.get("precursor")}
    drained = [d for d in rep["drains"] if d["drained"]]
    assert drained and {d["chip"] for d in drained} <= marked, rep["drains"]
    d = drained[0]
    assert d["job"] == "job-llama3-70b" and d["rank_to_chip"] is not None and d["rank_to_chip"] != d["chip"]
    assert d["drained_t"] >= d["t"] and d["drain_s"] is not None
    assert d["failed_after"] is False and d["averted"] is True
    assert any(s["kind"] == "drain" and s["target"] == f"chip:{d['chip']}" and s["state"] == "done" for s in seq)
    assert rep["predictions"]["averted"] >= 1
    assert rep["chip_hours_lost_by_cause"].get("predicted-drain", 0) > 0

    job = next(j for j in rep["jobs"] if j["job_id"] == "job-llama3-70b")
    assert job["state"] == "RUNNING" and job["recoveries"] >= 2 and 0.9 < job["ettr"] <= 1
