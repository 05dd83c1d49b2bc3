"""Queues and job arrays over HTTP: operationIds, problem+json errors with stable codes,
the job's queue limited by a user's policy."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.api.conftest import Live, wait_active


@pytest.fixture(scope="module")
def qpod(admin: httpx.Client) -> dict:
    r = admin.post("/v1/clusters", json={"name": "qpod"})
    assert r.status_code == 201, r.text
    return wait_active(admin, "qpod")


def test_openapi_names_the_queue_operations(admin: httpx.Client) -> None:
    spec = admin.get("/openapi.json").json()
    ops = {op["operationId"]: path for path, item in spec["paths"].items() for op in item.values()
           if isinstance(op, dict) and "operationId" in op}
    assert ops["CreateQueue"] == ops["ListQueues"] == "/v1/clusters/{cluster}/queues"
    assert ops["DescribeQueue"] == ops["UpdateQueue"] == ops["DeleteQueue"] == "/v1/clusters/{cluster}/queues/{queue}"
    assert ops["DescribeJobArray"] == "/v1/job-arrays/{array}"


def test_queue_lifecycle_and_errors(admin: httpx.Client, qpod: dict) -> None:
    r = admin.post("/v1/clusters/qpod/queues", json={"name": "team-a", "nominal": 16, "cohort": "lab"})
    assert r.status_code == 201, r.text
    assert r.json()["nominal"] == 16 and r.json()["capacity"] == 16
    r = admin.post("/v1/clusters/qpod/queues", json={"name": "team-a", "nominal": 16})
    assert r.status_code == 409 and r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == "conflict"
    r = admin.post("/v1/clusters/qpod/queues", json={"name": "x", "nominal": 4, "reclaim": "sometimes"})
    assert r.status_code == 400 and r.json()["code"] == "invalid-input"
    r = admin.post("/v1/clusters/qpod/queues", json={"name": "y", "nominal": 8, "lending_limit": 9})
    assert r.status_code == 422 and "lending_limit (9) exceeds nominal (8)" in r.json()["detail"]
    r = admin.patch("/v1/clusters/qpod/queues/team-a", json={"borrowing_limit": 4})
    assert r.status_code == 200 and r.json()["borrowing_limit"] == 4
    names = [q["name"] for q in admin.get("/v1/clusters/qpod/queues").json()["queues"]]
    assert names == ["default", "team-a"]
    assert admin.get("/v1/clusters/qpod/queues/nope").status_code == 404
    j = admin.post("/v1/clusters/qpod/jobs", json={"model": "tiny", "chips": 8, "steps": 10**6, "queue": "team-a"})
    assert j.status_code == 201 and j.json()["queue"] == "team-a"
    r = admin.delete("/v1/clusters/qpod/queues/team-a")
    assert r.status_code == 409 and "still has jobs" in r.json()["detail"]
    assert admin.post(f"/v1/jobs/{j.json()['id']}/stop").status_code == 200
    assert admin.delete("/v1/clusters/qpod/queues/team-a").status_code == 200
    r = admin.post("/v1/clusters/qpod/jobs", json={"model": "debug", "chips": 4, "queue": "team-a"})
    assert r.status_code == 404 and r.json()["code"] == "not-found" and r.json()["field"] == "queue"


def test_array_over_http(admin: httpx.Client, qpod: dict) -> None:
    r = admin.post("/v1/clusters/qpod/jobs", json={"model": "tiny", "chips": 4, "steps": 10**6, "array": "0-3%2"})
    assert r.status_code == 201, r.text
    arr = r.json()["array"]
    got = admin.get(f"/v1/job-arrays/{arr['id']}").json()
    assert got["size"] == 4 and got["counts"] == {"RUNNING": 2, "PENDING": 2}
    stopped = admin.post(f"/v1/job-arrays/{arr['id']}/stop").json()
    assert stopped["state"] == "STOPPED"
    assert admin.get("/v1/job-arrays/arr-nope").status_code == 404
    r = admin.post("/v1/clusters/qpod/jobs", json={"model": "debug", "chips": 4, "after_ok": ["nope"]})
    assert r.status_code == 400


def test_a_teams_policy_limits_it_to_its_queues(live: Live, admin: httpx.Client, qpod: dict) -> None:
    for q in ("team-b", "team-c"):
        assert admin.post("/v1/clusters/qpod/queues", json={"name": q, "nominal": 8}).status_code == 201
    assert admin.post("/v1/users", json={"name": "bea", "policies": []}).status_code == 201
    doc = {"Statement": [
        {"Effect": "Allow", "Action": ["Describe*", "List*", "Get*"], "Resource": "*"},
        {"Effect": "Allow", "Action": "SubmitTrainingJob", "Resource": ["cluster/*", "queue/qpod/team-b"]}]}
    assert admin.put("/v1/users/bea/policies/team-b", json=doc).status_code == 200, "policy"
    tok = admin.post("/v1/tokens", json={"name": "bea", "role": "operator"}).json()["token"]
    time.sleep(0.1)
    with httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {tok}"}, timeout=30) as bea:
        ok = bea.post("/v1/clusters/qpod/jobs", json={"model": "debug", "chips": 4, "queue": "team-b"})
        assert ok.status_code == 201, ok.text
        no = bea.post("/v1/clusters/qpod/jobs", json={"model": "debug", "chips": 4, "queue": "team-c"})
        assert no.status_code == 403 and "queue/qpod/team-c" in no.json()["detail"]
        assert bea.post("/v1/clusters/qpod/jobs", json={"model": "debug", "chips": 4}).status_code == 403
        assert bea.post("/v1/clusters/qpod/queues", json={"name": "mine", "nominal": 4}).status_code == 403


def test_cli_queue_and_job_sharing_commands(live: Live, qpod: dict) -> None:
    import json

    from typer.testing import CliRunner

    from podfleet.cli.main import app

    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"]}
    run = CliRunner().invoke
    r = run(app, ["queue", "create", "cli-q", "--cluster", "qpod", "--nominal", "8", "--cohort", "lab",
                  "--borrowing-limit", "4", "--output", "json"], env=env)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["borrowing_limit"] == 4
    r = run(app, ["queue", "update", "cli-q", "--cluster", "qpod", "--borrowing-limit", "none", "--output", "json"],
            env=env)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["borrowing_limit"] is None
    r = run(app, ["queue", "update", "cli-q", "--cluster", "qpod"], env=env)
    assert r.exit_code != 0 and "give at least one of" in r.stderr
    r = run(app, ["queue", "list", "--cluster", "qpod"], env=env)
    assert r.exit_code == 0 and "cli-q" in r.stdout
    r = run(app, ["queue", "create", "bad", "--cluster", "qpod", "--nominal", "4", "--reclaim", "maybe"], env=env)
    assert r.exit_code != 0 and "reclaim" in r.stderr and "Traceback" not in r.stderr
    r = run(app, ["job", "submit", "qpod", "--model", "debug", "--chips", "4", "--steps", "5", "--queue", "cli-q",
                  "--array", "0-2%1", "--output", "json"], env=env)
    assert r.exit_code == 0, r.stderr
    arr = json.loads(r.stdout)
    assert arr["id"].startswith("arr-") and arr["size"] == 3
    r = run(app, ["job", "submit", "qpod", "--model", "debug", "--chips", "4", "--steps", "5",
                  "--after-ok", arr["id"], "--output", "json"], env=env)
    assert r.exit_code == 0, r.stderr
    after = json.loads(r.stdout)
    r = run(app, ["job", "wait", arr["id"], "--timeout", "60", "--output", "json"], env=env)
    assert r.exit_code == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["state"] == "SUCCEEDED"
    r = run(app, ["job", "wait", after["id"], "--timeout", "60", "-q", "--output", "json"], env=env)
    assert r.exit_code == 0, r.stdout + r.stderr
    r = run(app, ["job", "describe", arr["id"]], env=env)
    assert r.exit_code == 0 and "SUCCEEDED" in r.stdout
    r = run(app, ["queue", "delete", "cli-q", "--cluster", "qpod", "--output", "json"], env=env)
    assert r.exit_code == 0, r.stderr


def test_usage_over_http_metrics_and_cli(live: Live, admin: httpx.Client, qpod: dict) -> None:
    import json

    from prometheus_client.parser import text_string_to_metric_families
    from typer.testing import CliRunner

    from podfleet.cli.main import app

    j = admin.post("/v1/clusters/qpod/jobs", json={"model": "tiny", "chips": 4, "steps": 10**6, "team": "ml"}).json()
    time.sleep(0.5)
    admin.post(f"/v1/jobs/{j['id']}/stop")
    r = admin.get("/v1/usage", params={"by": "team"})
    assert r.status_code == 200, r.text
    rows = {row["team"]: row for row in r.json()["rows"]}
    assert rows["ml"]["busy"] > 0 and rows["ml"]["jobs"] == 1
    assert admin.get("/v1/usage", params={"by": "planet"}).status_code == 400
    assert admin.get("/v1/usage", params={"since": time.time() + 3600}).json()["jobs"] == 0
    r = admin.get("/v1/usage", params={"by": "team", "bucket": "1m", "cluster": "qpod"})
    assert r.status_code == 200, r.text
    series = r.json()["series"]
    ml_hours = next(g["chip_hours"] for g in series["groups"] if g["name"] == "ml")
    assert series["bucket_s"] == 60 and len(ml_hours) == len(series["t"]) and sum(ml_hours) > 0
    assert admin.get("/v1/usage").json()["series"] is None  # only asked for
    bad = admin.get("/v1/usage", params={"bucket": "7m"})
    assert bad.status_code == 400 and "bucket" in bad.text
    from podfleet.sdk.client import PodfleetClient

    by_queue = PodfleetClient(live.url, live.tokens["viewer"]).get_usage(by="queue", bucket="1h", cluster="qpod")
    assert by_queue["series"]["bucket_s"] == 3600 and "default" in {g["name"] for g in by_queue["series"]["groups"]}
    text = admin.get("/metrics").text
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "podfleet_chip_seconds")
    ml = [s for s in fam.samples if s.labels.get("team") == "ml" and s.labels["kind"] == "busy"]
    assert ml and ml[0].name == "podfleet_chip_seconds_total" and ml[0].value > 0
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["viewer"]}
    out = CliRunner().invoke(app, ["usage", "--by", "team", "--format", "csv"], env=env)
    assert out.exit_code == 0, out.stderr
    assert out.stdout.splitlines()[0] == "team,busy,reserved,lost,chip_hours,jobs" and "\nml," in out.stdout
    out = CliRunner().invoke(app, ["usage", "--since", "1d", "--output", "json"], env=env)
    assert out.exit_code == 0 and json.loads(out.stdout)["by"] == "user"
    out = CliRunner().invoke(app, ["usage", "--since", "yesterday"], env=env)
    assert out.exit_code != 0 and "--since must be" in out.stderr and "Traceback" not in out.stderr


def test_priority_classes_over_http_and_cli(live: Live, admin: httpx.Client, qpod: dict) -> None:
    import json

    from typer.testing import CliRunner

    from podfleet.cli.main import app

    r = admin.post("/v1/priority-classes", json={"name": "batch", "value": 5, "preemption": "never"})
    assert r.status_code == 201, r.text
    assert admin.post("/v1/priority-classes", json={"name": "batch", "value": 5}).json()["code"] == "conflict"
    assert admin.post("/v1/priority-classes", json={"name": "x", "value": 500}).status_code == 400
    j = admin.post("/v1/clusters/qpod/jobs", json={"model": "debug", "chips": 4, "priority": "batch"})
    assert j.status_code == 201 and j.json()["priority"] == 5 and j.json()["priority_class"] == "batch"
    bad = admin.post("/v1/clusters/qpod/jobs", json={"model": "debug", "chips": 4, "priority": "nope"})
    assert bad.status_code == 422 and bad.json()["code"] == "infeasible" and bad.json()["allowed"] == ["batch"]
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"]}
    out = CliRunner().invoke(app, ["priority-class", "create", "hot", "--value", "80", "--output", "json"], env=env)
    assert out.exit_code == 0 and json.loads(out.stdout)["preemption"] == "lower"
    out = CliRunner().invoke(app, ["job", "submit", "qpod", "--model", "debug", "--chips", "4", "--priority", "hot",
                                   "--output", "json"], env=env)
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["priority"] == 80
    out = CliRunner().invoke(app, ["priority-class", "list"], env=env)
    assert out.exit_code == 0 and "batch" in out.stdout and "hot" in out.stdout
    assert admin.delete("/v1/priority-classes/hot").status_code == 200
    assert admin.delete("/v1/priority-classes/hot").status_code == 404
