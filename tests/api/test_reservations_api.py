"""Reservations and time limits over HTTP: operationIds, problem+json errors naming the
field, roles, and the CLI (``podfleet reservation ...``, ``job submit --time-limit``)."""

from __future__ import annotations

import json

import httpx
import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app
from tests.api.conftest import Live, wait_active


@pytest.fixture(scope="module")
def rpod(admin: httpx.Client) -> dict:
    r = admin.post("/v1/clusters", json={"name": "rpod"})
    assert r.status_code == 201, r.text
    return wait_active(admin, "rpod")


def test_openapi_names_the_reservation_operations(admin: httpx.Client) -> None:
    spec = admin.get("/openapi.json").json()
    ops = {op["operationId"]: path for path, item in spec["paths"].items() for op in item.values()
           if isinstance(op, dict) and "operationId" in op}
    assert ops["CreateReservation"] == ops["ListReservations"] == "/v1/clusters/{cluster}/reservations"
    assert ops["DescribeReservation"] == ops["DeleteReservation"] == \
        "/v1/clusters/{cluster}/reservations/{reservation}"


def test_reservation_lifecycle_and_errors(admin: httpx.Client, rpod: dict) -> None:
    base = "/v1/clusters/rpod/reservations"
    r = admin.post(base, json={"name": "r1", "chips": 16, "start": "now+1h", "duration": "2h"})
    assert r.status_code == 201, r.text
    got = r.json()
    assert (got["chips"], len(got["chip_ids"]), got["state"], got["duration_s"]) == (16, 16, "pending", 7200.0)
    r = admin.post(base, json={"name": "r1", "chips": 4, "duration": 60})
    assert r.status_code == 409 and r.json()["field"] == "name"
    for body, status, field in [
        # Well formed but impossible: 422 (the contract: a schema-valid request is never a 400).
        ({"chips": 4, "duration": "1h", "start": "2001-01-01T00:00:00Z"}, 422, "start"),
        ({"chips": 4, "duration": "1h", "start": "2026-13-01T00:00:00Z"}, 422, "start"),
        ({"chips": 4, "duration": "0"}, 422, "duration"),
        ({"chips": 4, "duration": "1h", "start": "tomorrow"}, 400, None),  # not a time at all
        ({"chips": 4, "duration": -5}, 400, None),
        ({"chips": 4, "duration": "1h", "queue": "nope"}, 404, "queue"),
        ({"chips": 100000, "duration": "1h"}, 400, None),  # beyond the schema's bound
        ({"chips": 65, "duration": "1h"}, 422, "chips"),
    ]:
        r = admin.post(base, json=body)
        assert r.status_code == status, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        if field:
            assert r.json()["field"] == field, r.text
    assert [x["name"] for x in admin.get(base).json()["reservations"]] == ["r1"]
    assert admin.get(f"{base}/r1").json()["chip_ids"] == got["chip_ids"]
    assert admin.get(f"{base}/nope").status_code == 404
    r = admin.delete(f"{base}/r1")
    assert r.status_code == 200 and r.json()["state"] == "deleted"
    assert admin.delete(f"{base}/r1").status_code == 404


def test_a_viewer_reads_reservations_and_may_not_make_one(live: Live, rpod: dict) -> None:
    with live.client("viewer") as viewer:
        assert viewer.get("/v1/clusters/rpod/reservations").status_code == 200
        r = viewer.post("/v1/clusters/rpod/reservations", json={"chips": 4, "duration": "1h"})
        assert r.status_code == 403


def test_job_time_limit_over_http(admin: httpx.Client, rpod: dict) -> None:
    r = admin.post("/v1/clusters/rpod/jobs", json={"model": "tiny", "chips": 4, "time_limit_s": 0})
    assert r.status_code == 400
    r = admin.post("/v1/clusters/rpod/jobs", json={"model": "tiny", "chips": 4, "steps": 10**6, "time_limit_s": 3600})
    assert r.status_code == 201 and r.json()["time_limit_s"] == 3600
    assert admin.post(f"/v1/jobs/{r.json()['id']}/stop").status_code == 200


def test_cli_reservation_commands_and_time_limit(live: Live, rpod: dict) -> None:
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"]}
    run = CliRunner().invoke
    r = run(app, ["reservation", "create", "--cluster", "rpod", "--chips", "8", "--start", "now+2h",
                  "--duration", "1h30m", "--name", "cli-r", "--output", "json"], env=env)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["duration_s"] == 5400.0
    r = run(app, ["reservation", "list", "--cluster", "rpod"], env=env)
    assert r.exit_code == 0 and "cli-r" in r.stdout
    r = run(app, ["reservation", "describe", "cli-r", "--cluster", "rpod", "--output", "json"], env=env)
    assert r.exit_code == 0 and json.loads(r.stdout)["state"] == "pending"
    r = run(app, ["reservation", "create", "--cluster", "rpod", "--chips", "8", "--duration", "-1"], env=env)
    assert r.exit_code != 0 and "duration" in r.stderr and "Traceback" not in r.stderr
    r = run(app, ["job", "submit", "rpod", "--model", "tiny", "--chips", "4", "--steps", "1000000",
                  "--time-limit", "1:00:00", "--output", "json"], env=env)
    assert r.exit_code == 0, r.stderr
    job = json.loads(r.stdout)
    assert job["time_limit_s"] == 3600
    r = run(app, ["job", "submit", "rpod", "--model", "tiny", "--chips", "4", "--time-limit", "forever"], env=env)
    assert r.exit_code != 0 and "time_limit" in r.stderr and "Traceback" not in r.stderr
    assert run(app, ["job", "stop", job["id"]], env=env).exit_code == 0
    r = run(app, ["reservation", "delete", "cli-r", "--cluster", "rpod", "--output", "json"], env=env)
    assert r.exit_code == 0 and json.loads(r.stdout)["state"] == "deleted"
