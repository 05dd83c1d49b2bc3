"""The failover drill of ``podfleet verify``: one chip failure under a running probe job.

On a fabric of real workers (``WorkerKill``) it is real: a small probe job (the
``debug`` model) is submitted through the plane's commands, rank 0's worker is killed
once the job has made progress (``kill-worker``, as ``podfleet fault inject`` sends it),
and the drill times until the job runs again past the step it had reached; then the
probe job is stopped. It needs free worker slots for the probe and for the recovery.

On a twin cluster (its fabric declares ``FaultInjection`` and ``ResumableRuns``) the drill
is rehearsed on a copy of the cluster, so the operator's twin and its jobs are not
disturbed: the same type and spares, the whole control plane in virtual time (the path
``podfleet sim`` runs), a probe job on the largest power-of-two block that leaves the spares free, and a ``chip-failure``
under its rank 0. It passes when the job is running again within ``budget_s`` of the
fault (detection to running, from the recovery journal) and no job was lost.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

from podfleet.advisor.checks import Check, CheckStatus
from podfleet.advisor.verify import active
from podfleet.control.plane import ControlPlane
from podfleet.errors import PodfleetError
from podfleet.fabric.base import FaultInjection, ResumableRuns, WorkerKill
from podfleet.rehearsal.rehearsal import rehearse
from podfleet.rehearsal.scenario import Command, FaultCommand, JobConfig, Scenario

FAILOVER_BUDGET_S = 300.0  # a parameter: what the operator accepts for one chip's failover
FAULT_AT_S = 300.0
HORIZON_S = 1800.0
PROBE_MODEL = "llama3-8b"
# The real drill's probe: the smallest trainer preset, a step every ~50 ms, checkpoints often.
REAL_PROBE: dict[str, Any] = {"model": "debug", "steps": 10**6, "checkpoint_interval": 5,
                              "options": {"seed": 7, "global_batch": 8, "seq_len": 32, "step_delay_s": 0.05}}
REAL_TIMEOUT_S = 180.0
ACTOR = "verify-drill"


@dataclass(frozen=True)
class DrillPlan:
    """What the drill needs from the live cluster, read on the engine thread."""

    cluster_type: str
    chips: int
    spares: int
    runnable: bool
    why_not: str = ""
    cluster_id: str = ""
    real: bool = False  # kill a real worker (WorkerKill) rather than rehearse


def plan(plane: ControlPlane, ref: str) -> DrillPlan:
    rt = active(plane, ref)
    fab = rt.fabric
    twin = isinstance(fab, FaultInjection) and isinstance(fab, ResumableRuns)
    real = not twin and isinstance(fab, WorkerKill)
    why = "" if twin or real else "this fabric can neither rehearse a chip failure nor kill a worker"
    return DrillPlan(rt.spec.type, rt.topology.n_chips, len(rt.spares), twin or real, why, rt.id, real)


def run(p: DrillPlan, *, budget_s: float = FAILOVER_BUDGET_S, seed: int = 0,
        plane: ControlPlane | None = None) -> Check:
    """The drill (seconds of wall time; call it off the engine thread). The real drill
    drives ``plane`` through its commands."""
    if not p.runnable:
        return Check("drill", CheckStatus.WARN, {}, (f"not run: {p.why_not}",))
    if p.real:
        if plane is None:
            return Check("drill", CheckStatus.WARN, {}, ("not run: the real drill needs the control plane",))
        return run_real(plane, p, budget_s=budget_s)
    # A gang the planner can lay out (TP x PP x DP): the largest power of two that fits.
    n = 1 << ((p.chips - p.spares).bit_length() - 1)
    sc = Scenario(name="verify-drill", seed=seed, pod_type=p.cluster_type, duration=HORIZON_S,
                  fault_rates="none", spares=p.spares,
                  jobs=[JobConfig(id="probe", model=PROBE_MODEL, chips=n, steps=10**7, checkpoint_interval=20)],
                  commands=[Command(at=FAULT_AT_S, fault=FaultCommand(kind="chip-failure", job="probe", rank=0))])
    report = rehearse(sc)
    rec = report["recoveries"]
    job = next(j for j in report["jobs"] if j["job_id"] == "probe")
    took = rec.get("p99_s")
    figures = {"fault": "chip-failure", "probe_job_chips": n, "spares": p.spares, "recoveries": rec["count"],
               "by_path": rec["by_path"], "failover_s": took, "budget_s": budget_s, "job_state": job["state"],
               "horizon_s": HORIZON_S, "rehearsed": True}
    refused = [c for c in report["commands"] if c["result"] != "ok"]
    if refused:
        return Check("drill", CheckStatus.FAIL, figures, (f"the fault was refused: {refused[0]['result']}",))
    if took is None or str(job["state"]).lower() not in ("running", "checkpointing"):
        return Check("drill", CheckStatus.FAIL, figures,
                     (f"the probe job did not come back ({job['state']}) within {HORIZON_S - FAULT_AT_S:g} s",))
    ok = took <= budget_s
    return Check("drill", CheckStatus.PASS if ok else CheckStatus.FAIL, figures,
                 (f"rehearsed on a copy of the cluster: chip-failure under rank 0 of a {n}-chip job, running again "
                  f"after {took:.4g} s via {', '.join(k for k, v in rec['by_path'].items() if v)} "
                  f"({'within' if ok else 'over'} the {budget_s:g} s budget)",))


def run_real(plane: ControlPlane, p: DrillPlan, *, budget_s: float = FAILOVER_BUDGET_S,
             timeout_s: float = REAL_TIMEOUT_S) -> Check:
    """Kill rank 0's worker under a probe job and time the job back to progress (off the
    engine: every step is a command on the engine thread, ``call_sync``)."""
    call = plane.call_sync
    n = 2 if p.chips - p.spares >= 3 else 1
    figures: dict[str, Any] = {"fault": "kill-worker", "probe_job_chips": n, "budget_s": budget_s, "rehearsed": False}

    def view(jid: str) -> dict[str, Any]:
        return dict(call(plane.jobs.describe, jid))

    def wait(jid: str, cond: Any, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            v = view(jid)
            if cond(v):
                return v
            if v["state"] in ("FAILED", "STOPPED", "SUCCEEDED") or time.monotonic() > deadline:
                raise TimeoutError(f"the probe job {what}: it is {v['state']} ({v.get('reason') or 'no reason'})")
            time.sleep(0.1)

    try:
        jid = str(call(plane.jobs.submit, p.cluster_id, {"name": "verify-drill", **REAL_PROBE, "chips": n},
                       actor=ACTOR)["id"])
    except PodfleetError as exc:
        return Check("drill", CheckStatus.WARN, figures, (f"not run: the probe job was refused: {exc.message}",))
    try:
        before = wait(jid, lambda v: v["state"] == "RUNNING" and (v.get("progress") or {}).get("step", 0) >= 2,
                      "did not start")
        step0 = int(before["progress"]["step"])
        t0 = time.monotonic()
        call(plane.inject_fault, p.cluster_id, "kill-worker", rank=0, job=jid, actor=ACTOR)
        after = wait(jid, lambda v: v["state"] == "RUNNING" and int((v.get("progress") or {}).get("step", 0)) > step0
                     and ("RECOVERING" in (v.get("timestamps") or {})
                          or int(((v.get("runtime") or {}).get("infra_failures")) or 0) >= 1),
                     "did not come back")
        took = time.monotonic() - t0
    except TimeoutError as exc:
        return Check("drill", CheckStatus.FAIL, figures, (str(exc),))
    finally:
        with contextlib.suppress(PodfleetError):  # it may have ended on its own
            call(plane.jobs.stop, jid, actor=ACTOR)
    runtime = after.get("runtime") or {}
    figures.update({"failover_s": round(took, 3), "killed_at_step": step0,
                    "recoveries": len(runtime.get("recoveries") or []), "infra_failures": runtime.get("infra_failures")})
    ok = took <= budget_s
    return Check("drill", CheckStatus.PASS if ok else CheckStatus.FAIL, figures,
                 (f"killed rank 0's worker of a {n}-worker probe job at step {step0}; it ran again past that step "
                  f"after {took:.3g} s ({'within' if ok else 'over'} the {budget_s:g} s budget)",))
