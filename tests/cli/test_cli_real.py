"""The CLI driving a ``local`` cluster end to end: create, submit, kill a worker, recover,
logs, delete; and the CLI's refusals for kill-worker."""

from __future__ import annotations

import json
import time

import pytest

from tests.api.conftest import Live
from tests.cli.test_cli import run


def _describe(live: Live, job_id: str) -> dict:
    code, out, err = run(live, "job", "describe", job_id, "-o", "json")
    assert code == 0, err
    return json.loads(out)


def _until(cond, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s"
        time.sleep(0.2)


@pytest.mark.realproc
def test_local_cluster_end_to_end(live: Live) -> None:
    code, out, err = run(live, "cluster", "create", "cli-local", "--fabric", "local", "--chips", "3",
                         "--spares", "1", "-o", "json")
    assert code == 0, err
    cl = json.loads(out)
    assert cl["state"] == "active" and cl["chips"] == 3 and cl["fabric"] == "local"
    code, out, err = run(live, "job", "submit", "cli-local", "--model", "debug", "--chips", "2", "--steps", "40",
                         "--checkpoint-interval", "10", "--option", "step_delay_s=0.05", "--option",
                         "global_batch=4", "--option", "seq_len=32", "-o", "json")
    assert code == 0, err
    jid = json.loads(out)["id"]
    _until(lambda: _describe(live, jid)["progress"]["step"] >= 3)
    code, out, err = run(live, "fault", "inject", "cli-local", "--kill-worker", "5", "-o", "json")
    assert code == 3 and "0-1" in err  # a rank the job does not have: not found, like a chip past the cluster
    code, out, err = run(live, "fault", "inject", "cli-local", "--kill-worker", "1", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["job_id"] == jid  # the only running job: --job not needed
    _until(lambda: _describe(live, jid)["state"] in ("SUCCEEDED", "FAILED"))
    done = _describe(live, jid)
    assert done["state"] == "SUCCEEDED", done["reason"]
    assert done["progress"]["loss"] is not None and done["runtime"]["infra_failures"] == 1
    code, out, _ = run(live, "job", "logs", jid)
    assert code == 0 and "kill-worker" in out and "RECOVERING" in out and "torch ready" in out
    # A killed worker is no chip fault: its slot stays in service (nothing to repair), and
    # a 2-chip job runs again.
    code, out, _ = run(live, "hardware", "describe", "cli-local", "-o", "json")
    chips = json.loads(out)["chips"]
    assert [c["state"] for c in chips] == ["healthy"] * len(chips)
    assert done["runtime"]["recoveries"][0]["mechanism"] == "rank-move"
    code, out, _ = run(live, "cluster", "events", "cli-local")
    assert "no longer a spare" in out  # the rank moved onto the spare: it was not a spare while it ran
    recoveries = [a for a in live.store.iter_audit() if a.action == "Recovery" and a.target == jid]
    assert recoveries and {a.actor for a in recoveries} == {"system:recovery"}
    code, out, err = run(live, "chip", "repair", "cli-local", "0", "-o", "json")
    assert code != 0 and "healthy: nothing to repair" in err
    code, out, err = run(live, "job", "submit", "cli-local", "--model", "debug", "--chips", "2", "--steps", "5",
                         "--checkpoint-interval", "0", "--option", "global_batch=4", "--option", "seq_len=32",
                         "-o", "json")
    assert code == 0, err
    code, out, err = run(live, "job", "wait", json.loads(out)["id"], "--timeout", "90", "-o", "json")
    assert code == 0, (out, err)
    code, out, err = run(live, "cluster", "delete", "cli-local", "--yes", "-o", "json")
    assert code == 0, err


def test_kill_worker_refusals(live: Live) -> None:
    code, _, err = run(live, "cluster", "create", "cli-twin", "--type", "custom", "--chips", "4", "--fabric", "sim")
    assert code == 0, err
    code, _, err = run(live, "fault", "inject", "cli-twin", "--kill-worker", "0")
    assert code == 2 and "needs a cluster of worker processes" in err
    code, _, err = run(live, "fault", "inject", "cli-twin", "--kill-worker", "0", "--chip", "1")
    assert code == 2 and "--kill-worker takes no" in err
    code, _, err = run(live, "fault", "inject", "cli-twin")
    assert code == 2 and "--kill-worker R" in err
    code, _, err = run(live, "job", "submit", "cli-twin", "--chips", "1")
    assert code == 2 and "--model" in err
    code, _, err = run(live, "job", "submit", "cli-twin", "--model", "no-such-model", "--chips", "1")
    assert code == 2 and "llama3-8b" in err  # the twin's presets are listed


@pytest.mark.realproc
def test_local_drain_moves_the_rank_and_cordons(live: Live) -> None:
    code, out, err = run(live, "cluster", "create", "cli-drain", "--fabric", "local", "--chips", "3",
                         "--spares", "1", "-o", "json")
    assert code == 0, err
    code, out, err = run(live, "job", "submit", "cli-drain", "--model", "debug", "--chips", "2", "--steps", "100000",
                         "--checkpoint-interval", "5", "--option", "step_delay_s=0.05", "--option", "global_batch=4",
                         "--option", "seq_len=32", "-o", "json")
    assert code == 0, err
    jid = json.loads(out)["id"]
    _until(lambda: _describe(live, jid)["progress"]["step"] >= 6)
    chip = _describe(live, jid)["allocation"]["chips"][1]
    code, out, err = run(live, "chip", "drain", "cli-drain", str(chip), "-o", "json")
    assert code == 0, err
    assert json.loads(out)["mode"] == "draining"

    def moved() -> bool:
        d = _describe(live, jid)
        return d["state"] == "RUNNING" and chip not in d["allocation"]["chips"]

    _until(moved)
    _until(lambda: json.loads(run(live, "cluster", "describe", "cli-drain", "-o", "json")[1])["cordoned"] == [chip])
    code, out, err = run(live, "cluster", "delete", "cli-drain", "--yes", "-o", "json")
    assert code == 0, err


def test_maintenance_cli_refusals(live: Live) -> None:
    code, _, err = run(live, "cluster", "create", "cli-mt", "--type", "custom", "--chips", "2", "--fabric", "sim")
    assert code == 0, err
    code, _, err = run(live, "maintenance", "run", "cli-mt", "--command", "true", "--unit", "rack")
    assert code == 2 and "chip or host" in err
    code, _, err = run(live, "maintenance", "run", "cli-mt", "--command", "true", role="operator")
    assert code == 5 and "\n" not in err.strip()  # admin only: one line
    code, _, err = run(live, "maintenance", "run", "cli-mt", "--command", "true")
    assert code == 4 and "maintenance rollouts are not available" in err  # this plane was built without them
    code, _, err = run(live, "maintenance", "resume", "cli-mt", "mt-0001")
    assert code == 4, err
