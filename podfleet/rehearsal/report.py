"""The report of a rehearsal (``podfleet sim``): what happened, read from the control
plane's own read models (job views, recovery journals, alerts, the health monitor's
alarms) and, for ground truth only the twin knows, from the fabric's events.

Definitions:

* recoveries: one per recovery journal with a job (``recovery.recoveries``), by the path
  its state came back by (``replica``: a live peer's copy; ``checkpoint``: the last
  checkpoint), plus ``requeue``: a job relaunched by the job driver (from its checkpoint,
  on replacement chips) after losing a chip. Time: detection to the job running again.
* link reroutes: one per link recovery journal (a link down or each down of a flap):
  traffic rerouted around it; counted apart from the job recoveries.
* drains: one per failure-prediction alarm of the health monitor, with whether the chip
  was then taken out of service for it, the job whose rank the drain flow moved, and
  whether the chip failed all the same.
* predictions (strict): an alarm is a hit only if its chip fails within ``HORIZON_S``
  after it; a failure is predicted when an alarm on its chip came within ``HORIZON_S``
  before it. An averted failure (the chip was drained in time) counts as no failure.
* ETTR per job: productive step time (steps done beyond the start step x the fastest
  step time the job showed) / wall time since its first start (until it ended).
* chip-hours lost by cause: time chips spent failed or isolated, by the fault (or
  drain) that took them out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

import numpy as np

from podfleet.compose import Parts
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import FabricEvent
from podfleet.fabric.sim.fabric import SimFabric
from podfleet.hardware.faults import FaultKind
from podfleet.rehearsal.evaluate import HORIZON_S
from podfleet.rehearsal.scenario import Scenario, twin_figures

_DOWN = ("failed", "isolated")
_ENDED = ("job-finished", "job-stopped", "job-failed")
_KINDS = tuple(sorted((k.value for k in FaultKind), key=len, reverse=True))


def cause_of(reason: str) -> str:
    """The fault kind (or drain, firmware) a chip transition's reason names."""
    r = reason.lower()
    for k in _KINDS:
        if k in r:
            return k
    if "predict" in r or "drain" in r:
        return "predicted-drain"
    if "firmware" in r:
        return "firmware-update"
    return "other"


class Tracker:
    """Fabric events the report needs, collected as they happen (cheap per event)."""

    def __init__(self, fabric: SimFabric, timeline: Timeline) -> None:
        self.tl = timeline
        self.names: dict[str, str] = {}  # control-plane job id -> scenario job id
        self.started: dict[str, float] = {}
        self.starts: Counter[str] = Counter()
        self.ended: dict[str, float] = {}
        self.first_step: dict[str, int] = {}
        self.best_step_s: dict[str, float] = {}
        self.lost_at: dict[str, float] = {}  # job -> when it last lost a chip
        self.requeues: list[dict[str, Any]] = []
        self.failures: list[tuple[float, int, str]] = []  # t, chip, cause
        self.down_since: dict[int, tuple[float, str]] = {}
        self.last_cause: dict[int, str] = {}  # chip -> the last fault kind named for it
        self.lost_s: dict[str, float] = {}
        self.out_at: list[tuple[float, int]] = []  # t, chip: taken out of service for a predicted failure
        fabric.subscribe(self.on_event)

    def job_submitted(self, job_id: str, name: str) -> None:
        self.names[job_id] = name

    def on_event(self, ev: FabricEvent) -> None:
        kind, job = ev.kind, ev.job_id
        if kind == "progress":
            if job is not None:
                st = ev.detail.get("step_time_s")
                if st and st < self.best_step_s.get(job, float("inf")):
                    self.best_step_s[job] = float(st)
            return
        if kind == "job-started" and job is not None:
            self.starts[job] += 1
            if job not in self.started:
                self.started[job] = ev.t
                self.first_step[job] = int(ev.detail.get("start_step", ev.detail.get("step", 0)) or 0)
            elif job in self.lost_at:
                self.requeues.append({"job_id": job, "t": ev.t, "took_s": ev.t - self.lost_at.pop(job)})
            return
        if kind in _ENDED and job is not None:
            self.ended.setdefault(job, ev.t)
            return
        if not kind.startswith("chip-") or ev.chip is None:
            return
        state, chip = kind.removeprefix("chip-"), ev.chip
        cause = cause_of(str(ev.detail.get("reason", "")))
        if cause == "other":  # e.g. isolated for replacement after a fault fenced it earlier
            cause = self.last_cause.get(chip, cause)
        elif cause in _KINDS:
            self.last_cause[chip] = cause
        if state == "failed":
            self.failures.append((ev.t, chip, cause))
        if state in _DOWN:
            if cause == "predicted-drain":
                self.out_at.append((ev.t, chip))
            if job is not None:
                self.lost_at.setdefault(job, ev.t)
            if chip not in self.down_since:
                self.down_since[chip] = (ev.t, cause)
        elif chip in self.down_since:
            t, cause = self.down_since.pop(chip)
            self.lost_s[cause] = self.lost_s.get(cause, 0.0) + ev.t - t

    def lost_by_cause_h(self, now: float) -> dict[str, float]:
        out = dict(self.lost_s)
        for t, cause in self.down_since.values():
            out[cause] = out.get(cause, 0.0) + now - t
        return {k: round(v / 3600.0, 4) for k, v in sorted(out.items())}


