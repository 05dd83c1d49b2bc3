"""Queues, cohorts, borrowing, lending and reclaim (``scheduler.queues`` and its plugins)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from podfleet.errors import ConflictError, InvalidInputError
from podfleet.hardware.catalog import get_topology
from podfleet.scheduler import DecisionKind, JobPhase, JobRequest, Scheduler
from podfleet.scheduler.queues import Holder, QueueBook, QueueSpec, plan_reclaim, with_defaults

POD = get_topology("trn2-ultraserver")


def two_teams(reclaim: str = "any", **b: object) -> Scheduler:
    return Scheduler(POD, queues=[QueueSpec("a", 32, cohort="c", reclaim=reclaim),
                                  QueueSpec("b", 32, cohort="c", **b)])  # type: ignore[arg-type]


def bind_all(s: Scheduler, now: float) -> dict[str, DecisionKind]:
    return {d.job_id: d.kind for d in s.schedule(now_s=now)}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"name": "Bad Name", "nominal": 1}, "name"),
    ({"name": "q", "nominal": -1}, "nominal"),
    ({"name": "q", "nominal": 4, "lending_limit": 5}, "lending_limit"),
    ({"name": "q", "nominal": 4, "weight": 0}, "weight"),
    ({"name": "q", "nominal": 4, "reclaim": "sometimes"}, "reclaim"),
    ({"name": "q", "nominal": None, "cohort": "c"}, "nominal"),
])
def test_bad_queue_specs_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as e:  # InfeasibleError (cross-field, 422) is one too
        QueueSpec(**kwargs)
    assert e.value.field == field


def test_no_queues_schedules_as_before() -> None:
    s = Scheduler(POD)
    s.submit(JobRequest("j", 64))
    assert bind_all(s, 0) == {"j": DecisionKind.BIND}
    assert s.queues.usage("default") == 64


def test_queue_without_cohort_waits_at_nominal_with_numbers() -> None:
    s = Scheduler(POD, queues=[QueueSpec("a", 16)])
    s.submit(JobRequest("j1", 16, queue="a"))
    s.submit(JobRequest("j2", 8, queue="a"))
    assert bind_all(s, 0) == {"j1": DecisionKind.BIND}
    assert "queue 'a' at its nominal quota (used 16 of nominal 16, job asks 8)" in s.reason("j2")


def test_job_larger_than_its_queue_can_ever_hold_is_rejected() -> None:
    s = Scheduler(POD, queues=[QueueSpec("a", 16, cohort="c", borrowing_limit=8), QueueSpec("b", 32, cohort="c")])
    d = s.submit(JobRequest("j", 32, queue="a"))
    assert d.kind is DecisionKind.REJECTED and "can hold at most 24 (nominal 16 + 8 it can borrow)" in str(d.status)
    d = s.submit(JobRequest("k", 8, queue="nope"))
    assert d.kind is DecisionKind.REJECTED and "queue 'nope' does not exist" in str(d.status)


def test_borrowing_respects_borrowing_and_lending_limits() -> None:
    s = Scheduler(POD, queues=[QueueSpec("a", 32, cohort="c", lending_limit=8),
                               QueueSpec("b", 16, cohort="c", borrowing_limit=16)])
    s.submit(JobRequest("b1", 16, queue="b"))
    s.submit(JobRequest("b2", 8, queue="b"))  # borrows 8 of a's lendable 8
    s.submit(JobRequest("b3", 4, queue="b"))  # a lends no more
    got = bind_all(s, 0)
    assert set(got) == {"b1", "b2"}
    assert "cannot borrow 12 chips: cohort 'c' has 0 idle chips to lend" in s.reason("b3")
    assert s.queues.lent("a") == 8 and s.queues.borrowed("b") == 8


def test_reclaim_preempts_the_borrower_with_the_reason() -> None:
    s = two_teams()
    for i in range(4):
        s.submit(JobRequest(f"b{i}", 16, queue="b", priority=5), now_s=0)
    assert bind_all(s, 0) == {f"b{i}": DecisionKind.BIND for i in range(4)}  # b borrows all of a's 32
    assert s.queues.borrowed("b") == 32
    s.submit(JobRequest("a1", 16, queue="a", priority=1), now_s=10)
    [d] = s.schedule(now_s=10)
    assert d.kind is DecisionKind.PREEMPT and len(d.victims) == 1
    victim = s.jobs[d.victims[0]]
    assert victim.request.queue == "b" and victim.phase is JobPhase.CHECKPOINTING
    assert victim.preempt_reason == "queue 'a' reclaims chips lent to queue 'b'"
    d2 = s.victims_checkpointed("a1", {d.victims[0]: 7}, now_s=11)
    assert d2.kind is DecisionKind.BIND
    assert s.jobs[d.victims[0]].phase is JobPhase.PENDING and s.jobs[d.victims[0]].resume_step == 7
    # b is back to 48 (16 borrowed); a uses 16 of its own and still lends 16: the requeued
    # job may borrow them again only within that.
    assert s.queues.usage("a") == 16 and s.queues.usage("b") == 48
    assert bind_all(s, 12) == {}
    assert "cannot borrow" in s.reason(d.victims[0])


def test_reclaim_policy_never_and_lower_priority() -> None:
    s = two_teams(reclaim="never")
    s.submit(JobRequest("b0", 64, queue="b", priority=1), now_s=0)
    s.schedule(now_s=0)
    s.submit(JobRequest("a1", 16, queue="a", priority=9), now_s=1)
    assert s.schedule(now_s=1) == []
    assert "cannot reclaim: its reclaim policy is never" in s.reason("a1")
    s = two_teams(reclaim="lower-priority")
    s.submit(JobRequest("b0", 64, queue="b", priority=5), now_s=0)
    s.schedule(now_s=0)
    s.submit(JobRequest("a1", 16, queue="a", priority=5), now_s=1)
    assert s.schedule(now_s=1) == []
    assert "no job of a borrowing queue" in s.reason("a1")
    s.submit(JobRequest("a2", 16, queue="a", priority=6), now_s=2)
    [d] = s.schedule(now_s=2)
    assert d.job_id == "a2" and d.victims == ("b0",)


def test_a_queue_within_nominal_is_never_reclaimed_from() -> None:
    s = Scheduler(POD, queues=[QueueSpec("a", 32, cohort="c"), QueueSpec("b", 32, cohort="c"),
                               QueueSpec("x", 0)])
    s.submit(JobRequest("b0", 32, queue="b"), now_s=0)
    s.submit(JobRequest("a0", 16, queue="a"), now_s=0)
    s.schedule(now_s=0)
    # a asks more of its nominal; the only other holder of chips is b, within its nominal.
    s.submit(JobRequest("a1", 16, queue="a"), now_s=1)
    s.submit(JobRequest("big", 16, queue="a"), now_s=1)
    got = bind_all(s, 1)
    assert got == {"a1": DecisionKind.BIND}
    assert s.jobs["b0"].phase is JobPhase.RUNNING


def test_delete_a_queue_with_jobs_is_a_conflict() -> None:
    s = Scheduler(POD, queues=[QueueSpec("a", 8)])
    s.submit(JobRequest("j", 8, queue="a"))
    with pytest.raises(ConflictError, match="queue 'a' still has jobs: j"):
        s.remove_queue("a")
    s.finish("j")
    s.remove_queue("a")
    assert s.queues.get("a") is None


# --- properties --------------------------------------------------------------------------
QUEUES = ("a", "b", "c", "d")
queue_specs = hs.lists(
    hs.tuples(hs.integers(0, 32), hs.none() | hs.integers(0, 32), hs.none() | hs.integers(0, 32),
              hs.sampled_from(["never", "lower-priority", "any"])),
    min_size=4, max_size=4)
ops = hs.lists(hs.tuples(hs.sampled_from(["submit", "finish", "checkpoint"]), hs.sampled_from(QUEUES),
                         hs.sampled_from([1, 2, 4, 8, 16]), hs.integers(0, 3)), min_size=1, max_size=40)


def _specs(raw: list) -> list[QueueSpec]:
    return [QueueSpec(q, n, cohort="c", borrowing_limit=b, lending_limit=None if lend is None else min(lend, n),
                      reclaim=r) for q, (n, b, lend, r) in zip(QUEUES, raw, strict=True)]


def _check_invariants(s: Scheduler) -> None:
    book = s.queues
    for q in QUEUES:
        spec = book.get(q)
        assert spec is not None and spec.nominal is not None
        held = sum(r.request.chips for r in s.jobs.values()
                   if r.request.queue == q and r.phase in (JobPhase.RUNNING, JobPhase.NOMINATED))
        limit = spec.nominal + (spec.borrowing_limit if spec.borrowing_limit is not None else 10**9)
        assert held <= limit, f"queue {q} holds {held} > nominal + borrowing limit {limit}"
    # What the cohort borrows fits what its lenders may lend (each within its lending limit),
    # counting the jobs that run or were admitted (victims still checkpointing are leaving).
    used = {q: sum(r.request.chips for r in s.jobs.values()
                   if r.request.queue == q and r.phase in (JobPhase.RUNNING, JobPhase.NOMINATED)) for q in QUEUES}
    assert book.overdraw(used, [book.get(q) for q in QUEUES]) == 0  # type: ignore[misc]


@settings(max_examples=60, deadline=None)
@given(queue_specs, ops, hs.booleans())
def test_quota_invariants_hold_under_any_workload(raw: list, steps: list, movable: bool) -> None:
    s = Scheduler(POD, queues=_specs(raw))
    n = 0
    for now, (op, q, chips, prio) in enumerate(steps):
        before = {j: (r.request.queue, r.phase) for j, r in s.jobs.items()}
        if op == "submit":
            s.submit(JobRequest(f"j{n}", chips, queue=q, priority=prio, movable=movable), now_s=now)
            n += 1
        elif op == "finish":
            live = [j for j, r in s.jobs.items() if r.phase is JobPhase.RUNNING and r.request.queue == q]
            if live:
                s.finish(live[0], now_s=now)
        for d in s.schedule(now_s=now):
            if d.kind is DecisionKind.PREEMPT:
                # A reclaim never preempts a job of a queue within its nominal quota.
                pre = s.jobs[d.job_id]
                for v in d.victims:
                    vq = s.jobs[v].request.queue
                    if vq != pre.request.queue and s.jobs[v].request.priority >= pre.request.priority:
                        spec = s.queues.get(vq)
                        assert spec is not None and spec.nominal is not None
                        held = sum(r.request.chips for j, r in s.jobs.items()
                                   if r.request.queue == vq and before.get(j, ("", None))[1] is JobPhase.RUNNING)
                        assert held > spec.nominal, f"reclaimed from {vq} within its nominal quota"
                d2 = s.victims_checkpointed(d.job_id, {v: 0 for v in d.victims}, now_s=now)
                # Jobs moved out of the block (within quota) are never victims and stay running.
                for m, _ in d2.detail.get("moves", ()):
                    assert m not in d.victims and s.jobs[m].phase is JobPhase.RUNNING
                    pre_moves = s.jobs[m].preemptions
                    s.moved(d.job_id, m, now_s=now)
                    assert s.jobs[m].phase is JobPhase.RUNNING and s.jobs[m].preemptions == pre_moves
        _check_invariants(s)


@settings(max_examples=200, deadline=None)
@given(queue_specs, hs.lists(hs.tuples(hs.sampled_from(QUEUES), hs.integers(1, 16), hs.integers(0, 3)),
                             max_size=12), hs.sampled_from(QUEUES), hs.integers(1, 16), hs.integers(0, 3))
def test_plan_reclaim_takes_only_from_borrowing_queues(raw: list, holders: list, q: str, chips: int,
                                                       prio: int) -> None:
    book: QueueBook = with_defaults(_specs(raw))
    hs_ = [Holder(f"h{i}", hq, c, p, float(i)) for i, (hq, c, p) in enumerate(holders)]
    for h in hs_:
        book.charge(h.queue, h.chips)
    victims = plan_reclaim(book, q, chips, prio, [], hs_)
    if victims is None:
        return
    used = dict(book.used)
    by_id = {h.job_id: h for h in hs_}
    for v in victims:
        h = by_id[v]
        spec = book.get(h.queue)
        assert spec is not None and spec.nominal is not None and h.queue != q
        assert used[h.queue] > spec.nominal  # it borrowed when it was taken
        used[h.queue] -= h.chips
    used[q] = used.get(q, 0) + chips
    assert book.overdraw(used, [book.get(x) for x in QUEUES]) == 0  # type: ignore[misc]


# --- fair share ------------------------------------------------------------------------------
def test_decayed_usage_halves_every_half_life() -> None:
    book = with_defaults([QueueSpec("a", 8, cohort="c"), QueueSpec("b", 8, cohort="c")])
    book.half_life_s = 100.0
    book.charge("a", 8)
    book.advance(100.0)  # 8 chips for one half-life: 8 * (100/ln 2) * (1 - 1/2)
    first = book.history["a"]
    assert first == pytest.approx(8 * 100 / 0.693147 * 0.5, rel=1e-5)
    book.release("a", 8)
    book.advance(200.0)
    assert book.history["a"] == pytest.approx(first / 2)
    # a has all the cohort's usage at half its weight: 2^(-1/0.5) = 0.25; b unused: 1.
    assert book.fair_share("a") == pytest.approx(0.25) and book.fair_share("b") == 1.0


def test_fair_share_orders_equal_priority_jobs_of_a_cohort() -> None:
    s = Scheduler(POD, queues=[QueueSpec("a", 32, cohort="c"), QueueSpec("b", 32, cohort="c")])
    s.submit(JobRequest("a-old", 64, queue="a"), now_s=0)
    s.schedule(now_s=0)
    s.finish("a-old", now_s=3600)  # a used the whole pod for an hour; b nothing
    s.submit(JobRequest("a-new", 64, queue="a"), now_s=3600)
    s.submit(JobRequest("b-new", 64, queue="b"), now_s=3601)  # later, same priority
    [d] = s.schedule(now_s=3601)
    assert d.job_id == "b-new"
    views = {q: s.queues.view(q) for q in ("a", "b")}
    assert views["a"]["fair_share"] < views["b"]["fair_share"] and views["b"]["share"] == 1.0


def test_borrowers_pack_at_the_high_end_owners_at_the_low_end() -> None:
    import numpy as np

    from podfleet.scheduler.plugins.borrow_packing import high_end

    assert list(high_end(np.array([[0, 1], [62, 63]]), 64)) == pytest.approx([100 * 0.5 / 63, 100 * 62.5 / 63])
    s = Scheduler(POD, queues=[QueueSpec("a", 32, cohort="c"), QueueSpec("b", 16, cohort="c")])
    s.submit(JobRequest("b1-own", 16, queue="b"), now_s=0)
    s.submit(JobRequest("b2-borrowed", 16, queue="b"), now_s=0)  # b's second 16 chips are a's
    got = {d.job_id: d.placement for d in s.schedule(now_s=0) if d.placement is not None}
    assert max(got["b1-own"].local_chips) < min(got["b2-borrowed"].local_chips)


def test_reclaim_holds_a_block_when_jobs_within_quota_sit_in_every_block() -> None:
    # b (nominal 24) and c (nominal 8) hold 32 chips each, in 4-chip jobs laid out so that
    # every 32-chip block has b chips other than exactly b's 8 borrowed ones: no block can
    # be freed by preempting borrowers alone.
    s = Scheduler(POD, queues=[QueueSpec("a", 32, cohort="c"), QueueSpec("b", 24, cohort="c"),
                               QueueSpec("c", 8, cohort="c")])
    b_groups = {0, 2, 4, 7, 10, 11, 12, 14}
    for k in range(16):
        q = "b" if k in b_groups else "c"
        s.submit(JobRequest(f"{q}{k}", 4, queue=q), now_s=0)
        s.adopt(f"{q}{k}", range(4 * k, 4 * k + 4), now_s=0)
    assert s.queues.borrowed("b") == 8 and s.queues.borrowed("c") == 24
    s.submit(JobRequest("a0", 32, queue="a"), now_s=100)
    [d] = s.schedule(now_s=100)
    assert d.kind is DecisionKind.PREEMPT
    nom = s.jobs["a0"].nomination
    assert nom is not None and nom.awaited and not set(nom.awaited) & set(d.victims)
    # The victims leave every queue at or above its nominal quota; the awaited are not preempted.
    for q, nominal in (("b", 24), ("c", 8)):
        assert 32 - 4 * sum(1 for v in d.victims if s.jobs[v].request.queue == q) >= nominal
    assert all(s.jobs[j].phase is JobPhase.RUNNING for j in nom.awaited)
    d2 = s.victims_checkpointed("a0", dict.fromkeys(d.victims, 1), now_s=101)
    assert d2.kind is DecisionKind.PREEMPT and "waiting for" in s.reason("a0")
    # The block's freed chips are held for a0: a requeued borrower is not placed on them.
    block = set(nom.local_chips)
    for b in s.schedule(now_s=102):
        assert b.placement is None or not set(b.placement.local_chips) & block
    for j in nom.awaited:
        s.finish(j, now_s=200)
    d3 = s.victims_checkpointed("a0", {}, now_s=200)
    assert d3.kind is DecisionKind.BIND and d3.placement is not None
    assert set(d3.placement.local_chips) == block


def _fragmented(movable: bool) -> Scheduler:
    """b (nominal 24) and c (nominal 8) hold the pod in 4-chip jobs laid out so that every
    32-chip block holds b chips beyond b's 8 borrowed ones (the layout of the test above)."""
    s = Scheduler(POD, queues=[QueueSpec("a", 32, cohort="c"), QueueSpec("b", 24, cohort="c"),
                               QueueSpec("c", 8, cohort="c")])
    b_groups = {0, 2, 4, 7, 10, 11, 12, 14}
    for k in range(16):
        q = "b" if k in b_groups else "c"
        s.submit(JobRequest(f"{q}{k}", 4, queue=q, movable=movable), now_s=0)
        s.adopt(f"{q}{k}", range(4 * k, 4 * k + 4), now_s=0)
    return s


