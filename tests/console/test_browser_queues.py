"""The queues page, a job's admission reason and the usage chart in a real browser
(headless Debian chromium through playwright), against a served plane whose twin pod has
two queues in a cohort: team-b runs a job on chips borrowed from team-a and waits with a
second one its cohort cannot lend."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.console.conftest import Served, serve, wait_active
from tests.console.test_browser import SHOTS, Watched, signed_in

pytestmark = pytest.mark.browser

LONG = {"model": "tiny", "steps": 10**6, "checkpoint_interval": 100}


@pytest.fixture(scope="module")
def site() -> Iterator[Served]:
    yield from serve(speed=5.0)


@pytest.fixture(scope="module")
def jobs(site: Served) -> dict[str, str]:
    with site.client() as c:
        wait_active(c, "pod-0")
        for body in ({"name": "team-a", "nominal": 32, "cohort": "research"},
                     {"name": "team-b", "nominal": 16, "cohort": "research", "weight": 2}):
            r = c.post("/v1/clusters/pod-0/queues", json=body)
            assert r.status_code == 201, r.text
        run = c.post("/v1/clusters/pod-0/jobs", json={**LONG, "chips": 32, "queue": "team-b", "name": "borrower"})
        wait = c.post("/v1/clusters/pod-0/jobs", json={**LONG, "chips": 48, "queue": "team-b", "name": "waiter"})
        assert run.status_code == 201 and wait.status_code == 201, (run.text, wait.text)
        deadline = time.monotonic() + 30
        while c.get(f"/v1/jobs/{run.json()['id']}").json()["state"] != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert c.get(f"/v1/jobs/{run.json()['id']}").json()["state"] == "RUNNING"
        return {"running": run.json()["id"], "pending": wait.json()["id"]}


@pytest.fixture(scope="module")
def admin(site: Served, jobs: dict[str, str]) -> Iterator[Watched]:
    yield from signed_in(site)


def field(w: Watched, queue: str, name: str) -> str:
    return w.page.text_content(f"[data-testid=queues-pod-0] tr[data-queue='{queue}'] [data-field={name}]") or ""


def test_the_queues_page_shows_each_queues_quota_borrowing_and_jobs(admin: Watched) -> None:
    admin.page.click("header nav >> text=Queues")  # in the navigation like every page
    admin.page.wait_for_selector("[data-testid=queues-pod-0] tr[data-queue=team-b]", timeout=10_000)
    assert admin.page.get_attribute("header nav a[href='/queues']", "aria-current") == "page"
    assert field(admin, "team-a", "nominal") == "32 chips" and field(admin, "team-b", "nominal") == "16 chips"
    assert field(admin, "team-a", "cohort") == field(admin, "team-b", "cohort") == "research"
    # team-b holds 32 chips on a nominal 16: it borrows 16 of team-a's idle quota.
    assert field(admin, "team-b", "used") == "32 chips" and field(admin, "team-b", "borrowed") == "16 chips"
    assert field(admin, "team-a", "lent") == "16 chips" and field(admin, "team-a", "borrowed") == "0 chips"
    assert field(admin, "team-b", "running") == "1" and field(admin, "team-b", "pending") == "1"
    assert field(admin, "team-a", "running") == "0" and field(admin, "team-b", "weight") == "2"
    assert field(admin, "team-b", "share").endswith(" %") and field(admin, "team-b", "usage").endswith(" chip-h")
    assert 0 < float(field(admin, "team-b", "fair_share")) < 1 == float(field(admin, "team-a", "fair_share"))
    assert field(admin, "default", "nominal") == "unlimited"  # the implicit default queue
    assert admin.errors == []


def test_the_usage_chart_draws_each_queues_chip_hours_from_zero(admin: Watched) -> None:
    admin.open("/queues?cluster=pod-0&bucket=1m", "[data-testid=queues-pod-0]")  # a typed-in address
    chart = "[data-testid=usage-pod-0]"
    admin.page.wait_for_selector(f"{chart}[data-buckets]:not([data-chip-hours='0'])", timeout=15_000)
    assert float(admin.page.get_attribute(chart, "data-chip-hours") or "0") > 0
    assert admin.page.locator(f"{chart} canvas").count() == 1
    legend = admin.page.locator(f"{chart} .u-legend").text_content() or ""
    assert "team-a" in legend and "team-b" in legend
    y_min = admin.page.evaluate("s => document.querySelector(s).plot.scales.y.min", chart)
    assert y_min == 0  # a fixed axis from 0: a queue's bar height reads as its chip-hours
    SHOTS.mkdir(parents=True, exist_ok=True)
    admin.page.screenshot(path=str(SHOTS / "queues.png"), full_page=True)
    admin.page.select_option("#queues-bucket", "1h")  # another bucket: the same chips, fewer buckets
    admin.page.wait_for_selector(f"{chart} figcaption:has-text('per hour')", timeout=10_000)
    assert admin.errors == []


def test_a_jobs_admission_reason_shows_in_the_list_and_on_its_page(admin: Watched, jobs: dict[str, str]) -> None:
    admin.open("/jobs?cluster=pod-0", "[data-testid=jobs]")
    reason = admin.page.text_content(f"[data-testid=jobs] [data-field=reason][data-job='{jobs['pending']}']") or ""
    assert "queue 'team-b' cannot borrow" in reason and "cohort 'research'" in reason
    admin.open(f"/jobs/{jobs['pending']}", "[data-testid=job-reason]")
    assert "cannot borrow" in (admin.page.text_content("[data-testid=job-reason]") or "")
    assert admin.page.text_content("[data-testid=job-queue]") == "team-b"
    assert admin.page.text_content("[data-testid=job-placement]") == "—"  # no chips yet
    admin.open(f"/jobs/{jobs['running']}", "[data-testid=job-placement]")
    assert "block" in (admin.page.text_content("[data-testid=job-placement]") or "")
    admin.page.click("[data-testid=job-queue]")  # to its queue's cluster on the queues page
    admin.page.wait_for_selector("[data-testid=queues-pod-0] tr[data-queue=team-b]", timeout=10_000)
    assert admin.errors == []
