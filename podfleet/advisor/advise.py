"""Advice (``GetRecommendations``, ``podfleet advise``), each proven in rehearsal first.

Candidates come from the running state (engine thread, ``advice_kinds``): a throttled
chip that holds back its gang, a degraded link inside a job, a chip whose corrected-HBM
errors climb, a layout the planner prices lower, gradient compression, a scattered job.
Before one is shown, the current state is rehearsed twice in virtual time with the whole
control plane (``twin.rehearsal.Rehearsal``, the path ``podfleet sim`` runs): the same
job (model, chips, layout, compression) on a fresh plane of the cluster's type and
spares, with the candidate's stand-in for the problem (the same fault on the same ranks,
or the job pinned to the same scattered chips), once as it is and once with the action
carried out at ``ACT_AT_S``. ``predicted_gain`` is the relative gain in training steps
the job (and, for a restart, its replacement) completes over ``HORIZON_S`` after the
action; advice under ``MIN_GAIN`` is dropped.

Actions: ``drain-chip`` (``ChipCommand`` drain: the rank moves to a spare or free chip
through recovery) and ``restart-job`` (``StopTrainingJob`` then ``SubmitTrainingJob`` of
the same spec with the changes: a new layout, a compression mode, or none, so the
scheduler places it afresh). A restarted job starts from step 0 on the twin: the control
plane has no reconfigure-from-checkpoint command yet, so the rehearsal counts the steps
the replacement completes in the horizon, and the restart's cost is its relaunch time.

Every recommendation carries the fingerprint of the state it was made on (chip and link
states, which job holds which chip, chip modes): ``apply`` refuses it once that state
has moved on (``ConflictError``: stale advice).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podfleet.advisor.advice_kinds import (
    GENERATORS,
    Candidate,
    JobShape,
    StandIn,
    job_shape,
    running_jobs,
)
from podfleet.advisor.verify import active
from podfleet.control.chipmodes import ChipMode
from podfleet.control.plane import ControlPlane
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import ConflictError, NotFoundError, PodfleetError
from podfleet.fabric.sim.workload import tokens_per_step
from podfleet.hardware.faults import FaultKind
from podfleet.rehearsal.rehearsal import CLUSTER, Rehearsal
from podfleet.rehearsal.scenario import Scenario

HORIZON_S = 3600.0
MIN_GAIN = 0.02
FAULT_AT_S = 60.0  # rehearsal: the job is running by then; the stand-in fault lands
ACT_AT_S = 120.0  # rehearsal: the action (recovery has marked a flapping link degraded by then)
STEPS = 10**7
ACTOR = "advice-rehearsal"

__all__ = ["HORIZON_S", "MIN_GAIN", "AdviceBook", "Candidate", "Recommendation", "candidates", "fingerprint",
           "prove"]


def fingerprint(rt: ClusterRuntime) -> str:
    """The state advice depends on: chip and link states, owners, chip modes."""
    h = hashlib.sha256()
    h.update(",".join(str(s) for s in rt.fabric.chip_states()).encode())
    h.update(b"|" + ",".join(str(s) for s in rt.fabric.link_states()).encode())
    h.update(b"|" + repr(sorted(rt.owners.items())).encode())
    h.update(b"|" + repr(rt.modes.to_dict()).encode())
    return h.hexdigest()[:16]


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


def candidates(plane: ControlPlane, ref: str) -> list[Candidate]:
    """Every kind's candidates for the cluster's running jobs (engine thread)."""
    rt = active(plane, ref)
    jobs = running_jobs(plane, rt)
    fp = fingerprint(rt)
    out: list[Candidate] = []
    for gen in GENERATORS:
        out.extend(gen(plane, rt, jobs, fp))
    return out


# --- rehearsal ---------------------------------------------------------------------------------
def _link_between(r: Rehearsal, a: int, b: int) -> int | None:
    for lk in r.topology.links:
        if {lk.src, lk.dst} == {a, b}:
            return lk.index
    return None


class _Run:
    """One rehearsal of a candidate: the cluster's jobs on the same chips, the stand-in,
    the action or not. Counts tokens trained after the action time by the subject jobs
    (the candidate's job, or every job) and their replacements."""

    def __init__(self, c: Candidate, *, act: bool, seed: int) -> None:
        self.c, self.act = c, act
        self.sc = Scenario(name=f"advice-{c.kind}", seed=seed, pod_type=c.cluster_type,
                           duration=ACT_AT_S + HORIZON_S, fault_rates="none", spares=c.spares)
        self.r = Rehearsal(self.sc)
        self.ids: dict[str, str] = {}  # live job id -> rehearsal job id
        self.bodies: dict[str, dict[str, Any]] = {}
        self.placed = c.stand_in.fault is None
        self.at_act: dict[str, float] = {}
        self.stopped: dict[str, float] = {}  # rehearsal job id -> tokens when it was stopped
        self.replacements: list[str] = []
        self.tokens_per_step: dict[str, float] = {}

    # --- the current state -----------------------------------------------------------------------
    def _body(self, job: JobShape) -> dict[str, Any]:
        body = {k: v for k, v in job.body.items() if k in ("model", "chips", "checkpoint_interval", "priority",
                                                           "parallelism", "model_dims", "grad_compression")}
        return {**body, "name": "job", "steps": STEPS, "checkpoint_interval": job.checkpoint_interval or 50}

    def _submit_on(self, job: JobShape) -> None:
        """Submit ``job`` with every other free chip cordoned, so it lands on its own chips."""
        r = self.r
        rt = r.plane.clusters[r.cluster_id]
        keep = set(job.chips) | set(rt.spares)
        others = [c for c in range(r.topology.n_chips)
                  if c not in keep and c not in rt.owners and rt.modes.mode(c) == ChipMode.SCHEDULABLE]
        for chip in others:
            r.plane.chip_command(CLUSTER, chip, "cordon", actor=ACTOR)
        try:
            self._submit(job)
        finally:
            for chip in others:
                r.plane.chip_command(CLUSTER, chip, "uncordon", actor=ACTOR)

    def _submit(self, job: JobShape) -> None:
        body = self.bodies[job.job_id] = self._body(job)
        self.ids[job.job_id] = self.r.plane.jobs.submit(CLUSTER, body, actor=ACTOR)["id"]

    def chips(self, live_id: str) -> list[int]:
        view = self.r.plane.jobs.describe(self.ids[live_id])
        return list((view.get("allocation") or {}).get("chips") or [])

    def _tokens(self, jid: str) -> float:
        r = self.r
        step = int(r.plane.jobs.describe(jid)["progress"]["step"] or 0)
        assert r.fabric is not None
        run = r.fabric.jobs.get(jid)
        if run is not None and jid not in self.tokens_per_step:
            self.tokens_per_step[jid] = tokens_per_step(run.spec, r.fabric)
        return step * self.tokens_per_step.get(jid, 0.0)

    def _subjects(self) -> list[str]:
        c = self.c
        live = [j.job_id for j in c.scene] if c.whole_cluster else [c.job_id]
        return [self.ids[j] for j in live if j in self.ids]

    def run(self) -> float | None:
        r, c = self.r, self.c
        for job in c.scene:
            if job.chips:
                self._submit_on(job)
        for job in c.scene:
            if not job.chips:
                self._submit(job)
        if c.job_id not in self.ids:
            self._submit(c.job)
        r.tl.call_at(FAULT_AT_S, self._fault)
        r.tl.call_at(ACT_AT_S, self._act)
        r.tl.run(r.t0 + self.sc.duration)
        if not self.placed:
            return None
        total = 0.0
        for jid in self._subjects():
            total += self.stopped.get(jid, self._tokens(jid)) - self.at_act.get(jid, 0.0)
        return total + sum(self._tokens(jid) for jid in self.replacements)

    # --- the stand-in and the action -------------------------------------------------------------
    def _fault(self) -> None:
        r, si = self.r, self.c.stand_in
        if si.fault is None:
            return
        chips = self.chips(self.c.job_id)
        if any(k >= len(chips) for k in si.ranks):
            return
        if si.fault == "link-flap":
            link = _link_between(r, chips[si.ranks[0]], chips[si.ranks[1]])
            if link is None:
                return
            r.plane.inject_fault(CLUSTER, FaultKind.LINK_FLAP.value, link=r.link_name(link), actor=ACTOR)
        elif si.fault == "thermal-runaway":
            r.plane.inject_fault(CLUSTER, FaultKind.THERMAL_RUNAWAY.value, chip=chips[si.ranks[0]], actor=ACTOR)
        elif si.fault == "hbm-precursor":  # ground truth the API does not model: on the twin
            assert r.fabric is not None
            r.fabric.inject_fault(FaultKind.HBM_UNCORRECTABLE.value, chips[si.ranks[0]], None, precursor=True,
                                  lead_s=(si.lead_s or HORIZON_S / 2) + ACT_AT_S - FAULT_AT_S)
        self.placed = True

    def _act(self) -> None:
        r, c = self.r, self.c
        for jid in self._subjects():
            self.at_act[jid] = self._tokens(jid)
        if not self.act or not self.placed:
            return
        op = c.action["op"]
        try:
            if op == "drain-chip":
                chip = self.chips(c.job_id)[int(c.action["rank"])]
                r.plane.chip_command(CLUSTER, int(chip), "drain", actor=ACTOR)
            elif op == "restart-job":
                self._restart(c.job_id, dict(c.action.get("changes") or {}))
            elif op == "requeue-jobs":
                live = [j for j in c.action["jobs"] if j in self.ids]
                for j in live:
                    self._stop(j)
                for j in live:
                    self._resubmit(j, {})
        except PodfleetError:
            self.placed = False  # the action cannot be carried out here: nothing proven

    def _stop(self, live_id: str) -> None:
        jid = self.ids[live_id]
        self.stopped[jid] = self._tokens(jid)
        self.r.plane.jobs.stop(jid, actor=ACTOR)

    def _resubmit(self, live_id: str, changes: Mapping[str, Any]) -> None:
        body = {**self.bodies[live_id], **changes}
        self.replacements.append(self.r.plane.jobs.submit(CLUSTER, body, actor=ACTOR)["id"])

    def _restart(self, live_id: str, changes: Mapping[str, Any]) -> None:
        self._stop(live_id)
        self._resubmit(live_id, changes)


def rehearse(c: Candidate, *, act: bool, seed: int) -> float | None:
    """Tokens the subject jobs (and their replacements) train over the horizon after the
    action time, with or without the action; None when the rehearsal cannot reproduce
    the problem or carry the action out."""
    return _Run(c, act=act, seed=seed).run()


def prove(c: Candidate, *, seed: int = 0) -> Recommendation | None:
    """Rehearse ``c`` with and without its action (seconds of wall time: off the engine)."""
    base = rehearse(c, act=False, seed=seed)
    with_action = rehearse(c, act=True, seed=seed)
    if base is None or with_action is None or base <= 0:
        return None
    gain = (with_action - base) / base
    if gain < MIN_GAIN:
        return None
    key = f"{c.cluster_id}|{c.kind}|{c.job_id}|{sorted(c.action.items())}|{c.fingerprint}"
    rid = "adv-" + hashlib.sha256(key.encode()).hexdigest()[:10]
    evidence = {**c.evidence, "rehearsal": {"horizon_s": HORIZON_S, "tokens_without": round(base), "tokens_with": round(with_action),
                                            "stand_in": _describe(c.stand_in), "seed": seed}}
    action = {**c.action, "cluster_id": c.cluster_id, "job_id": c.job_id}
    return Recommendation(rid, c.kind, c.title, evidence, action, gain, c.confidence, HORIZON_S, c.guide,
                          c.fingerprint)


def _describe(si: StandIn) -> str:
    state = "the cluster's jobs (model, chips, layout, compression) on the same chips"
    if si.fault is None:
        return state
    lead = f", landing {si.lead_s:g} s after the advice (assumed)" if si.lead_s else ""
    return f"{state}; {si.fault} on rank(s) {list(si.ranks)} of the job{lead}"


# --- applying ------------------------------------------------------------------------------------
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
        result = _carry_out(plane, ref, rec.action, actor=actor)
        plane.audit(actor, "ApplyRecommendation", rec_id, "ok", {"action": rec.action,
                                                                  "predicted_gain": rec.predicted_gain})
        del self.made[rec_id]
        return {"id": rec_id, "applied": rec.action, "result": result}


def _carry_out(plane: ControlPlane, ref: str, action: Mapping[str, Any], *, actor: str) -> dict[str, Any]:
    op = action["op"]
    if op == "drain-chip":
        return plane.chip_command(ref, int(action["chip"]), "drain", actor=actor)
    if op == "restart-job":
        shape = job_shape(plane, str(action["job_id"]))
        if shape is None:
            raise ConflictError(f"job {action['job_id']} is no longer running; run podfleet advise {ref} again",
                                field="recommendation")
        plane.jobs.stop(shape.job_id, actor=actor)
        body = {**shape.body, **dict(action.get("changes") or {})}
        return {"stopped": shape.job_id, "submitted": plane.jobs.submit(ref, body, actor=actor)["id"]}
    if op == "requeue-jobs":
        shapes = [job_shape(plane, str(j)) for j in action["jobs"]]
        if any(s is None for s in shapes):
            raise ConflictError(f"a job to requeue is no longer running; run podfleet advise {ref} again",
                                field="recommendation")
        for sh in shapes:
            assert sh is not None
            plane.jobs.stop(sh.job_id, actor=actor)
        submitted = [plane.jobs.submit(ref, dict(sh.body), actor=actor)["id"] for sh in shapes if sh is not None]
        return {"stopped": [sh.job_id for sh in shapes if sh is not None], "submitted": submitted}
    raise NotFoundError(f"unknown advice action {op!r}", field="action")
