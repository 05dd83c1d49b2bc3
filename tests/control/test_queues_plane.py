"""Queues, reclaim, dependencies and arrays in the control plane, on the twin in virtual
time: team B borrows idle team A's chips and gives them back (checkpointed and
requeued) when A submits; an after-ok chain and an array run in order; queues survive a
restart."""

from __future__ import annotations

import pytest

from podfleet.control import ControlPlane
from podfleet.errors import ConflictError, InfeasibleError, InvalidInputError, NotFoundError
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster, advance, make_plane

LONG = {"model": "tiny", "steps": 10**6, "checkpoint_interval": 100}
SHORT = {"model": "debug", "steps": 10}


def two_teams(plane: ControlPlane, reclaim: str = "any") -> None:
    active_cluster(plane)
    plane.queues.create("pod", {"name": "team-a", "nominal": 32, "cohort": "research", "reclaim": reclaim}, actor="t")
    plane.queues.create("pod", {"name": "team-b", "nominal": 32, "cohort": "research"}, actor="t")


def test_borrowed_chips_come_back_when_their_owner_has_work(plane: ControlPlane) -> None:
    two_teams(plane)
    b = [plane.jobs.submit("pod", {**LONG, "chips": 16, "queue": "team-b"}, actor="t") for _ in range(4)]
    assert all(j["state"] == "RUNNING" for j in b)  # b borrows all 32 of a's idle chips
    q = plane.queues.describe("pod", "team-b")
    assert (q["used"], q["borrowed"]) == (64, 32)
    assert plane.queues.describe("pod", "team-a")["lent"] == 32
    advance(plane, 60)
    a = plane.jobs.submit("pod", {**LONG, "chips": 32, "queue": "team-a", "priority": 10}, actor="t")
    advance(plane, 1)
    a = plane.jobs.describe(a["id"])
    assert a["state"] == "RUNNING", a["reason"]
    victims = [plane.jobs.describe(j["id"]) for j in b if plane.jobs.describe(j["id"])["state"] == "PENDING"]
    assert len(victims) == 2  # exactly the 32 borrowed chips came back
    for v in victims:
        assert v["checkpoint_step"] > 0  # checkpointed on demand, resumes from there
        assert v["scheduling"]["preemptions"] == 1
        log = "\n".join(line["message"] for line in plane.jobs.job_logs(v["id"]).since(0))
        assert "queue 'team-a' reclaims chips lent to queue 'team-b'" in log
        assert "cannot borrow" in v["reason"]  # a's chips are a's while it has work
    assert plane.queues.describe("pod", "team-a")["used"] == 32
    assert plane.queues.describe("pod", "team-b")["borrowed"] == 0
    # A finishes: b borrows again.
    plane.jobs.stop(a["id"], actor="t")
    advance(plane, 1)
    assert all(plane.jobs.describe(v["id"])["state"] == "RUNNING" for v in victims)


def test_reclaim_never_keeps_the_borrower_running(plane: ControlPlane) -> None:
    two_teams(plane, reclaim="never")
    b = plane.jobs.submit("pod", {**LONG, "chips": 64, "queue": "team-b"}, actor="t")
    a = plane.jobs.submit("pod", {**LONG, "chips": 16, "queue": "team-a", "priority": 90}, actor="t")
    advance(plane, 1)
    assert plane.jobs.describe(b["id"])["state"] == "RUNNING"
    assert "its reclaim policy is never" in plane.jobs.describe(a["id"])["reason"]