class Rehearsed(Protocol):
    """What the report reads of a rehearsal (``twin.rehearsal.Rehearsal`` is one), declared
    here so the report never imports the rehearsal that imports it."""

    @property
    def sc(self) -> Scenario: ...

    @property
    def tl(self) -> Timeline: ...

    @property
    def fabric(self) -> SimFabric | None: ...

    @property
    def parts(self) -> Parts: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def t0(self) -> float: ...

    @property
    def tracker(self) -> Tracker: ...

    @property
    def job_ids(self) -> dict[str, str]:
        """Scenario job id -> control-plane job id."""

    @property
    def command_log(self) -> list[dict[str, Any]]: ...


def _pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 4) if xs else None


def _took_s(j: dict[str, Any]) -> float | None:
    """Detection to the end of a finished flow (None while it is still open)."""
    if j.get("t_end") is None or j.get("state") != "done":
        return None
    return round(j["t_end"] - (j.get("detected_t") or j["t_start"]), 4)


def _entry(r: Rehearsed, j: dict[str, Any], path: str) -> dict[str, Any]:
    job = j.get("job_id")
    return {"t": round(j["t_start"] - r.t0, 3), "kind": j["kind"], "target": j["target"],
            "job": r.tracker.names.get(job, job) if job else None, "state": j["state"], "path": path,
            "duration_s": _took_s(j), "steps": [s["name"] for s in j["steps"]]}


def recoveries(r: Rehearsed) -> dict[str, Any]:
    journals = r.parts.recovery.recoveries(r.cluster_id)
    by_path: Counter[str] = Counter()
    times: list[float] = []
    seq: list[dict[str, Any]] = []
    moves_home = 0
    reroutes = 0
    for j in journals:
        if not j.get("job_id"):
            if j["kind"] == "link":
                # A link flow reroutes traffic; no job stops for it: in the sequence,
                # counted apart, out of the job recovery times.
                reroutes += 1
                seq.append(_entry(r, j, "reroute"))
            continue
        if j["kind"] == "rehome":
            # A rank moving back from the other pod is not a recovery from a fault: counted
            # apart, kept in the sequence, out of the recovery times.
            moves_home += 1
            seq.append(_entry(r, j, "move-home"))
            continue
        path = j.get("restored_from") or "none"
        by_path[path] += 1
        if (took := _took_s(j)) is not None:
            times.append(took)
        seq.append(_entry(r, j, path))
    for q in r.tracker.requeues:
        by_path["requeue"] += 1
        times.append(q["took_s"])
        seq.append({"t": round(q["t"] - r.t0, 3), "kind": "relaunch", "target": "job",
                    "job": r.tracker.names.get(q["job_id"], q["job_id"]), "state": "done", "path": "requeue",
                    "duration_s": round(q["took_s"], 4), "steps": ["requeue", "relaunch"]})
    seq.sort(key=lambda s: s["t"])
    return {"count": len(seq) - moves_home - reroutes,
            "by_path": {p: by_path.get(p, 0) for p in ("replica", "checkpoint", "requeue")}
            | {p: n for p, n in by_path.items() if p not in ("replica", "checkpoint", "requeue")},
            "moves_home": moves_home, "link_reroutes": reroutes, "p50_s": _pct(times, 50), "p99_s": _pct(times, 99),
            "sequence": seq}


