"""Advice (``GetRecommendations``, ``podfleet advise``), each proven in rehearsal first.

A candidate comes from the running state (engine thread, ``candidates``); before it is
shown, the current state is rehearsed twice in virtual time over ``HORIZON_S`` with the
whole control plane (``twin.rehearsal.Rehearsal``, the path ``podfleet sim`` runs): once
as it is and once with the action carried out. ``predicted_gain`` is the relative gain
in training steps the affected job completes; advice under ``MIN_GAIN`` is dropped.

Candidates:

* ``move-off-degraded-link``: a link between two chips of one running job is degraded
  (a flapping link the recovery flow marked degraded runs at half width; jobs keep
  running over it at the pace of their slowest link). Action: drain one of its chips, so
  that rank moves to a spare or free chip and the job's ring no longer crosses the link.
  In the rehearsal the same job (model, size, layout) has a ``link-flap`` injected on the
  link between the same two ranks, and the drain follows once the link is degraded.
  Whether moving the rank pays (the spare may sit farther from the rank's neighbours)
  is what the rehearsal decides.

Every recommendation carries the fingerprint of the state it was made on (chip and
link states, which job holds which chip, chip modes): ``apply`` refuses it once that
state has moved on (``ConflictError``: stale advice).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podfleet.control.plane import ControlPlane
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import ConflictError, NotFoundError
from podfleet.fabric.base import HardwareErrors, LinkState
from podfleet.hardware.faults import FaultKind
from podfleet.ops.verify import active
from podfleet.twin.rehearsal import CLUSTER, Rehearsal
from podfleet.twin.scenario import JobConfig, Scenario

HORIZON_S = 3600.0
MIN_GAIN = 0.02
FAULT_AT_S = 120.0  # rehearsal: the job is running by then
ACT_AFTER_S = 30.0  # rehearsal: the action follows once recovery has marked the link degraded
STEPS = 10**7


def fingerprint(rt: ClusterRuntime) -> str:
    """The state advice depends on: chip and link states, owners, chip modes."""
    h = hashlib.sha256()
    h.update(",".join(str(s) for s in rt.fabric.chip_states()).encode())
    h.update(b"|" + ",".join(str(s) for s in rt.fabric.link_states()).encode())
    h.update(b"|" + repr(sorted(rt.owners.items())).encode())
    h.update(b"|" + repr(rt.modes.to_dict()).encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Candidate:
    """What the engine thread hands the rehearsals: the job's shape and the slow rank."""

    kind: str
    cluster_id: str
    cluster_type: str
    spares: int
    job_id: str
    model: str
    chips: int
    parallelism: Mapping[str, int] | str
    ranks: tuple[int, ...]  # the ranks whose chips the problem sits between (or on)
    chip: int  # the chip the action drains
    evidence: Mapping[str, Any]
    confidence: float
    fingerprint: str


@dataclass(frozen=True)
class Recommendation:
    id: str
    kind: str
    title: str
    evidence: dict[str, Any]
    action: dict[str, Any]
    predicted_gain: float
    confidence: float
    horizon_s: float
    guide: str
    fingerprint: str = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "title": self.title, "evidence": self.evidence,
                "action": self.action, "predicted_gain": round(self.predicted_gain, 4),
                "confidence": self.confidence, "horizon_s": self.horizon_s, "guide": self.guide}


def _job_shape(plane: ControlPlane, job_id: str) -> tuple[str, int, Mapping[str, int] | str, list[int]] | None:
    view = plane.jobs.describe(job_id)
    spec = view.get("spec") or view
    chips = list((view.get("allocation") or {}).get("chips") or [])
    model = spec.get("model")
    if not model or not chips:
        return None
    plan = view.get("plan") or {}
    par: Mapping[str, int] | str = ({"tp": int(plan["tp"]), "pp": int(plan["pp"]), "dp": int(plan["dp"])}
                                    if all(k in plan for k in ("tp", "pp", "dp")) else "auto")
    return str(model), len(chips), par, chips


def candidates(plane: ControlPlane, ref: str) -> list[Candidate]:
    """Degraded links inside running jobs (engine thread)."""
    rt = active(plane, ref)
    fab = rt.fabric
    links = [LinkState(s) for s in fab.link_states()]
    errors = fab.hardware_errors() if isinstance(fab, HardwareErrors) else []
    fp = fingerprint(rt)
    free = [c for c in rt.replacement_chips() if c not in rt.owners]
    out: list[Candidate] = []
    seen: set[str] = set()
    for i, st in enumerate(links):
        if st != LinkState.DEGRADED or not free:
            continue
        lk = rt.topology.links[i]
        job_id = rt.owners.get(lk.src)
        if job_id is None or rt.owners.get(lk.dst) != job_id or job_id in seen:
            continue
        shape = _job_shape(plane, job_id)
        if shape is None:
            continue
        model, n, par, chips = shape
        if lk.src not in chips or lk.dst not in chips:
            continue
        seen.add(job_id)
        name = f"{min(lk.src, lk.dst)}-{max(lk.src, lk.dst)}"
        reported = [e for e in errors if e.link == i]
        ev: dict[str, Any] = {"link": name, "state": st.value, "job_id": job_id,
                              "ranks": [chips.index(lk.src), chips.index(lk.dst)], "free_chips": len(free)}
        if reported:
            ev["hardware_error"] = {"fault": reported[-1].detail.get("fault"), "t": round(reported[-1].t, 3)}
        out.append(Candidate("move-off-degraded-link", rt.id, rt.spec.type, len(rt.spares), job_id, model, n, par,
                             (chips.index(lk.src), chips.index(lk.dst)), lk.src, ev,
                             0.9 if reported else 0.7, fp))
    return out


