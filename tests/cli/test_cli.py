"""The CLI on the SDK against a live server (CliRunner)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app
from tests.api.conftest import Live

runner = CliRunner()


def run(live: Live, *args: str, role: str = "admin") -> tuple[int, str, str]:
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens[role]}
    r = runner.invoke(app, list(args), env=env)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def pod(live: Live) -> dict:
    code, out, err = run(live, "cluster", "create", "cli-pod", "--type", "trn2-ultraserver",
                         "--spares", "2", "--output", "json")
    assert code == 0, err
    return json.loads(out)


def test_cluster_create_waits_and_returns_id(pod: dict) -> None:
    assert pod["id"].startswith("cl-") and pod["state"] == "active"
    assert pod["deployment"]["percent"] == 100


def test_table_mode_shows_progress(live: Live) -> None:
    code, out, err = run(live, "cluster", "create", "cli-table", "--type", "trn2-node")
    assert code == 0, err
    assert "self-test" in err and "100%" in err
    assert "cli-table" in out


def test_list_describe_hardware(live: Live, pod: dict) -> None:
    code, out, _ = run(live, "cluster", "list", "-o", "json")
    assert code == 0 and pod["id"] in [c["id"] for c in json.loads(out)]
    code, out, _ = run(live, "cluster", "describe", "cli-pod", "-o", "json")
    assert json.loads(out)["name"] == "cli-pod"
    code, out, _ = run(live, "hardware", "describe", "cli-pod", "-o", "json")
    hw = json.loads(out)
    assert code == 0 and len(hw["chips"]) == 64 and len(hw["links"]) == 192
    assert {"index", "coords", "state", "spare", "metrics"} <= set(hw["chips"][0])
    assert {"src", "dst", "axis", "state", "metrics"} <= set(hw["links"][0])
    code, out, _ = run(live, "hardware", "describe", "cli-pod", "--chip", "3", "-o", "json")
    assert json.loads(out)["index"] == 3


def test_job_submit_describe_logs_stop(live: Live, pod: dict) -> None:
    code, out, err = run(live, "job", "submit", "cli-pod", "--model", "debug", "--chips", "8",
                         "--steps", "1000000", "--checkpoint-interval", "1000", "--parallelism", "2,1,4",
                         "--priority", "70", "-o", "json")
    assert code == 0, err
    job = json.loads(out)
    assert job["id"].startswith("job-") and job["parallelism"] == {"tp": 2, "pp": 1, "dp": 4}
    code, out, _ = run(live, "job", "describe", job["id"], "-o", "json")
    d = json.loads(out)
    assert d["state"] == "RUNNING" and {"step", "loss", "tokens_per_s"} <= set(d["progress"])
    code, out, _ = run(live, "job", "list", "--cluster", "cli-pod", "-o", "json")
    assert job["id"] in [j["id"] for j in json.loads(out)]
    code, out, _ = run(live, "job", "logs", job["id"])
    assert code == 0 and "RUNNING" in out
    code, out, _ = run(live, "job", "stop", job["id"], "-o", "json")
    assert code == 0 and json.loads(out)["state"] == "STOPPED"
    code, out, _ = run(live, "job", "logs", job["id"], "--follow")
    assert code == 0 and "STOPPED" in out


def test_fault_inject(live: Live, pod: dict) -> None:
    code, out, err = run(live, "fault", "inject", "cli-pod", "--kind", "link-flap", "--link", "0-1", "-o", "json")
    assert code == 0, err and json.loads(out)["kind"] == "link-flap"
    code, _, err = run(live, "fault", "inject", "cli-pod", "--kind", "chip-failure")
    assert code == 2 and "exactly one of --chip" in err


@pytest.mark.parametrize("args,code,needle", [
    (["cluster", "create", "bad", "--spares", "7"], 2, "spares"),
    (["cluster", "create", "bad", "--type", "tpu-pod"], 2, "trn2-ultraserver"),
    (["job", "submit", "cli-pod", "--model", "debug", "--chips", "99"], 2, "1-62"),
    (["job", "submit", "cli-pod", "--model", "debug", "--chips", "8", "--parallelism", "x"], 2, "TP,PP,DP"),
    (["job", "describe", "job-nope"], 3, "not found"),
    (["cluster", "describe", "nope"], 3, "not found"),
    (["fault", "inject", "cli-pod", "--kind", "meteor", "--chip", "1"], 2, "chip-failure"),
])
def test_errors_are_one_line(live: Live, pod: dict, args: list[str], code: int, needle: str) -> None:
    rc, out, err = run(live, *args, "-o", "json")
    assert rc == code, (rc, out, err)
    assert out == ""
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_viewer_cannot_create(live: Live) -> None:
    rc, _, err = run(live, "cluster", "create", "nope", role="viewer")
    assert rc == 5 and "viewer may not CreateTrainiumCluster" in err


def test_no_token(live: Live) -> None:
    r = runner.invoke(app, ["cluster", "list"], env={"PODFLEET_URL": live.url, "PODFLEET_TOKEN": ""})
    assert r.exit_code == 5 and "PODFLEET_TOKEN" in r.stderr


def test_audit_list_and_verify(live: Live, pod: dict) -> None:
    rc, out, _ = run(live, "audit", "list", "--all", "-o", "json")
    events = json.loads(out)
    assert rc == 0 and any(e["action"] == "CreateTrainiumCluster" for e in events)
    rc, out, _ = run(live, "audit", "verify", "-o", "json")
    assert rc == 0 and json.loads(out)["ok"] is True
    rec = live.store._audit[2]
    saved = rec.target
    live.store.tamper_audit(3, target="cl-forged")
    try:
        rc, out, err = run(live, "audit", "verify", "-o", "json")
        assert rc != 0 and json.loads(out)["ok"] is False
        assert "record 3" in err
    finally:
        rec.target = saved
    assert run(live, "audit", "verify")[0] == 0


def test_token_create_list_revoke(live: Live) -> None:
    code, out, _ = run(live, "token", "create", "grafana", "--role", "viewer", "-o", "json")
    assert code == 0
    issued = json.loads(out)
    assert issued["role"] == "viewer" and issued["token"].startswith("pf_")
    code, out, _ = run(live, "token", "list", "-o", "json")
    assert code == 0 and any(t["id"] == issued["id"] and t.get("token") is None for t in json.loads(out))
    code, _, err = run(live, "token", "create", "x", "--role", "root")
    assert code == 2 and "role" in err and "Traceback" not in err
    code, out, _ = run(live, "token", "revoke", issued["id"], "-o", "json")
    assert code == 0 and json.loads(out)["revoked"] is True