def test_queue_commands_validate_and_name_the_problem(plane: ControlPlane) -> None:
    active_cluster(plane)
    plane.queues.create("pod", {"name": "a", "nominal": 8}, actor="t")
    with pytest.raises(ConflictError, match="queue 'a' already exists"):
        plane.queues.create("pod", {"name": "a", "nominal": 8}, actor="t")
    with pytest.raises(InvalidInputError, match="nominal 65 exceeds the 64 chips"):
        plane.queues.create("pod", {"name": "big", "nominal": 65}, actor="t")
    with pytest.raises(InvalidInputError, match="nominal is required"):
        plane.queues.create("pod", {"name": "x"}, actor="t")
    with pytest.raises(NotFoundError, match=r"queue 'nope' not found on cluster pod \(queues: a, default\)"):
        plane.jobs.submit("pod", {**SHORT, "chips": 4, "queue": "nope"}, actor="t")
    j = plane.jobs.submit("pod", {**LONG, "chips": 8, "queue": "a"}, actor="t")
    k = plane.jobs.submit("pod", {**LONG, "chips": 8, "queue": "a"}, actor="t")
    assert "queue 'a' at its nominal quota (used 8 of nominal 8, job asks 8)" in k["reason"]
    up = plane.queues.update("pod", "a", {"nominal": 16}, actor="t")
    assert up["nominal"] == 16 and plane.jobs.describe(k["id"])["state"] == "RUNNING"
    with pytest.raises(ConflictError, match="queue 'a' still has jobs"):
        plane.queues.delete("pod", "a", actor="t")
    plane.jobs.stop(j["id"], actor="t")
    plane.jobs.stop(k["id"], actor="t")
    assert plane.queues.delete("pod", "a", actor="t")["state"] == "deleted"
    with pytest.raises(NotFoundError):
        plane.queues.describe("pod", "a")
    assert [q["name"] for q in plane.queues.list_all("pod")] == ["default"]
    actions = [a.action for a in plane.store.list_audit(limit=100)]
    assert {"CreateQueue", "UpdateQueue", "DeleteQueue"} <= set(actions)


def test_queues_survive_a_restart() -> None:
    store = MemoryStore()
    p1 = make_plane(store)
    two_teams(p1)
    p1.queues.update("pod", "team-b", {"borrowing_limit": 8, "weight": 2}, actor="t")
    p2 = make_plane(store, seed=1)
    p2.load()
    got = {q["name"]: q for q in p2.queues.list_all("pod")}
    assert set(got) == {"default", "team-a", "team-b"}
    assert got["team-b"]["borrowing_limit"] == 8 and got["team-b"]["weight"] == 2.0
    assert got["team-a"]["cohort"] == "research" and got["team-a"]["defined"]
    assert not got["default"]["defined"] and got["default"]["nominal"] is None


def test_after_ok_chain_runs_in_order_and_a_failed_dependency_fails_the_dependent(plane: ControlPlane) -> None:
    active_cluster(plane)
    first = plane.jobs.submit("pod", {**SHORT, "chips": 4}, actor="t")
    second = plane.jobs.submit("pod", {**SHORT, "chips": 4, "after_ok": [first["id"]]}, actor="t")
    third = plane.jobs.submit("pod", {**SHORT, "chips": 4, "after_any": [second["id"]]}, actor="t")
    assert second["state"] == "PENDING"
    assert second["reason"] == f"Dependency: waiting for {first['id']} ({first['state']}) (after-ok)"
    assert third["reason"].startswith(f"Dependency: waiting for {second['id']}")
    advance(plane, 120)
    views = [plane.jobs.describe(j["id"]) for j in (first, second, third)]
    assert [v["state"] for v in views] == ["SUCCEEDED"] * 3
    ends = [v["timestamps"]["SUCCEEDED"] for v in views]
    starts = [v["timestamps"]["RUNNING"] for v in views]
    assert ends[0] <= starts[1] and ends[1] <= starts[2]
    # A dependency that can never be met.
    doomed = plane.jobs.submit("pod", {**LONG, "chips": 4}, actor="t")
    after = plane.jobs.submit("pod", {**SHORT, "chips": 4, "after_ok": [doomed["id"]]}, actor="t")
    plane.jobs.stop(doomed["id"], actor="t")
    advance(plane, 1)
    v = plane.jobs.describe(after["id"])
    assert v["state"] == "FAILED"
    assert v["reason"] == f"DependencyNeverSatisfied: {doomed['id']} ended STOPPED (after-ok needs it to succeed)"
    with pytest.raises(NotFoundError, match="after_ok: job job-nope not found"):
        plane.jobs.submit("pod", {**SHORT, "chips": 4, "after_ok": ["job-nope"]}, actor="t")


