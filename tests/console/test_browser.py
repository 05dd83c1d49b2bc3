"""The console in a real browser (headless Debian chromium through playwright): sign in,
every page without console errors, the torus, live updates, role-aware controls, and an
accessibility scan. One server and one browser for the module; screenshots of each page
go to out/console-screenshots/."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.console.conftest import Served, console_built, serve, wait_active

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).parents[2]
AXE = ROOT / "console" / "node_modules" / "axe-core" / "axe.min.js"
SHOTS = ROOT / "out" / "console-screenshots"
PAGES = {  # path -> a selector that shows the page has rendered its data
    "overview": ("/", "[data-testid=clusters]"),
    "cluster": ("/clusters/pod-0", "[data-chip='63']"),
    "dashboard": ("/clusters/pod-0/dashboard", "canvas"),
    "jobs": ("/jobs", "h1"),
    "queues": ("/queues", "[data-testid=queues-pod-0]"),
    "alerts": ("/alerts", "#ops-cluster"),
    "recoveries": ("/recoveries", "#ops-cluster"),
    "firmware": ("/firmware", "#ops-cluster"),
    "audit": ("/audit", "[data-testid=audit]"),
    "tokens": ("/tokens", "[data-testid=tokens]"),
}

sync_api = pytest.importorskip("playwright.sync_api")
if not CHROMIUM.exists() or not console_built():
    pytest.skip("needs /usr/bin/chromium (apt-get install -y chromium) and the built console (make console)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def site() -> Iterator[Served]:
    # Sped up 5x: a job's steps move within the test (the console reads the API as ever).
    yield from serve(speed=5.0)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


class Watched:
    """A signed-in page that records console errors and uncaught exceptions."""

    def __init__(self, browser: object, site: Served, role: str) -> None:
        self.context = browser.new_context(viewport={"width": 1500, "height": 1000})  # type: ignore[attr-defined]
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.site = site
        self.page.goto(f"{site.url}/login")
        self.page.fill("input[name=token]", site.tokens[role])
        self.page.click("form.login button[type=submit]")
        self.page.wait_for_selector("header.top .me", timeout=10_000)

    def open(self, path: str, ready: str) -> None:
        self.page.goto(f"{self.site.url}{path}")
        self.page.wait_for_selector(ready, timeout=10_000)
        self.page.wait_for_selector("main[aria-busy=false]", timeout=10_000)


def signed_in(site: Served, role: str = "admin") -> Iterator[Watched]:
    """A browser of its own with ``role`` signed in to ``site`` (module fixtures of the other
    browser tests: their sites differ from this file's)."""
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        w = Watched(b, site, role)
        yield w
        w.context.close()
        b.close()


@pytest.fixture(scope="module")
def admin(browser: object, site: Served) -> Iterator[Watched]:
    w = Watched(browser, site, "admin")
    yield w
    w.context.close()


@pytest.fixture(scope="module")
def viewer(browser: object, site: Served) -> Iterator[Watched]:
    w = Watched(browser, site, "viewer")
    yield w
    w.context.close()


def test_sign_in_lands_on_the_overview_signed_in(admin: Watched, site: Served) -> None:
    assert admin.page.url.rstrip("/") == site.url
    assert admin.page.text_content("header.top .me") == "admin (admin)"
    cookies = admin.context.cookies()
    session = next(c for c in cookies if c["name"] == "podfleet_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert admin.page.evaluate("document.cookie") == ""  # no script can read it


def test_every_page_loads_without_console_errors(admin: Watched, site: Served) -> None:
    with site.client() as c:
        wait_active(c, "pod-0")
    SHOTS.mkdir(parents=True, exist_ok=True)
    for name, (path, ready) in PAGES.items():
        admin.open(path, ready)
        admin.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    assert admin.errors == []


def test_an_operator_starts_a_rolling_firmware_update_and_sees_its_chip_updating(admin: Watched, site: Served) -> None:
    """Started early, followed to its end by a later test (a chip takes 12 s at 5x): the
    tests between them run meanwhile."""
    with site.client() as c:
        before = c.get("/v1/clusters/pod-0/hardware").json()["chips"][63]["metrics"]["firmware_version"]
    admin.open("/firmware?cluster=pod-0", "[data-testid=firmware-chips] [data-fw-chip='63']")
    assert admin.page.get_attribute("[data-fw-chip='63']", "data-version") == before
    versions = admin.page.locator("select[name=version] option").all_text_contents()
    assert before in versions  # the server's own list (StartFirmwareUpdate's enum)
    target = next(v for v in reversed(versions) if v != before)
    admin.page.select_option("select[name=version]", target)
    admin.page.fill("input[name=chips]", "63")
    admin.page.click("text=Start rolling update")
    admin.page.wait_for_selector("[data-testid=rollouts] [data-testid=rollout-state]:has-text('running')", timeout=5_000)
    admin.page.wait_for_selector("[data-fw-chip='63'][data-fw-state=updating]", timeout=5_000)
    assert admin.page.locator("[data-fw-state=updating]").count() == 1  # one chip at a time
    admin.page.screenshot(path=str(SHOTS / "firmware-rollout.png"), full_page=True)
    admin.open("/clusters/pod-0", "[data-chip='63']")  # the torus shows it too
    admin.page.wait_for_selector("[data-chip='63'][data-state=updating]", timeout=5_000)
    FIRMWARE["target"] = target


FIRMWARE: dict[str, str] = {}


def test_click_chip_23_shows_its_index_metrics_and_state(admin: Watched) -> None:
    admin.open("/clusters/pod-0", "[data-chip='23']")
    admin.page.click("[data-chip='23']")
    panel = admin.page.locator("[data-testid=chip-detail]")
    panel.wait_for(state="visible", timeout=5_000)
    assert panel.locator("h2").text_content() == "Chip 23"
    assert panel.locator("[data-field=index]").text_content() == "23"
    names = panel.locator("[data-metric]").all_text_contents()
    for metric in ("temperature_c", "power_w", "hbm_used_bytes", "neuroncore_utilization", "mem_ecc_corrected"):
        assert metric in names
    assert panel.locator("[data-field=state]").text_content() == admin.page.get_attribute("[data-chip='23']", "data-state")
    assert admin.page.locator("[data-link]").count() == 192
    assert admin.page.locator("[data-chip]").count() == 64
    admin.page.screenshot(path=str(SHOTS / "chip-23.png"))


def test_the_torus_is_keyboard_navigable_and_links_open_from_a_chip(admin: Watched) -> None:
    admin.open("/clusters/pod-0", "[data-chip='23']")
    assert admin.page.locator(".chip[tabindex='0']").count() == 1  # one tab stop for 64 chips
    admin.page.focus("[data-chip='0']")
    for key in ("ArrowRight", "ArrowDown", "PageDown", "ArrowLeft"):
        admin.page.keyboard.press(key)
    assert admin.page.evaluate("document.activeElement.getAttribute('data-chip')") == "20"  # x0 y1 z1
    admin.page.keyboard.press("ArrowLeft")  # wraps, as the torus does
    assert admin.page.evaluate("document.activeElement.getAttribute('data-chip')") == "23"
    admin.page.keyboard.press("Enter")
    panel = admin.page.locator("[data-testid=chip-detail]")
    panel.wait_for(state="visible")
    assert panel.locator("h2").text_content() == "Chip 23"
    refs = panel.locator("button.link-ref")
    assert refs.count() == 6  # a 4x4x4 torus: two links per axis
    key = refs.first.get_attribute("data-link-ref")
    refs.first.click()
    link = admin.page.locator("[data-testid=link-detail]")
    link.wait_for(state="visible")
    assert link.locator("h2").text_content() == f"Link {key}"
    assert admin.page.get_attribute(f"[data-link='{key}']", "data-state") == "up"


def test_an_operator_cordons_and_uncordons_a_chip_from_its_panel(admin: Watched) -> None:
    admin.open("/clusters/pod-0", "[data-testid=live][data-time]")
    admin.page.click("[data-chip='50']")
    controls = admin.page.locator("[data-testid=chip-detail] [data-testid=chip-controls]")
    controls.wait_for()
    controls.get_by_role("button", name="Cordon", exact=True).click()  # a cookie write: CSRF header sent by the page
    admin.page.wait_for_selector("[data-chip='50'][data-state=cordoned]", timeout=5_000)
    controls.get_by_role("button", name="Uncordon", exact=True).click()
    admin.page.wait_for_selector("[data-chip='50'][data-state=healthy]", timeout=5_000)
    assert "failed" not in (controls.locator(".status").text_content() or "")


def test_a_fault_injected_through_the_api_turns_its_chip_failed_within_2_s(admin: Watched, site: Served) -> None:
    admin.open("/clusters/pod-0", "[data-testid=live][data-time]")
    chip = "[data-chip='41']"
    assert admin.page.get_attribute(chip, "data-state") != "failed"
    with site.client("operator") as c:
        r = c.post("/v1/clusters/pod-0/faults", json={"kind": "chip-failure", "chip": 41})
        assert r.status_code == 202, r.text
    t0 = time.monotonic()
    admin.page.wait_for_selector(f"{chip}[data-state='failed'], {chip}[data-state='isolated']", timeout=2_000)
    assert time.monotonic() - t0 <= 2.0
    with site.client() as c:  # the recovery flow isolates the failed chip: both are "out"
        c.post("/v1/clusters/pod-0/chips/41/repair")


def test_an_operator_acknowledges_an_alert(admin: Watched, site: Served) -> None:
    with site.client("operator") as c:
        assert c.post("/v1/clusters/pod-0/faults", json={"kind": "thermal-runaway", "chip": 30}).status_code == 202
        deadline = time.monotonic() + 10
        while not (firing := [a for a in c.get("/v1/clusters/pod-0/alerts?state=firing").json()["alerts"]
                              if a["target"] == "chip:30"]) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert firing, "the fault raised no alert"
    alert = firing[0]["id"]
    admin.open("/alerts?cluster=pod-0", "[data-testid=alerts]")
    admin.page.click(f"button[aria-label='acknowledge alert {alert}']")
    admin.page.wait_for_selector(f"button[aria-label='acknowledge alert {alert}']", state="detached", timeout=5_000)
    with site.client() as c:
        states = {a["id"]: a["state"] for a in c.get("/v1/clusters/pod-0/alerts").json()["alerts"]}
        c.post("/v1/clusters/pod-0/chips/30/repair")
    assert states[alert] in ("acknowledged", "resolved")


def test_a_viewer_sees_no_mutating_control(viewer: Watched) -> None:
    for path, ready in [PAGES[p] for p in ("overview", "jobs", "alerts", "firmware", "cluster")]:
        viewer.open(path, ready)
        assert viewer.page.locator("main form button, main [data-testid=chip-controls], main button:has-text('Stop'),"
                                   " main button:has-text('Acknowledge')").count() == 0, path
    viewer.page.click("[data-chip='23']")
    viewer.page.locator("[data-testid=chip-detail]").wait_for(state="visible")
    assert viewer.page.locator("[data-testid=chip-detail] button:not(.link-ref)").count() == 0
    viewer.page.locator("[data-testid=chip-detail] button.link-ref").first.click()
    viewer.page.locator("[data-testid=link-detail]").wait_for(state="visible")
    assert viewer.page.locator("[data-testid=link-detail] button").count() == 0
    nav = viewer.page.locator("header nav").text_content() or ""
    assert "Audit" not in nav and "Tokens" not in nav
    viewer.open("/audit", "main h1")  # typed in: the page says why, and asks the API nothing
    assert "needs the admin role" in (viewer.page.text_content("main") or "")
    assert viewer.page.locator("[data-testid=audit]").count() == 0
    assert viewer.errors == []


def test_create_a_cluster_and_watch_its_deploy_log(admin: Watched) -> None:
    admin.open("/", "[data-testid=clusters]")
    admin.page.click("[data-testid=create-cluster] summary")  # the form sits behind its button
    admin.page.fill("input[name=name]", "pod-web")
    admin.page.select_option("select[name=type]", "trn2-node")
    admin.page.fill("input[name=spares]", "1")
    admin.page.fill("input[name=quotas]", "research=8, prod=8")
    admin.page.fill("input[name=hbm_gib]", "64")
    admin.page.uncheck("input[name=restore_spares]")
    admin.page.click("text=Create cluster")
    admin.page.wait_for_selector("[data-testid=deploy-log]:has-text('cluster active')", timeout=30_000)
    assert admin.page.locator(".steps li[data-state=succeeded]").count() >= 3
    admin.page.wait_for_selector("[data-testid=clusters] a:has-text('pod-web')", timeout=10_000)
    admin.open("/clusters/pod-web", "[data-chip='15']")  # one node: one plane
    with admin.site.client() as c:
        hw = c.get("/v1/clusters/pod-web/hardware").json()
        spec = c.get("/v1/clusters/pod-web").json()["spec"]
    assert spec["quotas"] == {"research": 8, "prod": 8} and spec["hbm_gib"] == 64 and spec["restore_spares"] is False
    assert spec["spares"] == 1 and spec["type"] == "trn2-node"
    assert admin.page.locator("[data-chip]").count() == len(hw["chips"])
    assert admin.page.locator("[data-link]").count() == len(hw["links"])
    assert admin.page.locator(".plane-label").count() == 1
    admin.page.screenshot(path=str(SHOTS / "cluster-node.png"), full_page=True)
    admin.open("/", "[data-testid=clusters] a:has-text('pod-web')")  # and delete it, its name typed twice
    admin.page.click("[data-testid=delete-cluster] summary")
    admin.page.fill("input[name=delete-name]", "pod-web")
    admin.page.fill("input[name=delete-confirm]", "pod-web")
    admin.page.click("text=Delete cluster")
    admin.page.wait_for_selector("[data-testid=clusters] a:has-text('pod-web')", state="detached", timeout=10_000)
    with admin.site.client() as c:
        assert c.get("/v1/clusters/pod-web").status_code == 404


def test_submit_a_job_with_a_plan_preview_and_see_its_progress_move(admin: Watched) -> None:
    admin.open("/jobs", "h1")
    admin.page.select_option("select[name=cluster]", "pod-0")
    admin.page.select_option("select[name=model]", "tiny")
    admin.page.fill("input[name=chips]", "8")
    admin.page.fill("input[name=steps]", "100000")
    admin.page.click("text=Preview plan")
    layout = admin.page.locator("[data-testid=plan-preview] [data-field=layout]")
    layout.wait_for(timeout=10_000)
    tp, pp, dp = (int(x) for x in (layout.text_content() or "").split(" / "))
    assert tp * pp * dp == 8
    admin.page.click("text=Submit job")
    admin.page.wait_for_url("**/jobs/job-*", timeout=10_000)
    step = admin.page.locator("[data-testid=job-step]")
    first = int(step.text_content() or "0")
    deadline = time.monotonic() + 30  # (no wait_for_function: the page's CSP forbids eval)
    while int(step.text_content() or "0") <= first and time.monotonic() < deadline:
        admin.page.wait_for_timeout(200)
    assert int(step.text_content() or "0") > first
    admin.page.screenshot(path=str(SHOTS / "job.png"), full_page=True)
    admin.page.click("[data-testid=stop-job]")
    admin.page.wait_for_selector("[data-testid=job-state]:has-text('STOPPED')", timeout=10_000)


def test_an_admin_issues_and_revokes_a_token(admin: Watched, site: Served) -> None:
    admin.open("/tokens", "[data-testid=tokens]")
    admin.page.fill("input[name=token-name]", "ci-viewer")
    admin.page.click("form button[type=submit]")
    admin.page.wait_for_selector("[data-testid=issued-token]:has-text('pf_')", timeout=5_000)
    token = (admin.page.text_content("[data-testid=issued-token]") or "").rsplit(" ", 1)[-1]
    assert httpx.get(f"{site.url}/v1/clusters", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    admin.page.click("button[aria-label='revoke token ci-viewer']")
    admin.page.wait_for_selector("button[aria-label='revoke token ci-viewer']", state="detached", timeout=5_000)
    assert httpx.get(f"{site.url}/v1/clusters", headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_the_rolling_update_ends_chip_by_chip_with_the_new_version(admin: Watched, site: Served) -> None:
    if "target" not in FIRMWARE:
        pytest.skip("the rollout was not started (test above)")
    admin.open("/firmware?cluster=pod-0", "[data-testid=rollouts]")
    admin.page.wait_for_selector("[data-testid=rollout-state]:has-text('succeeded')", timeout=30_000)
    assert admin.page.text_content("[data-testid=rollout-done]") == "1 / 1"
    chip = admin.page.locator("[data-fw-chip='63']")
    assert chip.get_attribute("data-fw-state") == "updated"
    admin.page.wait_for_selector(f"[data-fw-chip='63'][data-version='{FIRMWARE['target']}']", timeout=5_000)
    assert admin.page.locator("[data-fw-state=updated]").count() == 1  # the others were not in it
    admin.page.screenshot(path=str(SHOTS / "firmware-done.png"), full_page=True)
    with site.client() as c:
        r = c.get("/v1/clusters/pod-0/firmware").json()["rollouts"][-1]
    assert r["state"] == "succeeded" and r["done"] == [63]


def test_an_admin_verifies_the_audit_chain(admin: Watched) -> None:
    admin.open("/audit", "[data-testid=audit]")
    assert admin.page.locator("[data-testid=audit] tbody tr").count() > 0
    admin.page.click("text=Verify chain")
    admin.page.wait_for_selector(".status:has-text('Chain intact')", timeout=5_000)


def test_no_serious_or_critical_accessibility_violation(admin: Watched) -> None:
    if not AXE.is_file():
        pytest.skip("axe-core is installed with the console's npm packages (make console)")
    found: dict[str, list[str]] = {}

    def visit(path: str, ready: str) -> None:  # the console's own navigation: axe stays loaded
        admin.page.evaluate("p => { history.pushState(null, '', p); dispatchEvent(new PopStateEvent('popstate')); }",
                            path)
        admin.page.wait_for_selector(ready, timeout=10_000)
        admin.page.wait_for_selector("main[aria-busy=false]", timeout=10_000)

    def scan(name: str) -> None:
        if admin.page.evaluate("typeof axe") == "undefined":  # through the debugger: the CSP forbids inline scripts
            admin.page.evaluate(AXE.read_text())
        result = admin.page.evaluate("axe.run(document, {resultTypes: ['violations']})")
        bad = [f"{v['id']} ({v['impact']}): {v['help']} e.g. {v['nodes'][0]['html'][:120]}"
               for v in result["violations"] if v["impact"] in ("serious", "critical")]
        if bad:
            found[name] = bad

    admin.open("/", "[data-testid=clusters]")
    for name, (path, ready) in PAGES.items():
        visit(path, ready)
        if name != "cluster":  # scanned below, with its panels open
            scan(name)
    visit("/clusters/pod-0", "[data-chip='23']")
    admin.page.click("[data-chip='23']")
    admin.page.locator("[data-testid=chip-detail] h3").first.wait_for()
    admin.page.locator("[data-testid=chip-detail] button.link-ref").first.click()
    admin.page.locator("[data-testid=link-detail]").wait_for(state="visible")
    scan("cluster with chip and link details")
    with admin.site.client() as c:
        jobs = c.get("/v1/jobs").json()["jobs"]
    if jobs:  # the job the submit test ran
        visit(f"/jobs/{jobs[0]['id']}", "[data-testid=job-state]")
        scan("job")
    assert found == {}


def test_signed_out_pages_go_to_the_sign_in_form(browser: object, site: Served) -> None:
    ctx = browser.new_context()  # type: ignore[attr-defined]
    page = ctx.new_page()
    page.goto(f"{site.url}/clusters/pod-0")
    page.wait_for_selector("input[name=token]")
    assert "/login" in page.url
    page.fill("input[name=token]", "pf_not-a-token")
    page.click("form.login button[type=submit]")
    page.wait_for_selector(".status.error")
    assert "Sign-in failed" in (page.text_content(".status") or "")
    ctx.close()
    assert httpx.get(f"{site.url}/healthz").status_code == 200


def test_dashboard_ranges_and_the_whole_session_without_console_errors(admin: Watched) -> None:
    admin.open("/clusters/pod-0/dashboard", "canvas")
    for rng in ("hour", "day", "realtime"):
        admin.page.select_option("#dash-range", rng)
        admin.page.wait_for_timeout(300)
    admin.page.wait_for_selector("[data-testid=dash-lag]:has-text('ms')", timeout=5_000)
    assert admin.errors == []  # every page and action of this module, in one signed-in tab
