"""The fleet view in a real browser (headless Debian chromium through playwright; issue
28): a served plane with an 8-pod twin fleet and a 512-chip gang across it. The cluster's
page shows one tile per pod with the job on each, a tile opens its pod's torus, and a
chip failed in pod 3 turns tile 3's state."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.console.conftest import Served, serve, wait_active
from tests.console.test_browser import AXE, SHOTS, Watched, signed_in

pytestmark = pytest.mark.browser

TILE = ".pod-tile[data-pod='{}']"


@pytest.fixture(scope="module")
def site() -> Iterator[Served]:
    yield from serve(speed=5.0, default_cluster=None)


def _state(c: httpx.Client, job: str) -> dict:
    return c.get(f"/v1/jobs/{job}").json()


@pytest.fixture(scope="module")
def gang(site: Served) -> str:
    with site.client() as c:
        r = c.post("/v1/clusters", json={"name": "fleet-8", "type": "trn2-ultraserver", "pods": 8,
                                         "pods_per_block": 8, "spares": 0})
        assert r.status_code == 201, r.text
        wait_active(c, "fleet-8")
        r = c.post("/v1/clusters/fleet-8/jobs", json={"model": "llama3-8b", "chips": 512, "steps": 10**6,
                                                       "name": "big-gang"})
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        deadline = time.monotonic() + 30
        while _state(c, job)["state"] != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _state(c, job)["state"] == "RUNNING", _state(c, job)
        assert _state(c, job)["allocation"]["pods"] == list(range(8))
        return str(job)


@pytest.fixture(scope="module")
def admin(site: Served, gang: str) -> Iterator[Watched]:
    yield from signed_in(site)


def test_the_fleet_view_shows_each_pod_as_a_tile_with_the_gang_on_all_eight(admin: Watched, gang: str) -> None:
    admin.open("/clusters/fleet-8", TILE.format(7))
    tiles = admin.page.locator(".pod-tile")
    assert tiles.count() == 8
    assert admin.page.locator(".fleet-block[data-block='0'] .pod-tile").count() == 8  # one block of 8
    for p in range(8):
        tile = admin.page.locator(TILE.format(p))
        assert tile.get_attribute("data-state") == "healthy"
        assert tile.get_attribute("data-busy") == "64" and tile.get_attribute("data-chips") == "64"
        assert tile.get_attribute("data-jobs") == gang
        assert tile.locator(f"li[data-job='{gang}'] a").text_content() == "big-gang"  # its name beside its id
        assert "64/64 busy (100%)" in (tile.locator("[data-field=busy]").text_content() or "")
    key = admin.page.text_content("[aria-label='pod states (tile colours)']") or ""
    assert "healthy" in key and "impaired" in key and "down" in key
    # The legend's swatch colour is the colour of the tiles in that state.
    swatch = admin.page.eval_on_selector("[data-pod-swatch=healthy]", "e => getComputedStyle(e).borderTopColor")
    border = admin.page.eval_on_selector(TILE.format(0), "e => getComputedStyle(e).borderTopColor")
    assert swatch == border
    assert admin.page.locator("[data-testid=torus]").count() == 0  # no whole-fleet torus: 512 chips unread
    assert admin.errors == []


def test_a_tile_opens_its_pods_torus_and_a_failed_chip_turns_the_tile(admin: Watched, site: Served, gang: str) -> None:
    admin.open("/clusters/fleet-8", TILE.format(3))
    admin.page.click(f"{TILE.format(3)} button.pod-open")
    admin.page.wait_for_selector("[data-testid=pod-torus][data-pod='3'] [data-chip='63']", timeout=10_000)
    box = "[data-testid=pod-torus]"
    assert admin.page.locator(f"{box} .chip").count() == 64  # the pod's chips only
    assert admin.page.get_attribute(f"{TILE.format(3)} button.pod-open", "aria-pressed") == "true"
    label = admin.page.get_attribute(f"{box} [data-chip='9']", "aria-label") or ""
    pct = float(label.split("utilization ")[1].split("%")[0])
    assert 0 < pct <= 100, label  # a busy chip's percent, as the API gives it (once drawn x100)
    admin.page.click(f"{box} [data-chip='5']")
    assert admin.page.text_content(f"{box} [data-testid=chip-detail] [data-field=index]") == str(3 * 64 + 5)
    with site.client() as c:
        r = c.post("/v1/clusters/fleet-8/faults", json={"kind": "chip-failure", "chip": 3 * 64 + 5})
        assert r.status_code in (200, 201, 202), r.text
    admin.page.wait_for_selector(f"{TILE.format(3)}[data-state=impaired]", timeout=15_000)
    assert admin.page.get_attribute(TILE.format(3), "data-healthy") == "63"
    assert admin.page.locator(".pod-tile[data-state=healthy]").count() == 7  # the other pods unchanged
    states = admin.page.text_content(f"{TILE.format(3)} [data-field=states]") or ""
    assert "failed" in states or "isolated" in states, states
    # The open torus follows: pod 3's chip 5 is drawn in its new state.
    admin.page.wait_for_selector(f"{box} [data-chip='5']:not([data-state=healthy])", timeout=15_000)
    detail = f"{box} [data-testid=chip-detail] [data-field=state]"
    admin.page.wait_for_selector(f"{detail}:not(:text-is('healthy'))", timeout=15_000)  # the open chip's too
    swatch = admin.page.eval_on_selector("[data-pod-swatch=impaired]", "e => getComputedStyle(e).borderTopColor")
    assert swatch == admin.page.eval_on_selector(TILE.format(3), "e => getComputedStyle(e).borderTopColor")
    # The gang keeps its 8 pods (the rank moves within pod 3), and every tile still lists it.
    admin.page.wait_for_selector(f"{TILE.format(3)}[data-jobs='{gang}']", timeout=15_000)
    SHOTS.mkdir(parents=True, exist_ok=True)
    admin.page.screenshot(path=str(SHOTS / "fleet.png"), full_page=True)
    if AXE.is_file():  # through the debugger: the CSP forbids inline scripts
        admin.page.evaluate(AXE.read_text())
        result = admin.page.evaluate("axe.run(document, {resultTypes: ['violations']})")
        bad = [f"{v['id']}: {v['help']} e.g. {v['nodes'][0]['html'][:120]}"
               for v in result["violations"] if v["impact"] in ("serious", "critical")]
        assert bad == []
    assert admin.errors == []
