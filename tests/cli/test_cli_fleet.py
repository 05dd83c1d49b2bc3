"""Issue 28's done-when through the CLI: a 512-chip job on an 8-pod twin cluster, its
allocation on 8 pods of one block with TP inside pods; a chip failure in pod 3 moves one
rank within pod 3 and ``hardware describe --pod 3`` shows it."""

from __future__ import annotations

import json
import time

from tests.api.conftest import Live
from tests.cli.test_cli import run


def _job(live: Live, job_id: str, want: str = "RUNNING") -> dict:
    deadline = time.monotonic() + 30
    while True:
        code, out, err = run(live, "job", "describe", job_id, "-o", "json")
        assert code == 0, err
        job = json.loads(out)
        if job["state"] == want or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def _pod3(live: Live, cluster: str) -> list[dict]:
    code, out, err = run(live, "hardware", "describe", cluster, "--pod", "3", "-o", "json")
    assert code == 0, err
    return json.loads(out)["chips"]


def test_a_512_chip_job_on_an_8_pod_fleet_through_the_cli(live: Live) -> None:
    code, out, err = run(live, "cluster", "create", "fleet-cli", "--type", "trn2-ultraserver", "--pods", "8",
                         "--pods-per-block", "8", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["chips"] == 512
    code, out, err = run(live, "job", "submit", "fleet-cli", "--model", "llama3-70b", "--chips", "512",
                         "--topology-required", "block", "--steps", "100000", "-o", "json")
    assert code == 0, err
    job = _job(live, json.loads(out)["id"])
    alloc = job["allocation"]
    assert alloc["pods"] == list(range(8)) and alloc["blocks"] == [0] * 8, alloc
    tp = job["plan"]["tp"]
    assert all(len({c // 64 for c in alloc["chips"][r:r + tp]}) == 1 for r in range(0, 512, tp))
    deadline = time.monotonic() + 10
    while sum(1 for c in _pod3(live, "fleet-cli") if c["job"] == job["id"]) < 64 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sum(1 for c in _pod3(live, "fleet-cli") if c["job"] == job["id"]) == 64
    code, out, err = run(live, "hardware", "describe", "fleet-cli", "--summary", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["blocks"][0]["busy"] == 512
    code, out, err = run(live, "hardware", "describe", "fleet-cli", "--summary")
    assert code == 0 and "8 pods" in out and "network blocks of 8 pods" in out, (out, err)
    code, out, err = run(live, "hardware", "describe", "fleet-cli", "--pod", "3", "--limit", "16")
    assert code == 0 and "--next-token 208" in out + err, (out, err)


def test_a_chip_failure_in_pod_3_moves_one_rank_within_pod_3(live: Live) -> None:
    # A full 8-pod gang leaves no chip in pod 3 to move to; half of each pod leaves 32.
    code, out, err = run(live, "cluster", "create", "fleet-cli-2", "--type", "trn2-ultraserver", "--pods", "8",
                         "--pods-per-block", "8", "-o", "json")
    assert code == 0, err
    code, out, err = run(live, "job", "submit", "fleet-cli-2", "--model", "llama3-8b", "--pods", "8", "--chips",
                         "256", "--steps", "100000", "--checkpoint-interval", "20", "-o", "json")
    assert code == 0, err
    job = _job(live, json.loads(out)["id"])
    chips = job["allocation"]["chips"]
    victim = next(c for c in chips if c // 64 == 3)
    code, _, err = run(live, "fault", "inject", "fleet-cli-2", "--kind", "chip-failure", "--chip", str(victim))
    assert code == 0, err
    deadline = time.monotonic() + 30
    while True:
        after = _job(live, job["id"])
        moved = after["allocation"]["chips"]
        if (after["state"] == "RUNNING" and moved != chips) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    rank = chips.index(victim)
    assert moved[rank] // 64 == 3 and moved[rank] != victim, (victim, moved[rank])
    assert sum(a != b for a, b in zip(chips, moved, strict=True)) == 1
    pod3 = {c["index"]: c for c in _pod3(live, "fleet-cli-2")}
    deadline = time.monotonic() + 10
    while pod3[moved[rank]]["job"] != job["id"] and time.monotonic() < deadline:
        time.sleep(0.2)
        pod3 = {c["index"]: c for c in _pod3(live, "fleet-cli-2")}
    assert pod3[victim]["state"] != "healthy" and pod3[moved[rank]]["job"] == job["id"]


def test_on_pod_loss_through_the_cli(live: Live) -> None:
    code, out, err = run(live, "cluster", "create", "fleet-cli-3", "--type", "trn2-ultraserver", "--pods", "2",
                         "--pods-per-block", "2", "-o", "json")
    assert code == 0, err
    code, out, err = run(live, "job", "submit", "fleet-cli-3", "--model", "llama3-8b", "--chips", "128",
                         "--on-pod-loss", "later")
    assert code != 0 and "--on-pod-loss must be one of wait, requeue, shrink, got 'later'" in out + err, (out, err)
    assert "Traceback" not in out + err
    code, out, err = run(live, "job", "submit", "fleet-cli-3", "--model", "llama3-8b", "--chips", "128",
                         "--on-pod-loss", "wait", "--steps", "100000", "-o", "json")
    assert code == 0, err
    job = _job(live, json.loads(out)["id"])
    assert job["on_pod_loss"] == "wait"
    code, out, err = run(live, "fault", "inject", "fleet-cli-3", "--kind", "pod-loss")
    assert code != 0 and "--kind pod-loss takes --pod N" in out + err, (out, err)
    code, out, err = run(live, "fault", "inject", "fleet-cli-3", "--kind", "pod-loss", "--pod", "1", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["jobs"] == {job["id"]: "wait"}
    after = _job(live, job["id"], want="RECOVERING")
    assert after["state"] == "RECOVERING" and "waiting for pod 1 to return" in after["reason"], after
