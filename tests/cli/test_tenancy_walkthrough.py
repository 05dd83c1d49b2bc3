"""Issue 31's "Done when", through the CLI on a twin pod: two teams' queues in a cohort,
team B borrowing idle team A's chips, A reclaiming them within the reclaim goal (120 s
virtual, the on-demand checkpoint included) with B's borrowing job checkpointed and
requeued, usage per team, and an array and a dependency chain run in order."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from tests.api.conftest import Live
from tests.cli.test_cli import run

RECLAIM_GOAL_S = 120.0  # issue 31's goal, virtual seconds
LONG = ("--model", "debug", "--steps", "1000000", "--checkpoint-interval", "1000")


def cli(live: Live, *args: str) -> Any:
    code, out, err = run(live, *args, "-o", "json")
    assert code == 0, err
    return json.loads(out)


def until(live: Live, job_id: str, states: set[str], wall_s: float = 30.0) -> dict:
    deadline = time.monotonic() + wall_s
    while time.monotonic() < deadline:
        d = cli(live, "job", "describe", job_id)
        if d["state"] in states:
            return d
        time.sleep(0.05)
    raise AssertionError(f"{job_id} never reached {states}: {d['state']} ({d.get('reason')})")


def test_two_teams_share_a_pod_through_the_cli(live: Live) -> None:
    cli(live, "cluster", "create", "share-pod", "--type", "trn2-ultraserver", "--spares", "0")
    for q in ("team-a", "team-b"):
        cli(live, "queue", "create", q, "--cluster", "share-pod", "--nominal", "32", "--cohort", "lab")
    # A idles; B runs its own 32 chips and borrows A's 32.
    b = [cli(live, "job", "submit", "share-pod", *LONG, "--chips", "32", "--queue", "team-b", "--team", "b")
         for _ in range(2)]
    for j in b:
        until(live, j["id"], {"RUNNING"})
    qa = cli(live, "queue", "describe", "team-a", "--cluster", "share-pod")
    qb = cli(live, "queue", "describe", "team-b", "--cluster", "share-pod")
    assert qa["lent"] == 32 and qb["borrowed"] == 32, (qa, qb)

    t0 = live.plane.now()
    a = cli(live, "job", "submit", "share-pod", *LONG, "--chips", "32", "--queue", "team-a", "--team", "a")
    until(live, a["id"], {"RUNNING"})
    waited = live.plane.now() - t0
    assert waited <= RECLAIM_GOAL_S, f"A got its chips back after {waited:.1f} s virtual"
    views = [cli(live, "job", "describe", j["id"]) for j in b]
    moved = [v for v in views if v["state"] != "RUNNING"]
    assert len(moved) == 1, [(v["state"], v["reason"]) for v in views]
    victim = moved[0]
    assert victim["state"] in {"QUEUED", "PENDING", "CHECKPOINTING"}, victim["state"]
    assert victim["scheduling"]["preemptions"] == 1, victim["scheduling"]
    code, logs, _ = run(live, "job", "logs", victim["id"])
    assert code == 0 and "reclaims chips lent to queue 'team-b'" in logs, logs
    assert cli(live, "queue", "describe", "team-b", "--cluster", "share-pod")["borrowed"] == 0

    rows = cli(live, "usage", "--by", "team", "--cluster", "share-pod")
    rows = rows["rows"] if isinstance(rows, dict) else rows
    by_team = {r["team"]: r for r in rows}
    assert {"a", "b"} <= set(by_team), rows
    assert by_team["b"]["busy"] > 0

    for j in (*b, a):
        cli(live, "job", "stop", j["id"])
    # An array of three, one at a time, then a job after it.
    arr = cli(live, "job", "submit", "share-pod", "--model", "debug", "--steps", "200", "--chips", "4",
              "--queue", "team-a", "--array", "0-2%1")
    after = cli(live, "job", "submit", "share-pod", "--model", "debug", "--steps", "200", "--chips", "4",
                "--queue", "team-b", "--after-ok", arr["id"])
    first = cli(live, "job", "describe", after["id"])
    waits_on = {m["id"] for m in cli(live, "job", "describe", arr["id"])["jobs"]}
    if first["state"] == "PENDING":  # the twin may have run the whole array by now
        assert "after-ok" in first["reason"] and any(m in first["reason"] for m in waits_on), first["reason"]
    until(live, after["id"], {"SUCCEEDED", "FAILED"}, wall_s=60)
    members = [cli(live, "job", "describe", m["id"]) for m in cli(live, "job", "describe", arr["id"])["jobs"]]
    assert [m["state"] for m in members] == ["SUCCEEDED"] * 3, members
    last = cli(live, "job", "describe", after["id"])
    assert last["state"] == "SUCCEEDED", last["reason"]
    # In order, whatever the wall clock did: one member at a time (%1), the dependent after all.
    spans = sorted((m["timestamps"]["RUNNING"], m["timestamps"]["SUCCEEDED"]) for m in members)
    assert all(done <= nxt for (_s, done), (nxt, _e) in itertools.pairwise(spans)), spans
    assert last["timestamps"]["RUNNING"] >= spans[-1][1], (last["timestamps"], spans)
