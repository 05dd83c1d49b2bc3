"""'twin time' in the console's header (issue 30, "one clock for people"): a sped-up plane
shows the twin's virtual clock beside the wall clock, running at the plane's speed; a plane
at speed 1 shows none (its only clock is the wall's). /healthz is where the console reads it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.console.conftest import Served, serve
from tests.console.test_browser import Watched, signed_in

pytestmark = pytest.mark.browser

T = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
STAMP = re.compile(rf"^{T} · twin time {T} \((\d+(?:\.\d+)?)x\)$")  # wall clock, then the twin's


@pytest.fixture(scope="module", params=[20.0, 1.0], ids=["demo-20x", "speed-1"])
def site(request: pytest.FixtureRequest) -> Iterator[Served]:
    yield from serve(speed=request.param)


@pytest.fixture(scope="module")
def admin(site: Served) -> Iterator[Watched]:
    yield from signed_in(site)


def _twin(w: Watched) -> tuple[datetime, float]:
    el = w.page.locator("header.top [data-testid=twin-time]")
    el.wait_for(state="visible", timeout=10_000)
    m = STAMP.match(" ".join(el.inner_text().split()))
    assert m, el.inner_text()
    wall = datetime.fromisoformat(m.group(1).replace("Z", "+00:00"))
    assert abs((wall - datetime.now(UTC)).total_seconds()) < 60  # beside it: the wall clock, as everywhere
    return datetime.fromisoformat(m.group(2).replace("Z", "+00:00")), float(m.group(3))


def test_the_header_shows_twin_time_only_on_a_sped_up_plane(admin: Watched, site: Served) -> None:
    speed = site.server.plane.tl.speed
    hz = httpx.get(f"{site.url}/healthz").json()
    assert hz["speed"] == speed
    if speed == 1.0:
        assert "twin_time" not in hz
        admin.open("/jobs", "h1")
        admin.page.wait_for_timeout(500)  # the first /healthz read has answered
        assert admin.page.locator("header.top [data-testid=twin-time]").is_hidden()
        assert "twin time" not in admin.page.inner_text("header.top")
    else:
        assert "twin_time" in hz
        first, shown_speed = _twin(admin)
        assert shown_speed == speed
        # The twin started at the wall clock and runs faster: never behind it (a second of
        # slack for the header's whole-second stamp); the header extrapolates what
        # /healthz says, so the two agree (within ten twin minutes: 30 wall seconds at 20x).
        assert first >= datetime.now(UTC) - timedelta(seconds=2)
        served = datetime.fromisoformat(httpx.get(f"{site.url}/healthz").json()["twin_time"].replace("Z", "+00:00"))
        assert abs((served - first).total_seconds()) < 600
        # It survives a page change (the header is rebuilt on each page).
        admin.open("/alerts", "#ops-cluster")
        again, _ = _twin(admin)
        assert again >= first
    assert admin.errors == []