def test_reclaim_moves_jobs_within_quota_out_of_the_block_instead_of_waiting() -> None:
    s = _fragmented(movable=True)
    s.submit(JobRequest("a0", 32, queue="a"), now_s=100)
    [d] = s.schedule(now_s=100)
    assert d.kind is DecisionKind.PREEMPT
    nom = s.jobs["a0"].nomination
    assert nom is not None and nom.moves and not nom.awaited
    moved = {m.job_id for m in nom.moves}
    block = set(nom.local_chips)
    # A move is not a preemption: the moved jobs are no victims, their targets lie outside the block.
    assert not moved & set(d.victims)
    for m in nom.moves:
        assert not set(m.local_chips) & block and len(m.local_chips) == s.jobs[m.job_id].request.chips
    # Every victim's queue borrowed when it was taken (b and c stay at or above nominal).
    for q, nominal in (("b", 24), ("c", 8)):
        assert 32 - 4 * sum(1 for v in d.victims if s.jobs[v].request.queue == q) >= nominal
    d2 = s.victims_checkpointed("a0", dict.fromkeys(d.victims, 1), now_s=101)
    assert d2.kind is DecisionKind.PREEMPT and "out of the block" in s.reason("a0")
    moves = dict(d2.detail["moves"])
    assert set(moves) == moved
    # The targets are kept for the move: a requeued borrower is not placed on them or the block.
    kept = block | {c for m in nom.moves for c in m.local_chips}
    for b in s.schedule(now_s=102):
        assert b.placement is None or not set(b.placement.local_chips) & kept
    for j in sorted(moved):
        d3 = s.moved("a0", j, now_s=103)
    assert d3.kind is DecisionKind.BIND and d3.placement is not None and set(d3.placement.local_chips) == block
    for m in nom.moves:
        r = s.jobs[m.job_id]
        assert r.phase is JobPhase.RUNNING and r.preemptions == 0 and r.moves == 1
        assert r.placement is not None and r.placement.local_chips == m.local_chips
        assert r.placement.shape in {sh.shape for sh in s.cluster.blocks.shapes}  # its new block's
    for q, nominal in (("b", 24), ("c", 8)):
        assert s.queues.usage(q) >= nominal


def test_jobs_that_cannot_be_moved_are_awaited_and_a_stray_move_is_a_conflict() -> None:
    s = _fragmented(movable=False)  # e.g. a fabric without on-demand checkpoints
    s.submit(JobRequest("a0", 32, queue="a"), now_s=100)
    [d] = s.schedule(now_s=100)
    nom = s.jobs["a0"].nomination
    assert d.kind is DecisionKind.PREEMPT and nom is not None and nom.awaited and not nom.moves
    with pytest.raises(ConflictError, match="is not being moved"):
        s.moved("a0", nom.awaited[0], now_s=101)