def test_array_runs_at_most_its_limit_at_once(plane: ControlPlane) -> None:
    active_cluster(plane)
    out = plane.jobs.submit("pod", {**SHORT, "chips": 4, "array": "0-7%2", "name": "sweep"}, actor="t")
    arr = out["array"]
    assert arr["size"] == 8 and arr["limit"] == 2 and arr["counts"] == {"RUNNING": 2, "PENDING": 6}
    held = [j for j in arr["jobs"] if j["state"] == "PENDING"]
    assert held[0]["reason"].startswith(f"JobArrayTaskLimit: 2 of 2 members of {arr['id']}")
    most = 0
    for _ in range(240):
        advance(plane, 0.5)
        now = plane.jobs.describe_array(arr["id"])
        most = max(most, now["counts"].get("RUNNING", 0))
        if now["ended"]:
            break
    assert now["state"] == "SUCCEEDED" and most == 2
    members = [plane.jobs.describe(j["id"]) for j in now["jobs"]]
    assert [m["array_index"] for m in members] == list(range(8))
    assert members[3]["name"] == "sweep[3]"
    # After-ok on an array waits for every member.
    after = plane.jobs.submit("pod", {**SHORT, "chips": 4, "after_ok": [arr["id"]]}, actor="t")
    assert after["state"] == "RUNNING"


def test_stop_an_array_stops_every_member(plane: ControlPlane) -> None:
    active_cluster(plane)
    out = plane.jobs.submit("pod", {**LONG, "chips": 4, "array": "0-3%1"}, actor="t")
    view = plane.jobs.stop_array(out["array"]["id"], actor="t")
    assert view["state"] == "STOPPED" and view["counts"] == {"STOPPED": 4}
    with pytest.raises(ConflictError, match="already ended"):
        plane.jobs.stop_array(out["array"]["id"], actor="t")
    with pytest.raises(InvalidInputError, match="array range '9-1' runs backwards"):
        plane.jobs.submit("pod", {**SHORT, "chips": 4, "array": "9-1"}, actor="t")
    with pytest.raises(InvalidInputError, match="array 'x' must be indices and ranges"):
        plane.jobs.submit("pod", {**SHORT, "chips": 4, "array": "x"}, actor="t")
    with pytest.raises(InvalidInputError, match="array_id is set by the control plane"):
        plane.jobs.submit("pod", {**SHORT, "chips": 4, "array_id": "arr-x"}, actor="t")


def test_held_jobs_are_held_again_after_a_restart() -> None:
    store = MemoryStore()
    p1 = make_plane(store)
    active_cluster(p1)
    first = p1.jobs.submit("pod", {**LONG, "chips": 4}, actor="t")
    dep = p1.jobs.submit("pod", {**SHORT, "chips": 4, "after_ok": [first["id"]]}, actor="t")
    arr = p1.jobs.submit("pod", {**LONG, "chips": 4, "array": "0-2%1"}, actor="t")["array"]
    p2 = make_plane(store, seed=1)
    p2.load()
    advance(p2, 1)
    assert p2.jobs.describe(dep["id"])["reason"].startswith(f"Dependency: waiting for {first['id']}")
    assert p2.jobs.describe_array(arr["id"])["counts"] == {"RUNNING": 1, "PENDING": 2}


def test_priority_classes_name_a_value_and_a_preemption_policy() -> None:
    from podfleet.store.memory import MemoryStore as Mem

    store = Mem()
    plane = make_plane(store)
    active_cluster(plane)
    plane.priorities.create({"name": "urgent", "value": 90}, actor="t")
    plane.priorities.create({"name": "polite", "value": 90, "preemption": "never"}, actor="t")
    with pytest.raises(ConflictError):
        plane.priorities.create({"name": "urgent", "value": 1}, actor="t")
    with pytest.raises(InvalidInputError, match="value must be an integer 0-100"):
        plane.priorities.create({"name": "huge", "value": 101}, actor="t")
    low = plane.jobs.submit("pod", {**LONG, "chips": 64, "priority": 10}, actor="t")
    advance(plane, 1000)  # past the preemption plugin's min_run_s
    nice = plane.jobs.submit("pod", {**LONG, "chips": 16, "priority": "polite"}, actor="t")
    assert nice["priority"] == 90 and nice["priority_class"] == "polite"
    advance(plane, 1)
    assert "its priority class never preempts" in plane.jobs.describe(nice["id"])["reason"]
    assert plane.jobs.describe(low["id"])["state"] == "RUNNING"
    hurry = plane.jobs.submit("pod", {**LONG, "chips": 16, "priority": "urgent"}, actor="t")
    advance(plane, 1)
    assert plane.jobs.describe(hurry["id"])["state"] == "RUNNING"
    assert plane.jobs.describe(low["id"])["state"] == "PENDING"  # preempted by the urgent one
    with pytest.raises(InfeasibleError, match="unknown priority class 'nope'; valid: polite, urgent"):
        plane.jobs.submit("pod", {**SHORT, "chips": 4, "priority": "nope"}, actor="t")
    assert plane.jobs.submit("pod", {**SHORT, "chips": 4, "priority": "7"}, actor="t")["priority"] == 7
    p2 = make_plane(store, seed=1)
    p2.load()
    assert [c["name"] for c in p2.priorities.list_all()] == ["polite", "urgent"]
    p2.priorities.delete("polite", actor="t")
    assert [c["name"] for c in p2.priorities.list_all()] == ["urgent"]