def _link_between(r: Rehearsal, a: int, b: int) -> int | None:
    for lk in r.topology.links:
        if {lk.src, lk.dst} == {a, b}:
            return lk.index
    return None


def _rehearse(c: Candidate, *, act: bool, seed: int) -> int | None:
    """Steps the job completes over the horizon, with or without the action; None when
    the rehearsal cannot place the same two ranks on neighbouring chips."""
    sc = Scenario(name=f"advice-{c.kind}", seed=seed, pod_type=c.cluster_type, duration=FAULT_AT_S + HORIZON_S,
                  fault_rates="none", spares=c.spares,
                  jobs=[JobConfig(id="job", model=c.model, chips=c.chips, steps=STEPS, checkpoint_interval=50,
                                  parallelism=dict(c.parallelism) if isinstance(c.parallelism, Mapping) else "auto")])
    r = Rehearsal(sc)
    placed: dict[str, int] = {}

    def chips_now() -> list[int]:
        return list((r.plane.jobs.describe(r.job_ids["job"]).get("allocation") or {}).get("chips") or [])

    def fault() -> None:
        chips = chips_now()
        a, b = (chips[k] if k < len(chips) else -1 for k in c.ranks)
        link = _link_between(r, a, b)
        if link is None:
            return
        placed["link"] = link
        r.plane.inject_fault(CLUSTER, FaultKind.LINK_FLAP.value, link=r.link_name(link), actor="advice-rehearsal")

    def drain() -> None:
        chips = chips_now()
        if "link" in placed and c.ranks[0] < len(chips):
            r.plane.chip_command(CLUSTER, int(chips[c.ranks[0]]), "drain", actor="advice-rehearsal")

    r.tl.call_at(FAULT_AT_S, fault)
    if act:
        r.tl.call_at(FAULT_AT_S + ACT_AFTER_S, drain)
    report = r.run()
    if "link" not in placed:
        return None
    job = next(j for j in report["jobs"] if j["job_id"] == "job")
    return int(job["step"] or 0)


def prove(c: Candidate, *, seed: int = 0) -> Recommendation | None:
    """Rehearse ``c`` with and without its action (seconds of wall time: off the engine)."""
    base = _rehearse(c, act=False, seed=seed)
    with_action = _rehearse(c, act=True, seed=seed)
    if base is None or with_action is None or base <= 0:
        return None
    gain = (with_action - base) / base
    if gain < MIN_GAIN:
        return None
    rid = "adv-" + hashlib.sha256(f"{c.cluster_id}|{c.kind}|{c.chip}|{c.fingerprint}".encode()).hexdigest()[:10]
    evidence = {**c.evidence, "rehearsal": {"horizon_s": HORIZON_S, "steps_without": base, "steps_with": with_action,
                                            "stand_in": "link-flap between the same two ranks of a job of the same "
                                                        "model, size and layout"}}
    link = c.evidence.get("link")
    return Recommendation(rid, c.kind, f"job {c.job_id} runs over degraded link {link}: drain chip {c.chip} so rank "
                          f"{c.ranks[0]} moves off it", evidence,
                          {"op": "drain-chip", "cluster_id": c.cluster_id, "chip": c.chip},
                          gain, c.confidence, HORIZON_S, "troubleshooting-a-link", c.fingerprint)


class AdviceBook:
    """The recommendations last made per cluster (the API keeps one book)."""

    def __init__(self) -> None:
        self.made: dict[str, Recommendation] = {}

    def keep(self, recs: Sequence[Recommendation]) -> None:
        for r in recs:
            self.made[r.id] = r

    def apply(self, plane: ControlPlane, rec_id: str, *, actor: str) -> dict[str, Any]:
        """Carry a recommendation out (engine thread); refused when its state moved on."""
        rec = self.made.get(rec_id)
        if rec is None:
            raise NotFoundError(f"recommendation {rec_id!r} not found; run podfleet advise CLUSTER first",
                                field="recommendation")
        ref = str(rec.action["cluster_id"])
        rt = plane.resolve(ref)
        now = fingerprint(rt)
        if now != rec.fingerprint:
            plane.audit(actor, "ApplyRecommendation", rec_id, "error:stale", {"made_on": rec.fingerprint, "now": now})
            raise ConflictError(f"recommendation {rec_id} is stale: the cluster's chips, links or jobs changed "
                                f"since it was made; run podfleet advise {ref} again", field="recommendation")
        view = plane.chip_command(ref, int(rec.action["chip"]), "drain", actor=actor)
        plane.audit(actor, "ApplyRecommendation", rec_id, "ok", {"action": rec.action,
                                                                  "predicted_gain": rec.predicted_gain})
        del self.made[rec_id]
        return {"id": rec_id, "applied": rec.action, "result": view}
