"""The console on a cluster of real worker processes (the README's `local-a`: three
slots, one spare, a `tiny` job): its cluster, job and dashboard pages render without
errors, the host switch its links meet at is drawn, and the times shown are the wall
clock's (issue 30, items 1 and 2). Served as the README's quick start serves it: the demo's
20x pace, so a clock that ran at the timeline's pace, or an alert counting the workers'
start as a stall, shows here."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.console.conftest import Served, serve, wait_active
from tests.console.test_browser import Watched, signed_in

pytestmark = [pytest.mark.browser, pytest.mark.realproc]


@pytest.fixture(scope="module")
def site() -> Iterator[Served]:
    yield from serve(speed=20.0, default_cluster="pod-0")


@pytest.fixture(scope="module")
def job(site: Served) -> str:
    with site.client() as c:
        r = c.post("/v1/clusters", json={"name": "local-a", "fabric": "local", "chips": 3, "spares": 1})
        assert r.status_code == 201, r.text
        wait_active(c, "local-a", 90)
        r = c.post("/v1/clusters/local-a/jobs", json={"model": "tiny", "chips": 2, "steps": 100000,
                                                       "checkpoint_interval": 20})
        assert r.status_code in (200, 201, 202), r.text
        job_id = str(r.json()["id"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if c.get(f"/v1/jobs/{job_id}").json()["progress"]["step"] >= 2:
                return job_id
            time.sleep(0.5)
    raise AssertionError(f"{job_id} took no step within 120 s")


@pytest.fixture(scope="module")
def admin(site: Served) -> Iterator[Watched]:
    yield from signed_in(site)


_STAMP = re.compile(r"\b(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d)(?::(\d\d))?")


def _times_on_page(w: Watched) -> list[datetime]:
    text = w.page.inner_text("main")
    return [datetime(*(int(g) for g in m.groups()[:5]), int(m.group(6) or 0), tzinfo=UTC)  # type: ignore[misc]
            for m in _STAMP.finditer(text)]


@pytest.mark.parametrize("path,ready", [
    ("/clusters/local-a", "[data-chip='2']"),
    ("/clusters/local-a/dashboard", "canvas"),
    ("/jobs/{job}", "h1"),
])
def test_a_local_clusters_pages_render_with_wall_clock_times(admin: Watched, job: str, path: str,
                                                            ready: str) -> None:
    admin.errors.clear()
    admin.open(path.format(job=job), ready)
    admin.page.wait_for_timeout(1500)  # a live update or two
    assert admin.errors == [], admin.errors
    assert "Could not load this page" not in admin.page.inner_text("main")
    now = datetime.now(UTC)
    for t in _times_on_page(admin):
        assert t.year >= 2000 and abs((t - now).total_seconds()) < 60, f"{path} shows {t.isoformat()}"


def test_a_local_job_on_a_fast_plane_is_not_stalled_and_its_alerts_are_wall_clock(site: Served, job: str) -> None:
    # Its workers took seconds of wall clock to start: hundreds of seconds at 20x, never a stall.
    with site.client() as c:
        alerts = c.get("/v1/clusters/local-a/alerts").json()["alerts"]
        logs = c.get(f"/v1/jobs/{job}/logs").json()["lines"]
    assert not [a for a in alerts if a["rule"] == "job-stalled"], alerts
    now = datetime.now(UTC)
    stamps = [a[k] for a in alerts for k in ("first_seen_at", "last_seen_at", "resolved_at") if a.get(k)]
    stamps += [ln["time"] for ln in logs]
    assert stamps
    for s in stamps:
        assert abs((datetime.fromisoformat(s) - now).total_seconds()) < 60, s


def test_the_host_switch_of_a_local_cluster_is_drawn(admin: Watched, job: str) -> None:
    admin.open("/clusters/local-a", "[data-chip='2']")
    assert admin.page.locator("[data-hub]").count() == 1
    assert admin.page.locator("[data-link]").count() == 3


_RAW_NUMBER = re.compile(r"\d\.\d+e[+-]\d|\d{6,}\.\d|\.\d{4,}")  # 8.762e+10, 245964.831, 0.12345


def test_names_beside_ids_and_numbers_in_human_units(admin: Watched, job: str) -> None:
    admin.open("/jobs", "[data-testid=jobs]")
    row = admin.page.locator("[data-testid=jobs] tr", has_text=job)
    cluster = row.locator("[data-cluster]")
    assert cluster.inner_text() == "local-a" and cluster.get_attribute("title", timeout=2000).startswith("cl-")
    assert re.fullmatch(r"[\d.]+[kMG]?/s", row.locator("td").last.inner_text()), row.inner_text()
    admin.open(f"/jobs/{job}", "[data-testid=job-cluster]")
    assert admin.page.locator("[data-testid=job-cluster]").inner_text() == "local-a"
    admin.open("/clusters/pod-0", "[data-chip='5']")
    admin.page.click("[data-chip='5']")
    admin.page.wait_for_selector("[data-metric=hbm_used_bytes]")
    metrics = admin.page.locator(".metrics").inner_text()
    assert not _RAW_NUMBER.search(metrics), metrics
    assert re.search(r"\d B|iB", metrics), metrics


def test_the_overview_shows_every_pods_state_at_a_glance(admin: Watched, site: Served, job: str) -> None:
    admin.open("/", "[data-tile=local-a] [data-count=busy]")
    with site.client() as c:
        hw = c.get("/v1/clusters/local-a/hardware").json()["chips"]
    tile = admin.page.locator("[data-tile=local-a]")
    count = {k: tile.locator(f"[data-count={k}]").inner_text() for k in ("healthy", "spare", "busy", "running")}
    assert count == {"healthy": str(sum(ch["state"] == "healthy" for ch in hw)), "spare": "1",
                     "busy": str(sum(bool(ch["job"]) for ch in hw)), "running": "1"}, count
    assert admin.page.locator("[data-tile=pod-0]").count() == 1
    # Creating and deleting are behind their buttons, not the page's first screen.
    assert not admin.page.locator("input[name=name]").is_visible()
    admin.page.click("[data-testid=create-cluster] summary")
    assert admin.page.locator("input[name=name]").is_visible()


_STATE_COLOURS = {"#E69F00", "#D55E00", "#CC79A7", "#56B4E9", "#009E73", "#F0E442"}  # colors.ts STATE_MARK


def test_job_outlines_have_a_key_in_colours_no_state_uses(admin: Watched, job: str) -> None:
    admin.open("/clusters/local-a", f".job-legend [data-job='{job}']")
    colour = admin.page.locator(f".job-legend [data-job='{job}'] [data-color]").get_attribute("data-color")
    assert colour and colour.upper() not in _STATE_COLOURS, colour
    with_job = admin.page.locator("[data-chip] .job-outline").evaluate_all(
        "els => els.map(e => e.getAttribute('stroke')).filter(s => s && s !== 'none')")
    assert with_job and set(with_job) == {colour}, with_job


def test_the_heatmap_has_chip_and_time_axes_and_a_scale_and_percentages_a_fixed_axis(admin: Watched, job: str) -> None:
    admin.open("/clusters/local-a/dashboard", "canvas")
    admin.page.wait_for_function("document.querySelector('[data-axis=time] span').textContent.includes('UTC')",
                                 timeout=10_000)
    chips = admin.page.locator("[data-axis=chip]").inner_text().split("\n")
    assert chips[0] == "chip 0" and chips[-1] == "chip 2", chips
    assert admin.page.locator("[data-testid=heat-scale]").inner_text().replace("\n", " ") == "0 % 100 %"
    y = admin.page.locator("figure.chart[aria-label='utilization (cluster mean)']").evaluate(
        "el => [el.plot.scales.y.min, el.plot.scales.y.max]")
    assert y == [0, 100], y


def test_the_chip_panel_is_beside_the_torus_at_1280_px(admin: Watched, job: str) -> None:
    admin.page.set_viewport_size({"width": 1280, "height": 900})
    try:
        admin.open("/clusters/pod-0", "[data-chip='5']")
        admin.page.click("[data-chip='5']")
        admin.page.wait_for_selector("[data-testid=chip-detail]:not([hidden])")
        torus = admin.page.locator("[data-testid=torus]").bounding_box()
        panel = admin.page.locator("[data-testid=chip-detail]").bounding_box()
        assert torus and panel
        assert panel["x"] >= torus["x"] + torus["width"] - 1 and panel["y"] < torus["y"] + torus["height"], (torus, panel)
        assert panel["x"] + panel["width"] <= 1280
    finally:
        admin.page.set_viewport_size({"width": 1500, "height": 1000})