def test_reclaim_moves_a_job_within_quota_out_of_the_block_on_the_twin(plane: ControlPlane) -> None:
    # b (nominal 24) and c (nominal 8) fill the pod with 4-chip jobs; one of b's jobs within
    # quota ends and c's next borrower takes its chips, so a job within quota sits in every
    # 32-chip block and preempting borrowers alone frees none.
    active_cluster(plane)
    for name, nominal in (("a", 32), ("b", 24), ("c", 8)):
        plane.queues.create("pod", {"name": name, "nominal": nominal, "cohort": "lab"}, actor="t")

    def sub(q: str, chips: int = 4) -> dict:
        return plane.jobs.submit("pod", {**LONG, "chips": chips, "queue": q}, actor="t")

    jobs = [sub("b") for _ in range(6)] + [sub("c") for _ in range(8)] + [sub("b") for _ in range(2)]
    advance(plane, 60)
    plane.jobs.stop(jobs[0]["id"], actor="t")
    advance(plane, 1)
    jobs.append(sub("c"))
    advance(plane, 60)
    before = {j["id"]: plane.jobs.describe(j["id"]) for j in jobs[1:]}
    assert all(v["state"] == "RUNNING" for v in before.values())
    a = sub("a", 32)
    advance(plane, 1)
    a = plane.jobs.describe(a["id"])
    assert a["state"] == "RUNNING", a["reason"]
    logs = {j: "\n".join(ln["message"] for ln in plane.jobs.job_logs(j).since(0)) for j in before}
    moved = [j for j, log in logs.items() if f"moved by {a['id']}" in log]
    assert moved, "no job was moved: the layout no longer needs a move"
    block = set(a["allocation"]["chips"])
    for j in moved:
        v = plane.jobs.describe(j)
        # Not a preemption: still running, never requeued, resumed from its on-demand checkpoint.
        assert v["state"] == "RUNNING" and "preemptions" not in v["scheduling"], v
        assert v["checkpoint_step"] > 0 and v["progress"]["step"] >= v["checkpoint_step"]
        assert not set(v["allocation"]["chips"]) & block
        assert v["allocation"]["chips"] != before[j]["allocation"]["chips"]
        assert "writing an on-demand checkpoint" in logs[j]  # its write was charged
    for q, nominal in (("b", 24), ("c", 8)):
        assert plane.queues.describe("pod", q)["used"] >= nominal  # victims were borrowers only
    victims = [j for j in before if plane.jobs.describe(j)["state"] == "PENDING"]
    assert victims and not set(victims) & set(moved)


def test_a_queue_command_whose_commit_fails_leaves_memory_as_it_was(
        plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> None:
    # mutate_then_apply: a create applies nothing, a delete puts the queue back.
    active_cluster(plane)
    plane.queues.create("pod", {"name": "a", "nominal": 8}, actor="t")

    def failing_audit(**_kw: object) -> None:
        raise RuntimeError("audit write failed")

    monkeypatch.setattr(plane.store, "append_audit", failing_audit)
    with pytest.raises(RuntimeError, match="audit write failed"):
        plane.queues.create("pod", {"name": "b", "nominal": 8}, actor="t")
    with pytest.raises(RuntimeError, match="audit write failed"):
        plane.queues.delete("pod", "a", actor="t")
    monkeypatch.undo()
    rt = plane.clusters[plane.resolve("pod").id]
    assert sorted(rt.scheduler.queues.specs) == ["a", "default"]
    assert [q["name"] for q in plane.queues.list_all("pod")] == ["a", "default"]
    assert plane.queues.describe("pod", "a")["defined"] is True
