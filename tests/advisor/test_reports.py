"""Health reports: what happened in the period, read from the plane's records; charts;
the archive with retention."""

from __future__ import annotations

import json

import pytest

from podfleet.advisor import reports
from podfleet.errors import InvalidInputError, NotFoundError
from tests.advisor.conftest import Pod


def make_report(pod: Pod, period: str = "1h") -> dict:
    p = pod.parts
    return reports.build(pod.plane, p.health.list_alerts("pod"), p.recovery.recoveries("pod"), "pod",
                         reports.parse_period(period))


def test_a_report_counts_outages_faults_recoveries_and_jobs(pod: Pod) -> None:
    chips = pod.submit(32)
    pod.run(300)
    pod.plane.inject_fault("pod", "chip-failure", chip=chips[2])
    pod.plane.inject_fault("pod", "link-flap", link="40-41")
    pod.run(600)
    r = make_report(pod)
    av = r["availability"]
    assert av["chips_with_outages"] == [chips[2]]
    # one chip of 64 down for ~600 s of the 3600 s period
    assert av["chip_availability"] == pytest.approx(1 - 600 / (64 * 3600), abs=2e-4)
    assert r["faults"]["by_kind"] == {"chip-failure": 1, "link-flap": 1}
    assert r["recoveries"]["by_kind"].get("chip-failure") == 1 and r["recoveries"]["p50_s"] > 0
    assert r["alerts"]["total"] >= 1
    assert {f["kind"] for f in r["findings"]} == {"chip-failure", "link-flap"}
    (job,) = r["jobs"]
    assert job["state"] == "RUNNING" and 0 < job["ettr"] <= 1
    page = reports.to_html(r)
    assert page.count("<svg") == 2 and "runbook-chip-failure" in page


def test_a_quiet_pod_reports_full_availability(pod: Pod) -> None:
    r = make_report(pod, "24h")
    assert r["availability"]["chip_availability"] == 1.0 and r["faults"]["total"] == 0 and r["findings"] == []
    with pytest.raises(InvalidInputError, match="24h"):
        reports.parse_period("2w")


def test_the_archive_keeps_a_real_report_and_prunes_old_ones(pod: Pod) -> None:
    arch = reports.StoredReports(pod.plane.store, retention_days=1)
    r = make_report(pod)
    arch.save(r, now=pod.plane.now())
    (listed,) = arch.list(r["cluster_id"])
    assert listed["id"] == r["id"]
    assert json.loads(arch.get(r["cluster_id"], r["id"]))["id"] == r["id"]
    assert arch.get(r["cluster_id"], r["id"], "html").startswith("<!doctype html>")
    with pytest.raises(NotFoundError):
        arch.get(r["cluster_id"], "rp-0000000000")
    with pytest.raises(InvalidInputError):
        arch.get(r["cluster_id"], r["id"], "pdf")
    assert arch.prune(r["cluster_id"], now=pod.plane.now() + 2 * 86400) == 1
    assert arch.list(r["cluster_id"]) == []


def test_reports_are_generated_on_the_timeline_for_every_active_cluster(pod: Pod) -> None:
    arch = reports.StoredReports(pod.plane.store)
    reports.schedule_daily(pod.plane, pod.parts.health, pod.parts.recovery, arch, interval_s=600.0)
    pod.run(601)
    cid = pod.plane.resolve("pod").id
    assert len(arch.list(cid)) == 1
    assert len(reports.generate_all(pod.plane, pod.parts.health, pod.parts.recovery, arch)) == 1
