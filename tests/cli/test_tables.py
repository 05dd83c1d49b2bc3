"""Tables never lose text: every table command, on data with [brackets], :x:, long names
and unicode, prints it whole, one row per line, when piped (CliRunner is a pipe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app
from podfleet.cli.output import OutputFormat, cell, emit, flatten
from tests.api.conftest import Live

runner = CliRunner()
TRICKY = "[attempt 1 rank 0] :x: [bold]loss[/bold] ünïcødé 学习 ^[a-z][a-z0-9-]*$ " + "x" * 150
NAME = "[job] :rocket: ñame-" + "n" * 40


def run(live: Live, *args: str) -> tuple[int, str, str]:
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"]}
    r = runner.invoke(app, list(args), env=env)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def pod(live: Live) -> dict:
    code, out, err = run(live, "cluster", "create", "tbl-pod", "--type", "trn2-node", "-o", "json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def job(live: Live, pod: dict) -> dict:
    # No checkpoints: the job stays RUNNING (a state filter would miss it mid-checkpoint).
    code, out, err = run(live, "job", "submit", "tbl-pod", "--model", "debug", "--chips", "4", "--steps", "10000000",
                         "--checkpoint-interval", "0", "--name", NAME, "-o", "json")
    assert code == 0, err
    j = json.loads(out)
    plane = live.plane
    # A worker's log line and a cluster event carrying every kind of text that markup eats.
    plane.call_sync(lambda: plane.table.log(plane.table.get(j["id"]), TRICKY))
    plane.call_sync(lambda: plane.clusters[pod["id"]].logs.append(plane.now(), TRICKY))
    return j


def _one_line_with(out: str, *needles: str) -> str:
    hits = [ln for ln in out.splitlines() if all(n in ln for n in needles)]
    assert hits, f"no single line holds {needles!r} in:\n{out}"
    return hits[0]


@pytest.mark.parametrize("args", [
    ["job", "list"],
    ["job", "list", "--state", "running"],
    ["job", "describe", "{job}"],
])
def test_job_tables_keep_names_whole(live: Live, job: dict, args: list[str]) -> None:
    code, out, err = run(live, *[a.replace("{job}", job["id"]) for a in args])
    assert code == 0, err
    row = _one_line_with(out, NAME)
    if args[1] == "list":  # names beside ids, on the same line, and the cluster's name
        assert job["id"] in row and "tbl-pod" in row


def test_job_logs_and_cluster_events_print_text_as_is(live: Live, job: dict) -> None:
    code, out, err = run(live, "job", "logs", job["id"])
    assert code == 0, err
    _one_line_with(out, TRICKY)
    code, out, err = run(live, "cluster", "events", "tbl-pod")
    assert code == 0, err
    _one_line_with(out, TRICKY)


def test_hardware_and_cluster_tables_are_not_cut(live: Live, job: dict, pod: dict) -> None:
    code, out, err = run(live, "hardware", "describe", "tbl-pod")
    assert code == 0, err
    _one_line_with(out, job["id"], NAME, "schedulable")
    code, out, err = run(live, "cluster", "list")
    assert code == 0, err
    _one_line_with(out, pod["id"], "tbl-pod", "trn2-node")
    code, out, err = run(live, "cluster", "describe", pod["id"][:12])  # a unique id prefix
    assert code == 0, err
    _one_line_with(out, "deployment.state")


def test_error_text_keeps_brackets(live: Live) -> None:
    # A pattern without words of its own is quoted as it is: rich must not read [1-9] as markup.
    code, out, err = run(live, "job", "submit", "tbl-pod", "--model", "debug", "--chips", "1",
                         "--grad-compression", "powersgd:99")
    assert code == 2 and out == ""
    assert "powersgd:([1-9]|[1-5][0-9]|6[0-4])" in err and len(err.strip().splitlines()) == 1
    code, out, err = run(live, "cluster", "create", "Bad_Name")
    assert code == 2 and "names are lowercase" in err and "try 'bad-name'" in err


def test_state_filter_any_case_and_bad_state(live: Live, job: dict) -> None:
    code, out, _ = run(live, "job", "list", "--state", "Running", "-o", "json")
    assert code == 0 and job["id"] in [j["id"] for j in json.loads(out)]
    code, _, err = run(live, "job", "list", "--state", "runing")
    assert code == 2 and "RUNNING" in err


def test_chip_commands_and_delete_needs_yes(live: Live, pod: dict, job: dict) -> None:
    code, out, err = run(live, "chip", "cordon", "tbl-pod", "15", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["mode"] == "cordoned"
    code, out, err = run(live, "chip", "uncordon", "tbl-pod", "15")
    assert code == 0 and _one_line_with(out, "schedulable")
    code, _, err = run(live, "chip", "repair", "tbl-pod", "15")
    assert code == 4 and "nothing to repair" in err
    code, _, err = run(live, "cluster", "delete", "tbl-pod")
    assert code == 2 and "--yes" in err
    code, out, _ = run(live, "cluster", "describe", "tbl-pod", "-o", "json")
    assert json.loads(out)["state"] == "active"


def test_version_and_short_help() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.startswith("podfleet ")
    r = runner.invoke(app, ["job", "-h"])
    assert r.exit_code == 0 and "wait" in r.stdout


def test_emit_on_a_narrow_pipe_keeps_every_character(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"id": "job-" + "0" * 30, "name": NAME, "message": TRICKY}]
    emit(rows, OutputFormat.table, columns=["id", "name", "message"])
    out = capsys.readouterr().out
    _one_line_with(out, rows[0]["id"], NAME, TRICKY)
    emit({"name": NAME, "deployment": {"state": "done", "steps": 4}}, OutputFormat.table)
    out = capsys.readouterr().out
    _one_line_with(out, "deployment.state", "done")
    _one_line_with(out, NAME)


@pytest.mark.parametrize("key,value,text", [
    ("hbm_used_bytes", 70195183616, "65.4 GiB"),
    ("tokens_per_s", 48_612.0, "48.6k/s"),
    ("created_at", 1_764_547_200.0, "2025-12-01T00:00:00Z"),
    ("queue_wait_p50_s", 4000.0, "1h06m40s"),
    ("loss", 1.796e9, "1.8G"),
    ("chips", 64, "64"),
    ("spare", True, "yes"),
    ("allocation", {"chips": [1, 2], "shape": [2]}, "chips=1, 2, shape=2"),
])
def test_cells_are_in_human_units(key: str, value: object, text: str) -> None:
    assert cell(value, key) == text


def test_flatten_names_nested_fields() -> None:
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": []}) == {"a.b": 1, "a.c.d": 2, "e": []}


def test_job_wait_exit_code_and_metrics_formats(live: Live, pod: dict) -> None:
    code, out, err = run(live, "job", "submit", "tbl-pod", "--model", "debug", "--chips", "2", "--steps", "200",
                         "--checkpoint-interval", "0", "-o", "json")
    assert code == 0, err
    jid = json.loads(out)["id"]
    code, out, err = run(live, "job", "wait", jid, "--timeout", "60", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["state"] == "SUCCEEDED"
    code, out, err = run(live, "job", "metrics", jid, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["points"] and json.loads(out)["points"][-1]["step_last"] > 0
    code, out, _ = run(live, "job", "metrics", jid, "--format", "csv")
    rows = out.strip().splitlines()
    assert rows[0].startswith("time,step_first,step_last,loss") and len(rows) >= 2
    code, out, err = run(live, "job", "metrics", jid, "--format", "plot")
    assert code == 0 and "loss" in out, err


def test_job_wait_times_out_with_124(live: Live, job: dict) -> None:
    code, out, _ = run(live, "job", "wait", job["id"], "--timeout", "0.5", "-o", "json")
    assert code == 124 and json.loads(out)["state"] == "RUNNING"


def test_watch_prints_only_changes_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    from podfleet.cli.follow import watch

    seq = iter([[{"id": "a", "state": "RUNNING"}], [{"id": "a", "state": "RUNNING"}],
                [{"id": "a", "state": "SUCCEEDED"}]])
    watch(lambda: next(seq), OutputFormat.table, columns=["id", "state"], interval_s=0.0, rounds=3)
    out = capsys.readouterr().out
    assert out.count("RUNNING") == 1 and out.count("SUCCEEDED") == 1


def test_named_profile_gives_url_and_token(live: Live, pod: dict, tmp_path: Path) -> None:
    tok = tmp_path / "lab.token"
    tok.write_text(live.tokens["viewer"] + "\n")
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[profiles.lab]\nurl = "{live.url}"\ntoken_file = "{tok}"\n')
    env = {"PODFLEET_CONFIG": str(cfg), "PODFLEET_URL": None, "PODFLEET_TOKEN": None}
    r = runner.invoke(app, ["--profile", "lab", "cluster", "list", "-o", "json"], env=env)
    assert r.exit_code == 0, r.stderr
    assert pod["id"] in [c["id"] for c in json.loads(r.stdout)]
    r = runner.invoke(app, ["--profile", "nope", "cluster", "list"], env=env)
    assert r.exit_code == 3 and "profiles: lab" in r.stderr
