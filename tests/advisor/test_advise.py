"""Advice: candidates from the running state, proven by rehearsal with and without the
action, and applying it (audited; stale advice refused)."""

from __future__ import annotations

import pytest

from podfleet.advisor import advise
from podfleet.errors import ConflictError, NotFoundError
from tests.advisor.conftest import Pod


def fragment(pod: Pod) -> str:
    """Seven 8-chip jobs, four stopped in a checkerboard, then a 32-chip job: it waits."""
    fill = [pod.plane.jobs.submit("pod", {"name": f"f{i}", "model": "llama3-8b", "chips": 8, "steps": 10**6,
                                          "checkpoint_interval": 20})["id"] for i in range(7)]
    pod.run(60)
    for i in (0, 2, 4, 6):
        pod.plane.jobs.stop(fill[i])
    pod.run(30)
    big = pod.plane.jobs.submit("pod", {"name": "big", "model": "llama3-8b", "chips": 32, "steps": 10**6,
                                        "checkpoint_interval": 20})["id"]
    pod.run(30)
    assert pod.plane.jobs.describe(big)["state"] == "PENDING"
    return str(big)


def test_a_healthy_pod_gets_no_candidates(pod: Pod) -> None:
    pod.submit(32)
    assert advise.candidates(pod.plane, "pod") == []


def test_a_fragmented_pod_is_consolidated_and_the_rehearsal_proves_it(pod: Pod) -> None:
    big = fragment(pod)
    (c,) = advise.candidates(pod.plane, "pod")
    assert c.kind == "consolidate" and c.job_id == big and c.whole_cluster
    assert c.action["op"] == "requeue-jobs" and len(c.action["jobs"]) == 3
    rec = advise.prove(c, seed=1)
    assert rec is not None and rec.predicted_gain >= advise.MIN_GAIN
    reh = rec.evidence["rehearsal"]
    assert reh["tokens_with"] > reh["tokens_without"] > 0
    # Applying it places the waiting job; every job runs again (audited).
    book = advise.AdviceBook()
    book.keep([rec])
    out = book.apply(pod.plane, rec.id, actor="alice")
    assert len(out["result"]["submitted"]) == 3
    pod.run(30)
    assert pod.plane.jobs.describe(big)["state"] == "RUNNING"
    assert ("ApplyRecommendation", "ok") in [(a.action, a.result) for a in pod.plane.store.list_audit(limit=1000)]


def test_an_explicit_layout_the_planner_prices_lower_is_a_replan_candidate(pod: Pod) -> None:
    view = pod.plane.jobs.submit("pod", {"name": "tp16", "model": "llama3-8b", "chips": 32, "steps": 10**6,
                                         "checkpoint_interval": 20, "parallelism": {"tp": 16, "pp": 1, "dp": 2}})
    pod.run(60)
    kinds = {c.kind: c for c in advise.candidates(pod.plane, "pod")}
    c = kinds["replan"]
    assert c.job_id == view["id"] and c.action == {"op": "restart-job",
                                                   "changes": {"parallelism": {"tp": 1, "pp": 1, "dp": 32}}}
    assert c.evidence["planner_step_s"] < c.evidence["modelled_step_s"]
    assert len(c.evidence["tp_group_spans_axes"]) >= 2  # a 16-way group leaves one 4-chip line
    # Whether it is shown is the rehearsal's call: the gain it measures, nothing else.
    without = advise.rehearse(c, act=False, seed=1)
    with_action = advise.rehearse(c, act=True, seed=1)
    assert without is not None and with_action is not None and without > 0
    rec = advise.prove(c, seed=1)
    assert (rec is None) == ((with_action - without) / without < advise.MIN_GAIN)


def _rec(pod: Pod, chip: int) -> advise.Recommendation:
    rt = pod.plane.resolve("pod")
    return advise.Recommendation("adv-0123456789", "move-straggler", "t", {}, {
        "op": "drain-chip", "cluster_id": rt.id, "chip": chip}, 0.05, 0.9, 3600.0, "tuning-throughput",
        advise.fingerprint(rt))


def test_apply_drains_the_chip_and_is_audited(pod: Pod) -> None:
    chips = pod.submit(32)
    book = advise.AdviceBook()
    book.keep([_rec(pod, chips[0])])
    out = book.apply(pod.plane, "adv-0123456789", actor="alice")
    assert out["applied"]["chip"] == chips[0]
    assert pod.plane.resolve("pod").modes.mode(chips[0]).value in ("draining", "cordoned")
    actions = [(a.action, a.result) for a in pod.plane.store.list_audit(limit=1000)]
    assert ("ApplyRecommendation", "ok") in actions
    with pytest.raises(NotFoundError):  # applied once: gone
        book.apply(pod.plane, "adv-0123456789", actor="alice")


def test_stale_advice_is_refused_with_a_sentence(pod: Pod) -> None:
    chips = pod.submit(32)
    book = advise.AdviceBook()
    book.keep([_rec(pod, chips[0])])
    pod.plane.inject_fault("pod", "chip-failure", chip=chips[7])  # the state moves on
    pod.run(30)
    with pytest.raises(ConflictError, match="stale"):
        book.apply(pod.plane, "adv-0123456789", actor="alice")
    assert pod.plane.resolve("pod").modes.mode(chips[0]).value == "schedulable"
    with pytest.raises(NotFoundError, match="run podfleet advise"):
        book.apply(pod.plane, "adv-ffffffffff", actor="alice")


def test_apply_restarts_a_job_with_the_change(pod: Pod) -> None:
    old = pod.plane.jobs.submit("pod", {"name": "tp16", "model": "llama3-8b", "chips": 32, "steps": 10**6,
                                        "checkpoint_interval": 20, "parallelism": {"tp": 16, "pp": 1, "dp": 2}})["id"]
    pod.run(60)
    rt = pod.plane.resolve("pod")
    rec = advise.Recommendation("adv-00000000aa", "replan", "t", {}, {
        "op": "restart-job", "changes": {"parallelism": {"tp": 1, "pp": 1, "dp": 32}}, "cluster_id": rt.id,
        "job_id": old}, 0.5, 0.8, 3600.0, "configuring-parallelism", advise.fingerprint(rt))
    book = advise.AdviceBook()
    book.keep([rec])
    out = book.apply(pod.plane, rec.id, actor="alice")
    assert out["result"]["stopped"] == old and pod.plane.jobs.describe(old)["state"] == "STOPPED"
    pod.run(30)
    new = pod.plane.jobs.describe(out["result"]["submitted"])
    assert new["state"] == "RUNNING" and new["parallelism"] == {"tp": 1, "pp": 1, "dp": 32}
    assert new["name"] == "tp16" and new["model"] == "llama3-8b"
