"""Rebalancing a real data-parallel job with one slow worker, through the control plane.

A control plane as ``podfleet up`` builds it (paced timeline, health, recovery, the API
served) with one cluster of ``RANKS`` worker slots: ``local`` by default, or ``ray``
(``podfleet bench run balance-real --fabric ray``: a Ray head with a CPU per rank
started on this machine with ``ray start``, each rank a Ray actor). Everything goes
through the REST API (the SDK client). Four runs of the same job (``tiny`` preset,
gloo, global batch ``GLOBAL_BATCH`` x ``SEQ_LEN`` tokens, one thread per worker):

1. none slowed: the reference tokens/s;
2. rank ``SLOW_RANK`` slowed ``FACTOR`` x with the ``slow-worker`` fault (InjectFault,
   ``podfleet fault inject CLUSTER --slow-worker RANK:FACTOR``) and the cluster's
   balancer paused (``ClusterBalancer.paused``: it samples, it does not act);
3. the same fault with the balancer on;
4. none slowed again (below).

Nothing tells the balancer which rank is slow: the slowed worker sleeps ``(FACTOR - 1)
x`` its unslowed step time per sample x its share after each step (training/loop
``SlowDown``), the fabric measures each rank's samples/s from its workers' reports
(fabric/local/speed.py; on Ray from the reports its actors relay, fabric/ray/telemetry.py),
the control plane's ``ClusterBalancer`` samples that as speed, ``Rebalancer.step``
decides the split and the fabric's ``set_work_split`` applies it (on Ray: a control file
rank 0's actor writes on its node): the twin's code path after the sample. tokens/s =
completed steps x tokens per step / wall time over ``MEASURE_S``.

The reference is the mean of runs 1 and 4: on a machine whose load drifts (shared with
others) one reference taken minutes before the others would credit or blame the
balancer for the drift; ``reference_drift`` (4. / 1. - 1) says how far it moved.
``tokens_per_s_ratio`` = run 3 / reference, ``tokens_per_s_ratio_without_rebalancing`` =
run 2 / reference. The ceiling with a core per worker is ``(RANKS - 1 + 1 / FACTOR) /
RANKS`` (``ideal_ratio``): the slow rank still computes at half speed. Workers that
share fewer cores than there are of them do not scale that simply (a sleeping worker
frees a core for the others), so read the figure with ``cpus`` beside it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.compose import build
from podfleet.control.balancing import ClusterBalancer
from podfleet.control.fabricaccess import FabricAccess
from podfleet.engine.timeline import Timeline
from podfleet.sdk.client import PodfleetClient as Client
from podfleet.store.memory import MemoryStore

NAME = "balance-real"
DESCRIPTION = ("one of a local (or --fabric ray) job's workers slowed 2x, through the control plane's balancer: "
               "tokens/s over none slowed, with and without rebalancing (goal >= 0.90 and +0.15)")
FABRICS = ("local", "ray")  # ``bench run balance-real --fabric ray``

SLOW_RANK = 1
FACTOR = 2.0
SEQ_LEN = 64
TOKEN = "pf_bench-balance-real-0123456789abcdef"


def _ranks() -> int:
    # A core per worker where the machine has them (8 ranks: ceiling 0.9375), else 4.
    return 8 if (os.cpu_count() or 2) >= 10 else 4


def _tps(c: Client, job_id: str, seconds: float, tokens_per_step: int) -> tuple[float, int]:
    s0, t0 = int(c.describe_training_job(job_id)["progress"].get("step", 0)), time.monotonic()
    time.sleep(seconds)
    st = c.describe_training_job(job_id)
    if st["state"] != "RUNNING":
        raise RuntimeError(f"job {job_id} is {st['state']}: {st.get('reason')}")
    steps = int(st["progress"].get("step", 0)) - s0
    return steps * tokens_per_step / (time.monotonic() - t0), steps


def _wait(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


@contextlib.contextmanager
def _ray_head(ranks: int) -> Iterator[str]:
    """A private Ray head on this machine with a CPU per rank (token authentication off on
    its loopback ports); its address, and every Ray process of it stopped at the end."""
    from podfleet.fabric.ray.local_cluster import LocalRayCluster

    saved = os.environ.pop("PODFLEET_RAY_ADDRESS", None)
    try:
        with LocalRayCluster(head_cpus=ranks, node_cpus=(), env={"RAY_AUTH_MODE": "disabled"}) as cluster:
            cluster.wait_nodes()
            yield cluster.address
    finally:
        if saved is not None:
            os.environ["PODFLEET_RAY_ADDRESS"] = saved


def run(quick: bool = False, fabric: str = "local") -> dict[str, Any]:
    ranks = _ranks()
    if fabric == "ray":
        with _ray_head(ranks) as address:
            return _measure(quick, ranks, fabric, address)
    return _measure(quick, ranks, fabric, None)


def _measure(quick: bool, ranks: int, fabric: str, ray_address: str | None) -> dict[str, Any]:
    global_batch = 16 * ranks  # 16 samples per rank at an even split: the split's granularity
    tokens_per_step = global_batch * SEQ_LEN
    warm_steps, measure_s, settle_s = (5, 6.0, 10.0) if quick else (20, 20.0, 20.0)
    spec = {"model": "tiny", "chips": ranks, "steps": 10**7,
            "options": {"global_batch": global_batch, "seq_len": SEQ_LEN, "threads": 1,
                        "encrypt_checkpoints": False}}
    where = {"ray_address": ray_address} if ray_address else {}
    access = FabricAccess(ray_addresses=(ray_address,)) if ray_address else None
    with tempfile.TemporaryDirectory(prefix="bench-balance-real-") as wd:
        parts = build(MemoryStore(), Timeline(seed=1, speed=1.0), telemetry_interval_s=0.5,
                      balance_interval_s=0.5, workdir=wd, fabric_access=access)
        plane = parts.plane
        bootstrap_admin(plane, TOKEN)
        with serve_in_thread(plane, parts=parts) as url:
            c = Client(url, TOKEN)
            c.create_cluster("bal", fabric=fabric, chips=ranks, spares=0, **where)
            _wait(lambda: c.describe_cluster("bal")["state"] == "active", 120, "the cluster")
            rt = plane.resolve("bal")
            balancer = rt.balancer
            if not isinstance(balancer, ClusterBalancer):
                raise RuntimeError(f"the {fabric} cluster has no balancer: ClusterBalancer.supported refused its "
                                   f"fabric")

            def job_run(slow: bool, rebalance: bool) -> dict[str, Any]:
                balancer.paused = not rebalance
                jid = str(c.submit_training_job("bal", **spec)["id"])
                _wait(lambda: int(c.describe_training_job(jid)["progress"].get("step", 0)) >= warm_steps, 300, "warm-up")
                if slow:
                    c.slow_worker("bal", SLOW_RANK, FACTOR, job=jid)
                    time.sleep(settle_s)
                tps, steps = _tps(c, jid, measure_s, tokens_per_step)
                sched = c.describe_training_job(jid).get("scheduling", {})
                c.stop_training_job(jid)
                _wait(lambda: c.describe_training_job(jid)["state"] in ("STOPPED", "FAILED", "SUCCEEDED"), 60, "the stop")
                split = sched.get("work_split") or {}
                return {"tps": tps, "steps": steps, "rebalances": int(sched.get("rebalances") or 0),
                        "split": split.get("shares"), "applied": split.get("applied")}

            clean = job_run(slow=False, rebalance=True)
            stuck = job_run(slow=True, rebalance=False)
            fixed = job_run(slow=True, rebalance=True)
            again = job_run(slow=False, rebalance=True)
    reference = (clean["tps"] + again["tps"]) / 2
    ratio = fixed["tps"] / reference
    without = stuck["tps"] / reference
    slots = "Ray actors (1 CPU each) on a private Ray head" if fabric == "ray" else "slots"
    return {
        "fabric": fabric,
        "tokens_per_s_ratio": round(ratio, 4),
        "tokens_per_s_ratio_without_rebalancing": round(without, 4),
        "gain_over_no_rebalancing": round(ratio - without, 4),
        "ideal_ratio": round((ranks - 1 + 1 / FACTOR) / ranks, 4),
        "tokens_per_s_none_slowed": round(reference, 1),
        "tokens_per_s_none_slowed_first_last": [round(clean["tps"], 1), round(again["tps"], 1)],
        "reference_drift": round(again["tps"] / clean["tps"] - 1, 4),
        "tokens_per_s_without_rebalancing": round(stuck["tps"], 1),
        "tokens_per_s_rebalanced": round(fixed["tps"], 1),
        "steps_measured": [clean["steps"], stuck["steps"], fixed["steps"], again["steps"]],
        "rebalances": fixed["rebalances"],
        "rebalances_while_paused": stuck["rebalances"],
        "rebalances_none_slowed": clean["rebalances"] + again["rebalances"],
        "final_split": fixed["split"],
        "split_applied": fixed["applied"],
        "goal": ">= 0.90 and >= 0.15 over the no-rebalance figure",
        "cpus": os.cpu_count(),
        "setup": f"control plane + {fabric} cluster of {ranks} {slots} through the API; tiny preset, gloo, global "
                 f"batch {global_batch} x {SEQ_LEN} tokens; rank {SLOW_RANK} slowed {FACTOR:g}x by the slow-worker "
                 f"fault",
    }
