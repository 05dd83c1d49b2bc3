"""A maintenance rollout on a local cluster of real worker processes, through the REST
API: the maintained chip's rank moves to the free slot while the gang's other rank keeps
its process, the admin's command runs with its output kept, the chip returns to
service, and the job trains on (issue 26 item 4)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.cli.main import app
from podfleet.compose import build
from podfleet.engine.timeline import Timeline
from podfleet.fabric.local import LocalFabric
from podfleet.store.memory import MemoryStore

pytestmark = pytest.mark.realproc

TOKEN = "pf_test-admin-token-maintenance-0123456789"


def _wait(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.1)


def test_maintenance_moves_the_rank_away_runs_the_command_and_returns_the_chip(tmp_path: Path) -> None:
    parts = build(MemoryStore(), Timeline(seed=1, speed=1.0), telemetry_interval_s=0.5, workdir=str(tmp_path))
    plane = parts.plane
    bootstrap_admin(plane, TOKEN)
    with serve_in_thread(plane, parts=parts) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
        assert c.post("/v1/clusters", json={"name": "loc", "fabric": "local", "chips": 3}).status_code == 201
        _wait(lambda: c.get("/v1/clusters/loc").json()["state"] == "active", 30, "the cluster")
        r = c.post("/v1/clusters/loc/jobs", json={"model": "debug", "chips": 2, "steps": 10**6, "options": {
            "global_batch": 4, "seq_len": 32, "step_delay_s": 0.05}})
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        _wait(lambda: c.get(f"/v1/jobs/{jid}").json()["progress"].get("step", 0) >= 3, 120, "the job's steps")
        fab = plane.resolve("loc").fabric
        assert isinstance(fab, LocalFabric)
        chips = c.get(f"/v1/jobs/{jid}").json()["allocation"]["chips"]
        pids = fab.pids(jid)
        # The CLI as an admin runs it: through the SDK and the API, following it to its end.
        got = CliRunner().invoke(app, ["maintenance", "run", "loc", "--command", "sh -c 'echo updated $PODFLEET_CHIPS'",
                                       "--chip", str(chips[1]), "--wait", "-o", "json"],
                                 env={"PODFLEET_URL": url, "PODFLEET_TOKEN": TOKEN})
        assert got.exit_code == 0, got.stderr
        rid = json.loads(got.stdout)["id"]
        out = c.get(f"/v1/clusters/loc/maintenance/{rid}").json()
        assert out["state"] == "succeeded", out
        [run] = out["runs"]
        assert run["exit_code"] == 0 and run["output"].strip() == f"updated {chips[1]}"
        view = c.get(f"/v1/jobs/{jid}").json()
        assert view["state"] == "RUNNING", view
        moved = view["allocation"]["chips"]
        assert moved[0] == chips[0] and moved[1] != chips[1]
        after = fab.pids(jid)
        assert after[0] == pids[0] and after[1] != pids[1]  # no gang relaunch
        [rec] = view["runtime"]["recoveries"]
        assert rec["mechanism"] == "rank-move" and rec["steps_lost"] == 0, rec
        step = view["progress"]["step"]
        _wait(lambda: c.get(f"/v1/jobs/{jid}").json()["progress"]["step"] > step, 30, "a step after the rollout")
        cl = c.get("/v1/clusters/loc").json()
        assert cl["cordoned"] == [] and cl["draining"] == []
        assert fab.chip_states()[chips[1]].value == "healthy"
        # Operators may read it; only admins start one.
        assert c.get("/v1/clusters/loc/maintenance").json()["rollouts"][0]["id"] == rid
        assert c.post(f"/v1/jobs/{jid}/stop").status_code in (200, 202)
