"""Advice: candidates from the running state, proven by rehearsal with and without the
action, and applying it (audited; stale advice refused)."""

from __future__ import annotations

import pytest

from podfleet.errors import ConflictError, NotFoundError
from podfleet.ops import advise
from tests.ops.conftest import Pod


def plant_degraded_link(pod: Pod) -> tuple[list[int], str]:
    chips = pod.submit(32)
    topo = pod.plane.resolve("pod").topology
    lk = next(lk for lk in topo.links if lk.src in chips and lk.dst in chips)
    name = f"{min(lk.src, lk.dst)}-{max(lk.src, lk.dst)}"
    pod.plane.inject_fault("pod", "link-flap", link=name)
    pod.run(120)
    return chips, name


def test_a_healthy_pod_gets_no_candidates(pod: Pod) -> None:
    pod.submit(32)
    assert advise.candidates(pod.plane, "pod") == []


def test_a_degraded_link_inside_a_job_is_rehearsed_with_and_without_the_drain(pod: Pod) -> None:
    chips, name = plant_degraded_link(pod)
    (c,) = advise.candidates(pod.plane, "pod")
    assert c.kind == "move-off-degraded-link" and c.evidence["link"] == name
    assert c.evidence["hardware_error"]["fault"] == "link-flap"
    assert chips[c.ranks[0]] == c.chip and c.chips == 32
    without = advise._rehearse(c, act=False, seed=0)
    with_drain = advise._rehearse(c, act=True, seed=0)
    assert without is not None and with_drain is not None and without > 0
    rec = advise.prove(c)
    gain = (with_drain - without) / without
    # Shown only when the rehearsal predicts at least MIN_GAIN, with that gain.
    assert (rec is None) == (gain < advise.MIN_GAIN)
    if rec is not None:
        assert rec.predicted_gain == pytest.approx(gain)


def _rec(pod: Pod, chip: int) -> advise.Recommendation:
    rt = pod.plane.resolve("pod")
    return advise.Recommendation("adv-0123456789", "move-off-degraded-link", "t", {}, {
        "op": "drain-chip", "cluster_id": rt.id, "chip": chip}, 0.05, 0.9, 3600.0, "troubleshooting-a-link",
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