def drains(r: Rehearsed) -> list[dict[str, Any]]:
    """Each failure-prediction alarm of the health monitor and what came of it: the chip
    drained (taken out of service while it still worked; with the job whose rank the
    recovery's drain flow moved off it), and whether it failed within ``HORIZON_S`` all
    the same. ``averted``: the twin's ground truth that a failure was due on the chip and
    did not happen because the chip was out of service."""
    mon = r.parts.health.monitors.get(r.cluster_id)
    flows = [j for j in r.parts.recovery.recoveries(r.cluster_id) if j["kind"] == "drain"]
    averted = [(float(rec["t"]), rec.get("chip")) for rec in r.tl.log.filter("fault", averted=True)]
    out = []
    for a in mon.alarms if mon else []:
        flow = next((j for j in flows if j["target"] == f"chip:{a.chip}" and a.t <= j["t_start"]), None)
        taken_out = next((t for t, c in r.tracker.out_at if c == a.chip and a.t <= t), None)
        moved = next((s for s in (flow or {}).get("steps", []) if s["name"] == "move-rank"), None)
        failed = any(c == a.chip and a.t < t <= a.t + HORIZON_S for t, c, _cause in r.tracker.failures)
        job = flow.get("job_id") if flow else None
        out.append({"t": round(a.t - r.t0, 3), "chip": a.chip, "probability": round(a.probability, 4),
                    "drained": taken_out is not None,
                    "drained_t": round(taken_out - r.t0, 3) if taken_out is not None else None,
                    "job": r.tracker.names.get(job, job) if job else None,
                    "rank_to_chip": (moved or {}).get("detail", {}).get("to_chip"),
                    "drain_s": _took_s(flow) if flow else None, "failed_after": failed,
                    "averted": any(c == a.chip and t >= a.t for t, c in averted)})
    return out


def alerts(r: Rehearsed) -> dict[str, Any]:
    al = r.parts.health.list_alerts(r.cluster_id)
    return {"total": len(al), "by_rule": dict(sorted(Counter(a["rule"] for a in al).items())),
            "by_severity": dict(sorted(Counter(a["severity"] for a in al).items())),
            "firing_at_end": sum(a["state"] == "firing" for a in al)}


def predictions(r: Rehearsed) -> dict[str, Any]:
    mon = r.parts.health.monitors.get(r.cluster_id)
    alarms = [(a.chip, a.t) for a in (mon.alarms if mon else [])]
    fails: dict[int, list[float]] = {}
    for t, chip, _cause in r.tracker.failures:
        fails.setdefault(chip, []).append(t)
    hits = sum(any(t < ft <= t + HORIZON_S for ft in fails.get(c, ())) for c, t in alarms)
    by_chip: dict[int, list[float]] = {}
    for c, t in alarms:
        by_chip.setdefault(c, []).append(t)
    predicted = sum(any(ft - HORIZON_S <= t < ft for t in by_chip.get(c, ())) for c, fts in fails.items() for ft in fts)
    n_fail = sum(len(v) for v in fails.values())
    averted = len(r.tl.log.filter("fault", averted=True))
    return {"alarms": len(alarms), "hits": hits, "false_alarms": len(alarms) - hits, "failures": n_fail,
            "predicted_failures": predicted, "misses": n_fail - predicted, "averted": averted,
            "horizon_s": HORIZON_S}


def jobs(r: Rehearsed, now: float) -> list[dict[str, Any]]:
    tr = r.tracker
    out = []
    for name, jid in r.job_ids.items():
        v = r.parts.plane.jobs.describe(jid)
        prog = v.get("progress") or {}
        step = int(prog.get("step") or 0)
        start = tr.started.get(jid)
        best = tr.best_step_s.get(jid) or (v.get("plan") or {}).get("step_time_s")
        ettr = None
        if start is not None and best:
            wall = tr.ended.get(jid, now) - start
            done = step - tr.first_step.get(jid, 0)
            ettr = round(min(1.0, done * best / wall), 4) if wall > 0 else None
        sched = v.get("scheduling") or {}
        out.append({"job_id": name, "id": jid, "state": v["state"], "step": step, "steps": prog.get("steps"),
                    "loss": prog.get("loss"), "tokens_per_s": prog.get("tokens_per_s"), "ettr": ettr,
                    "balance_degree": sched.get("balance_degree"), "launches": tr.starts.get(jid, 0),
                    "recoveries": len([1 for j in r.parts.recovery.recoveries(r.cluster_id) if j.get("job_id") == jid])})
    return out


def build_report(r: Rehearsed, wall: float) -> dict[str, Any]:
    sc, fab, tl = r.sc, r.fabric, r.tl
    assert fab is not None
    now = tl.now
    return {
        **twin_figures(sc, fab, tl, wall),
        "control_plane": True,
        "chip_hours_lost_by_cause": r.tracker.lost_by_cause_h(now),
        "recoveries": recoveries(r),
        "alerts": alerts(r),
        "predictions": predictions(r),
        "drains": drains(r),
        "commands": r.command_log,
        "jobs": jobs(r, now),
    }
