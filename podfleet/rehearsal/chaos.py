"""One chaos run on the rehearsal path (see bench/chaos.py and docs/chaos.md).

The real control plane (``podfleet.compose.build``) runs in virtual time on a SQLite
file, with resident training jobs on a twin pod. Faults of every kind are injected
through ``plane.inject_fault`` (the InjectFault command), jobs are submitted and stopped
(acknowledged writes), and the control plane is killed several times mid-run: the old
plane is dropped without a shutdown (its store and fabric are never closed, its
timeline never runs again) and a new one is built on the same database file and
``load()``-ed, as production restarts.

Counting is strict:

* a fault *touches* a running job when its chip was held by one, or its link joins two
  chips of a running job's block;
* it is *interrupting* only if it then paused (the control plane or the twin has the job
  not running), slowed (a fresh progress report under 95% of the tokens/s per chip
  before the fault, seen before the next fault on the same job: a later slowdown is the
  later fault's, judged against its own rate before) or stopped the job; a fault that touched a job and did none of
  these within ``SETTLE_S`` needed no recovery and is counted apart
  (``no_action_needed``);
* every fault kind has the recovery flow it needs (``EXPECTED_FLOW``: a chip failure or
  firmware fault the chip-failure flow, uncorrectable ECC the ecc flow, thermal runaway
  the thermal flow, a link fault the link flow with a reroute, a corrected-ECC burst the
  predictor's drain); an interrupting fault is *recovered* only if that flow ran to its
  end for this fault (started after it on its chip or link, or the fault joined a flow
  already running on the job) and the job is back at full speed within ``SETTLE_S``
  (10 simulated minutes): running, with new progress, at >= 95% of its tokens/s per
  chip before the fault (a link fault may instead leave the job reported degraded with
  the link as its reason; any fault may leave it reported degraded by a link that is
  still down, whose detour the slowdown is); otherwise it is *lost*;
* restarts keep down and degraded links (the plane persists them), so a job paused by a
  restart's relaunch is the restart's: a link fault's pause counts only before the next
  restart;
* ``double_allocations``: a chip held by two live jobs (allocations, owners, twin runs);
* ``acked_writes_lost``: job submits and stops that returned, read back after every
  restart from a *new* store opened on the file;
* ``invariant_violations``: every invariant that stayed broken longer than ``GRACE_S``
  of simulated time (a fault is handled one zero-delay event after it lands), listed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from podfleet.compose import Parts, build
from podfleet.control.lifecycle import JobState
from podfleet.control.runtime import ClusterRuntime
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import ChipState, FaultInjection, Introspection, LinkState, RunState
from podfleet.hardware.faults import LINK_FAULTS, FaultKind
from podfleet.recovery.linkimpact import DEGRADED_REASON as LINK_DEGRADED
from podfleet.store import open_store
from podfleet.store.protocol import StoreProtocol

SETTLE_S = 600.0  # a job not running again 10 simulated minutes after a fault is lost
GAP_S = 120.0  # one fault every 2 minutes of twin time
RATE_TOLERANCE = 0.05  # a rerouted job runs within 5% of its pre-fault tokens/s
GRACE_S = 5.0  # how long an invariant may be broken while a fault is being handled
# A job view's step may lead the twin's after a rollback until the recovery hands the job
# back and the view is set to the restored step (seconds: detect, isolate, restore); the
# window does not depend on the step time (37-130 s for the resident jobs on the perf model).
PROGRESS_GRACE_S = 60.0
REPAIR_S = 1800.0  # a technician replaces a down chip or reseats a down link (an assumption)
EVAL_S = 5.0  # how often pending faults are evaluated and technicians walk the floor
CLUSTER = "chaos"
# The recovery flow (``Recovery.kind``) each fault kind needs when it interrupts a job.
EXPECTED_FLOW: dict[str, str] = {
    FaultKind.CHIP_FAILURE.value: "chip-failure",
    FaultKind.FIRMWARE_FAULT.value: "chip-failure",  # a chip reset: its rank moves like a failure's
    FaultKind.HBM_UNCORRECTABLE.value: "ecc",
    FaultKind.SRAM_UNCORRECTABLE.value: "ecc",
    FaultKind.THERMAL_RUNAWAY.value: "thermal",
    FaultKind.LINK_DOWN.value: "link",
    FaultKind.LINK_FLAP.value: "link",
    # A corrected burst is a signal; only the failure predictor's drain acts on it.
    FaultKind.HBM_CORRECTED_BURST.value: "drain",
}
# Resident jobs: (chips, parallelism). dp > 1 shrinks when no chip is free; dp = 1 waits.
RESIDENT = ((32, {"tp": 8, "pp": 1, "dp": 4}), (16, {"tp": 8, "pp": 2, "dp": 1}), (8, {"tp": 4, "pp": 1, "dp": 2}))
MODEL = "llama3-8b"
CHURN_MODEL = "tiny"
CHURN_EVERY = 4  # a small job is submitted (and the previous one stopped) every N faults
_RUNNING = (JobState.RUNNING, JobState.CHECKPOINTING)

StoreOpener = Callable[[str], StoreProtocol]


@dataclass
class Fault:
    i: int
    kind: str
    t: float
    target: str  # "chip N" or "link A-B"
    link: int | None
    job: str | None  # the running job it touched (None: it touched none)
    restarts: int = 0  # control-plane restarts before it
    rate_before: float = 0.0
    chips_before: int = 0  # the job's chips at the fault (tokens/s compare per chip)
    effect: str | None = None  # "paused" | "slowed" | "stopped", as first seen; None: none yet
    step_mark: int = -1  # the twin's step for the job when last seen not running
    view_mark: int = -1  # the job view's reported step at the fault (a link's rate must be fresh)
    outcome: str | None = None  # "recovered" | "lost" | "no_action_needed"
    why: str = ""
    # Why it was not recovered the last time its job was seen running: a fault judged lost
    # may end its window while the job is in the next fault's recovery, whose state alone
    # would hide what kept this one from counting.
    why_running: str = ""


@dataclass
class Acked:
    op: str  # "submit" | "stop"
    job: str
    model: str
    chips: int
    t: float


@dataclass
class _Watch:
    since: float
    counted: bool = False


@dataclass
class ChaosRun:
    seed: int
    faults: int = 100
    db_path: str = "chaos.db"
    restarts: int = 3
    open_store: StoreOpener = field(default=open_store)
    gap_s: float = GAP_S
    telemetry_interval_s: float = 2.0

    def __post_init__(self) -> None:
        self.url = f"sqlite:///{self.db_path}"
        self.rng = np.random.default_rng(self.seed + 7)
        self.dead: list[Parts] = []  # planes that "crashed": kept, never closed nor run
        self.parts = self._build(Timeline(seed=self.seed))
        self.log: list[Fault] = []
        self.acked: list[Acked] = []
        self.resident: list[str] = []
        self.churn: list[str] = []
        self.violations: dict[str, str] = {}  # incident key -> first sentence, with time
        self.watch: dict[str, _Watch] = {}
        self.doubles: set[str] = set()
        self.down_since: dict[tuple[str, int], float] = {}  # ("chip"|"link", index) -> first seen down
        self.repairs = 0
        self.acked_lost: list[str] = []
        self.n_restarts = 0
        self._log_len = 0
        self._next_eval = 0.0
        self.lost_jobs: list[str] = []

    # --- the plane --------------------------------------------------------------------------
    def _build(self, tl: Timeline) -> Parts:
        return build(self.open_store(self.url), tl, telemetry_interval_s=self.telemetry_interval_s)

    @property
    def plane(self) -> Any:
        return self.parts.plane

    @property
    def rt(self) -> ClusterRuntime:
        rt: ClusterRuntime = self.plane.resolve(CLUSTER)
        return rt

    def restart(self) -> None:
        """Kill the control plane (no shutdown) and start a new one on the same file."""
        old = self.parts
        old.plane.tl.stop()  # its timeline never runs again; store and fabric stay as they were
        self.dead.append(old)
        self.parts = self._build(Timeline(seed=self.seed * 1000 + len(self.dead), start=old.plane.tl.now))
        self.plane.load()
        self.n_restarts += 1
        self._log_len = 0
        self._check_acked()

    def _check_acked(self) -> None:
        """Every acknowledged submit and stop, read back from a new store on the file."""
        fresh = open_store(self.url)
        try:
            for a in self.acked:
                rec = fresh.get_job(a.job)
                if rec is None:
                    bad = f"{a.op} of {a.job} acknowledged at t={a.t:.1f} but the job is not in the store"
                elif rec.spec.get("model") != a.model or int(rec.spec.get("chips", -1)) != a.chips:
                    bad = f"{a.op} of {a.job}: stored spec {rec.spec.get('model')}/{rec.spec.get('chips')} differs"
                elif a.op == "stop" and rec.state != JobState.STOPPED.value:
                    bad = f"stop of {a.job} acknowledged at t={a.t:.1f} but the store says {rec.state}"
                else:
                    continue
                if bad not in self.acked_lost:
                    self.acked_lost.append(bad)
        finally:
            fresh.close()

    # --- time -------------------------------------------------------------------------------
    def advance(self, until: float) -> None:
        """Run the plane's timeline to ``until``, checking invariants whenever its event log
        grew and evaluating faults every ``EVAL_S``."""
        tl = self.plane.tl
        env = tl.env
        while env.peek() <= until:
            env.step()
            if len(tl.log) != self._log_len:
                self._log_len = len(tl.log)
                self._check()
                self._observe()
            if tl.now >= self._next_eval:
                self._next_eval = tl.now + EVAL_S
                self._check()
                self._evaluate()
                self._technician()
        if tl.now < until:
            env.run(until=until)

    # --- invariants -------------------------------------------------------------------------
    def _check(self) -> None:
        now = self.plane.tl.now
        broken = self.invariants()
        for key, sentence in broken.items():
            w = self.watch.setdefault(key, _Watch(now))
            grace = PROGRESS_GRACE_S if key.startswith("progress:") else GRACE_S
            if not w.counted and now - w.since > grace:
                w.counted = True
                self.violations[f"{key}@{w.since:.3f}"] = f"t={w.since:.3f} {sentence}"
                if key.startswith("double:"):
                    self.doubles.add(f"{key}@{w.since:.3f}")
        for key in list(self.watch):
            if key not in broken:
                del self.watch[key]

    def invariants(self) -> dict[str, str]:
        """Broken invariants now, by key (a sentence each)."""
        bad: dict[str, str] = {}
        plane, rt = self.plane, self.rt
        fab = rt.fabric
        assert isinstance(fab, Introspection)
        states = rt.chip_states()
        held: dict[int, str] = {}
        rec_svc = self.parts.recovery
        for job in plane.table:
            if job.cluster_id != rt.id:
                continue
            if job.state in _RUNNING or job.state == JobState.RECOVERING:
                for c in job.chips:
                    other = held.get(c)
                    if other is not None and other != job.id:
                        bad[f"double:{c}"] = f"chip {c} is allocated to jobs {other} and {job.id}"
                    held[c] = job.id
            run = fab.run_status(job.id)
            live = run is not None and run.live
            if job.ended and live:
                bad[f"orphan:{job.id}"] = f"job {job.id} ended ({job.state.value}) but the twin still runs it"
            if job.state in _RUNNING and not rec_svc.owns(job.id):
                if run is None or run.state is not RunState.RUNNING:
                    bad[f"stalled:{job.id}"] = (f"job {job.id} is {job.state.value} but the twin has it "
                                                f"{run.state.value if run else 'not running'}")
                else:
                    owned = set(rt.owners.chips_of(job.id))
                    if set(run.chips) != set(job.chips) or owned != set(job.chips):
                        bad[f"owners:{job.id}"] = (f"job {job.id}: allocation, owner map and twin disagree "
                                                   f"({len(job.chips)}/{len(owned)}/{len(run.chips)} chips)")
            if run is not None and run.state is RunState.RUNNING and job.state in _RUNNING:
                shown = job.status.progress.step
                if shown > run.step + 1:
                    bad[f"progress:{job.id}"] = (f"job {job.id} shows step {shown} but the twin runs it at step "
                                                 f"{run.step} (a restore to an earlier step not shown)")
            if run is not None and run.state is RunState.RUNNING:
                down = [c for c in run.chips if states[c] not in (ChipState.HEALTHY, ChipState.DEGRADED)]
                if down:
                    bad[f"down:{job.id}"] = f"job {job.id} runs on chips {down} which are down"
        for c, j in rt.owners.items():
            other = held.get(c)
            job = plane.table.find(j)
            if job is None or job.ended:
                bad[f"owner-dead:{c}"] = f"chip {c} is owned by {j}, which is not a live job"
            elif other is not None and other != j:
                bad[f"double:{c}"] = f"chip {c} is owned by {j} but allocated to {other}"
        return bad

    # --- faults -----------------------------------------------------------------------------
    def _running(self) -> list[Any]:
        return [j for j in self.plane.table if j.cluster_id == self.rt.id and j.state in _RUNNING]

    def inject(self, i: int, kind: FaultKind) -> Fault:
        plane, rt = self.plane, self.rt
        now = plane.tl.now
        running = self._running()
        aim = bool(running) and self.rng.random() < 0.85  # most faults aim at a running job
        if kind in LINK_FAULTS:
            lstates = [str(s) for s in rt.fabric.link_states()]
            links = [lk for lk in rt.topology.links if lstates[lk.index] == LinkState.UP.value]
            if aim:
                blocks = [set(j.chips) for j in running]
                inside = [lk for lk in links if any(lk.src in b and lk.dst in b for b in blocks)]
                links = inside or links
            lk = links[int(self.rng.integers(len(links)))]
            plane.inject_fault(CLUSTER, kind.value, link=f"{lk.src}-{lk.dst}", actor="chaos")
            job = next((j for j in running if lk.src in j.chips and lk.dst in j.chips), None)
            f = Fault(i, kind.value, now, f"link {lk.src}-{lk.dst}", lk.index, job.id if job else None,
                      self.n_restarts)
        else:
            states = rt.chip_states()
            ok = [c for c in range(len(states)) if states[c] in (ChipState.HEALTHY, ChipState.DEGRADED)]
            chips = [c for c in ok if rt.owners.get(c) in {j.id for j in running}] if aim else []
            pool = chips or ok
            chip = int(pool[int(self.rng.integers(len(pool)))])
            owner = rt.owners.get(chip)
            job = next((j for j in running if j.id == owner), None)
            plane.inject_fault(CLUSTER, kind.value, chip=chip, actor="chaos")
            f = Fault(i, kind.value, now, f"chip {chip}", None, job.id if job else None, self.n_restarts)
        if f.job is not None:
            prog = plane.jobs.describe(f.job)["progress"]
            f.rate_before = float(prog.get("tokens_per_s") or 0.0)
            f.chips_before = len(job.chips) if job is not None else 0
            f.view_mark = int(prog.get("step") or 0)
            run = rt.fabric.run_status(f.job) if isinstance(rt.fabric, Introspection) else None
            f.step_mark = run.step if run is not None else 0
        self.log.append(f)
        return f

    def _observe(self, rates: bool = False) -> None:
        """Note what each fault still being judged did to its job (the first effect seen).
        Pauses are looked for at every event (a short one must not slip through); rates,
        which change only with a progress report, at every evaluation."""
        for f in self.log:
            if f.outcome is None and f.job is not None and f.effect is None:
                f.effect = self._effect(f, rates)

    def _effect(self, f: Fault, rates: bool) -> str | None:
        assert f.job is not None
        job = self.plane.table.find(f.job)
        if job is None or (job.ended and job.state != JobState.SUCCEEDED):
            return "stopped"
        if job.ended:
            return None
        fab = self.rt.fabric
        assert isinstance(fab, Introspection)
        run = fab.run_status(f.job)
        if job.state not in _RUNNING or run is None or run.state is not RunState.RUNNING:
            # A job paused by another fault's recovery was not paused by this one.
            return "paused" if self._pause_is_ours(f) else None
        if not rates:
            return None
        if self._later_fault_on_job(f):
            # A slowdown first seen after another fault hit the same job is that fault's (it
            # is judged on it, from its own rate before); this one showed none before it.
            return None
        prog = self.plane.jobs.describe(f.job)["progress"]
        if int(prog.get("step") or 0) != f.view_mark and self._slow(f, float(prog.get("tokens_per_s") or 0.0), job):
            return "slowed"
        return None

    def _later_fault_on_job(self, f: Fault) -> bool:
        return any(g.job == f.job and g.i > f.i for g in self.log)

    def _pause_is_ours(self, f: Fault) -> bool:
        """Whether ``f`` explains its job's pause: the job's open recovery is for ``f``'s
        chip (or ``f`` joined it); with none open, whether ``f``'s chip is out of service or
        its link down (what stops a job before, or without, any flow)."""
        orch = self.parts.recovery.orchestrator(self.rt.id)
        rec = orch.active.get(f.job) if orch is not None and f.job is not None else None
        if rec is None:
            if f.link is not None:
                # A restart since pauses every job it relaunches: that pause is the
                # restart's, though the link is still down (restarts keep down links).
                return f.restarts == self.n_restarts and \
                    str(self.rt.fabric.link_states()[f.link]) == LinkState.DOWN.value
            return self.rt.chip_states()[int(f.target.split()[1])] in (ChipState.FAILED, ChipState.ISOLATED)
        if f.link is not None:
            return False  # link flows never pause a job: an open job flow is a chip's
        chip = int(f.target.split()[1])
        return rec.target == f"chip:{chip}" or any(int(c) == chip for c, _ in rec.pending) or any(
            s.name == "fault-joined" and s.detail.get("chip") == chip for s in rec.steps)

    def _slow(self, f: Fault, rate: float, job: Any) -> bool:
        """Under 95% of the job's tokens/s per chip before the fault."""
        if f.rate_before <= 0 or f.chips_before <= 0 or not job.chips:
            return False
        return rate / len(job.chips) < (1.0 - RATE_TOLERANCE) * f.rate_before / f.chips_before

    def _evaluate(self) -> None:
        now = self.plane.tl.now
        self._observe(rates=True)
        for f in self.log:
            if f.outcome is not None or f.job is None:
                continue
            if f.effect is None:
                if now - f.t > SETTLE_S:
                    f.outcome, f.why = "no_action_needed", "touched a running job without pausing, slowing or stopping it"
                continue
            ok, why = self._recovered(f)
            if ok:
                f.outcome, f.why = "recovered", why
                continue
            # ``_recovered``'s reasons for a job not running (or gone) start with "job" / "the job".
            if not why.startswith(("job ", "the job")):
                f.why_running = why
            if now - f.t > SETTLE_S:
                if f.why_running and f.why_running != why:
                    why = f"{why}; last seen running: {f.why_running}"
                f.outcome, f.why = "lost", why
                self.lost_jobs.append(f"{f.job} after {f.kind} at {f.target} (t={f.t:.1f}): {why}")

    def _recovered(self, f: Fault) -> tuple[bool, str]:
        assert f.job is not None
        plane, rt = self.plane, self.rt
        job = plane.table.find(f.job)
        if job is None:
            return False, "the job is gone from the control plane"
        if job.state == JobState.SUCCEEDED:
            return True, "finished"
        if job.ended:
            return False, f"the job ended {job.state.value}: {job.status.reason}"
        view = plane.jobs.describe(f.job)
        fab = rt.fabric
        assert isinstance(fab, Introspection)
        run = fab.run_status(f.job)
        if job.state not in _RUNNING or run is None or run.state is not RunState.RUNNING:
            f.step_mark = run.step if run is not None else -1  # progress counts from when it runs again
            return False, f"job {job.state.value} ({job.status.reason}); twin run {run.state.value if run else None}"
        if run.step == f.step_mark:  # the twin's own step counter: the ground truth of progress
            return False, "running but no step completed since"
        flow = self._flow_ran(f)
        if flow is None:
            return False, f"running, but no {EXPECTED_FLOW[f.kind]} flow ran for it"
        reason = str(view.get("reason") or "")
        if f.link is not None and "degraded" in reason and f.target.split()[1] in reason:
            return True, f"{flow}; reported degraded: {reason}"
        if f.link is None and self._slowed_by_a_link(reason):
            # Back, but over the detour of a link still down (restarts keep it down): the
            # slowdown is that link's, shown to the operator and judged on its own fault.
            return True, f"{flow}; reported degraded: {reason}"
        if int(view["progress"].get("step") or 0) == f.view_mark:
            return False, "no progress report since the fault (its rate is unknown)"
        rate = float(view["progress"].get("tokens_per_s") or 0.0)
        if self._slow(f, rate, job):
            return False, (f"{flow}, but {rate:.0f} tokens/s on {len(job.chips)} chips vs {f.rate_before:.0f} "
                           f"on {f.chips_before} before (not back at full speed)")
        return True, f"{flow}; {rate:.0f} tokens/s vs {f.rate_before:.0f} before"

    def _slowed_by_a_link(self, reason: str) -> bool:
        """Whether the job's reason is ``LinkImpact``'s, naming a link that is not up now."""
        if not reason.startswith(LINK_DEGRADED):
            return False
        states = [str(s) for s in self.rt.fabric.link_states()]
        named = {(int(a), int(b)) for a, b in re.findall(r"(\d+)-(\d+) (?:down|degraded)", reason)}
        return any(states[lk.index] != LinkState.UP.value for lk in self.rt.topology.links
                   if (lk.src, lk.dst) in named)

    def _recoveries(self) -> list[Any]:
        """Every recovery the control planes of this run recorded (the dead ones' too: a
        flow may have ended before a restart), finished or running."""
        out: list[Any] = []
        for parts in (*self.dead, self.parts):
            orch = parts.recovery.orchestrator(self.rt.id)
            if orch is not None:
                out += [*orch.done, *orch.active.values(), *orch.link_active.values()]
        return out

    def _flow_ran(self, f: Fault) -> str | None:
        """The id of the finished flow that handled ``f`` (its expected kind, started at
        or after it on its chip or link; or a flow of its job that it joined), or None."""
        want = EXPECTED_FLOW[f.kind]
        target = f"link:{f.link}" if f.link is not None else f"chip:{f.target.split()[1]}"
        chip = None if f.link is not None else int(f.target.split()[1])
        for rec in self._recoveries():
            if rec.state.value != "done":
                continue
            if rec.kind == want and rec.target == target and rec.t_start >= f.t - 1e-9:
                if want == "link":
                    reroute = next((s for s in rec.steps if s.name == "reroute"), None)
                    if reroute is None or reroute.detail.get("detour") is None:
                        continue
                return str(rec.id)
            if chip is not None and rec.job_id == f.job and any(
                    s.name == "fault-joined" and s.detail.get("chip") == chip and s.t_start >= f.t - 1e-9
                    for s in rec.steps):
                return str(rec.id)
        return None

    def _technician(self) -> None:
        """Replace chips and reseat links that have been down for ``REPAIR_S``."""
        rt, now = self.rt, self.plane.tl.now
        fab = rt.fabric
        assert isinstance(fab, FaultInjection)
        for c, s in enumerate(rt.chip_states()):
            if self._down_long(("chip", c), s in (ChipState.FAILED, ChipState.ISOLATED), now):
                fab.repair_chip(c, "replaced by the chaos technician")
        for j, ls in enumerate(rt.fabric.link_states()):
            if self._down_long(("link", j), str(ls) != LinkState.UP.value, now):
                fab.repair_link(j, "reseated by the chaos technician")

    def _down_long(self, key: tuple[str, int], down: bool, now: float) -> bool:
        """Whether the part ``key`` has been down ``REPAIR_S`` by now, counted as repaired
        when so (the caller repairs it): up again, its clock starts over."""
        if not down:
            self.down_since.pop(key, None)
            return False
        if now - self.down_since.setdefault(key, now) < REPAIR_S:
            return False
        self.repairs += 1
        del self.down_since[key]
        return True

    # --- acknowledged writes -----------------------------------------------------------------
    def _churn(self) -> None:
        """Stop the oldest small job once two are out, and submit a new one: acked writes."""
        plane = self.plane
        # A job with a fault still being judged is left alone: stopping it would hide the outcome.
        judged = {f.job for f in self.log if f.outcome is None}
        stoppable = [j for j in self.churn if j not in judged]
        if len(self.churn) >= 2 and stoppable:
            jid = stoppable[0]
            self.churn.remove(jid)
            job = plane.table.find(jid)
            if job is not None and not job.ended:
                plane.jobs.stop(jid, actor="chaos")
                self.acked.append(Acked("stop", jid, CHURN_MODEL, 2, plane.tl.now))
        # A small, fast model: a 2-chip llama3-8b step lasts minutes, longer than the judging window.
        v = plane.jobs.submit(CLUSTER, {"model": CHURN_MODEL, "chips": 2, "steps": 10**9,
                                        "checkpoint_interval": 100_000}, actor="chaos")
        self.churn.append(v["id"])
        self.acked.append(Acked("submit", v["id"], CHURN_MODEL, 2, plane.tl.now))

    # --- the run -----------------------------------------------------------------------------
    def setup(self) -> None:
        plane = self.plane
        plane.create_cluster({"name": CLUSTER, "type": "trn2-ultraserver", "spares": 4}, actor="chaos")
        self.advance(plane.tl.now + 30)
        for chips, par in RESIDENT:
            v = plane.jobs.submit(CLUSTER, {"model": MODEL, "chips": chips, "steps": 10**7,
                                            "checkpoint_interval": 50, "parallelism": par}, actor="chaos")
            self.resident.append(v["id"])
            self.acked.append(Acked("submit", v["id"], MODEL, chips, plane.tl.now))
        self.advance(plane.tl.now + 300)

    def run(self) -> dict[str, Any]:
        self.setup()
        kinds = list(FaultKind)
        every = max(1, self.faults // (self.restarts + 1)) if self.restarts else self.faults + 1
        for i in range(self.faults):
            self.inject(i, kinds[i % len(kinds)])
            if i % CHURN_EVERY == CHURN_EVERY - 1:
                self._churn()
            if i % every == every - 1 and self.n_restarts < self.restarts:
                # Mid-recovery (a few ms after the fault) or somewhere in the gap.
                delay = 0.005 if self.n_restarts % 2 == 0 else float(self.rng.uniform(1.0, self.gap_s - 1.0))
                self.advance(self.plane.tl.now + delay)
                self.restart()
            self.advance(self.plane.tl.now + self.gap_s)
        self.advance(self.plane.tl.now + SETTLE_S + EVAL_S)
        self._check_acked()
        return self.result()

    def result(self) -> dict[str, Any]:
        now = self.plane.tl.now
        for jid in self.resident:  # a resident job not running at the end counts too
            job = self.plane.table.find(jid)
            if job is None or (job.ended and job.state != JobState.SUCCEEDED):
                self.lost_jobs.append(f"{jid} ended {job.state.value if job else 'missing'}")
            elif job.state not in _RUNNING and not any(f.job == jid and f.outcome is None for f in self.log):
                since = max((f.t for f in self.log if f.job == jid), default=0.0)
                if now - since > SETTLE_S:
                    self.lost_jobs.append(f"{jid} is {job.state.value} at the end: {job.status.reason}")
        interrupting = [f for f in self.log if f.job is not None and f.effect is not None]
        recovered = sum(f.outcome == "recovered" for f in interrupting)
        by_effect = {e: sum(f.effect == e for f in interrupting) for e in ("paused", "slowed", "stopped")}
        violations = sorted(self.violations.values())
        by_kind = {k.value: sum(f.kind == k.value for f in self.log) for k in FaultKind}
        return {
            "faults": len(self.log),
            "interrupting_faults": len(interrupting),
            "recovered": recovered,
            "no_action_needed": sum(f.outcome == "no_action_needed" for f in self.log),
            "untouched_faults": sum(f.job is None for f in self.log),
            "by_effect": by_effect,
            "unrecovered": [f"{f.kind} at {f.target} (t={f.t:.1f}) on {f.job}: {f.why}"
                            for f in interrupting if f.outcome != "recovered"],
            "jobs_lost": len(self.lost_jobs),
            "lost": list(self.lost_jobs),
            "double_allocations": len(self.doubles),
            "acked_writes": len(self.acked),
            "acked_writes_lost": len(self.acked_lost),
            "acked_lost": list(self.acked_lost),
            "invariant_violations": len(violations),
            "violations": violations,
            "restarts": self.n_restarts,
            "repairs": self.repairs,
            "sim_s": round(now, 1),
            "by_kind": by_kind,
        }
