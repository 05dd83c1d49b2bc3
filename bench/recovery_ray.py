"""Recovery of a real Ray job from a killed rank, through the control plane as served.

A Ray head (2 CPUs) and a second raylet (1 CPU) are started on this machine with
``ray start``; the control plane (``compose.build``, paced at the wall clock) runs a
2-rank data-parallel job on a ``--fabric ray`` cluster and ``kill-worker`` kills rank 1's
actor (``ray.kill``, as a lost actor) half-way between two checkpoints. Two shapes:

* no spare (2 chips): the rank goes back onto its own chip once it passes the fabric's
  health check (path ``own-chip``);
* one spare on the second raylet (3 chips): the rank moves to the spare, whose bundle is
  pinned to that raylet (path ``spare``; ``spare_on_raylet``: the new actor's node is it).

resume_s: the control plane's recorded recovery, from the rank's loss being reported
to the first step trained after the relaunch; kill_to_step_s: from the kill command to
that step. steps_lost: steps trained since the checkpoint the gang resumed from, redone.
Every figure comes out of the run (``job describe``'s ``runtime.recoveries``).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

NAME = "recovery-ray"
DESCRIPTION = "kill of a Ray rank, no spare and spare on another raylet: resume_s and steps_lost"
CKPT_EVERY = 4


def _until(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.1)


def _shape(plane: Any, address: str, raylet: str, *, spare: bool, warm_steps: int) -> dict[str, Any]:
    name = "spare" if spare else "nospare"
    body: dict[str, Any] = {"name": name, "fabric": "ray", "chips": 3 if spare else 2, "spares": int(spare),
                            "ray_address": address}
    if spare:
        body["spare_chips"] = [2]  # the second raylet's chip (chips are numbered head first)
    plane.call_sync(plane.create_cluster, body, actor="bench")
    try:
        _until(lambda: plane.describe_cluster(name)["state"] == "active", 120, "the cluster")
        job = plane.call_sync(plane.jobs.submit, name, {
            "model": "debug", "chips": 2, "steps": 100_000, "checkpoint_interval": CKPT_EVERY,
            "options": {"seed": 5, "global_batch": 4, "seq_len": 32, "step_delay_s": 0.1}}, actor="bench")
        jid = job["id"]

        def step() -> int:
            return int(plane.jobs.describe(jid)["progress"]["step"] or 0)

        _until(lambda: step() >= warm_steps, 300, "warm-up steps")
        # Half-way between two checkpoints, so the checkpoint-only loss is the typical one.
        _until(lambda: step() % CKPT_EVERY == CKPT_EVERY // 2, 60, "mid-interval")
        out = plane.call_sync(plane.inject_fault, name, "kill-worker", rank=1, actor="bench")
        _until(lambda: (plane.jobs.describe(jid).get("runtime") or {}).get("recoveries"), 300, "the recovery")
        view = plane.jobs.describe(jid)
        rec = view["runtime"]["recoveries"][0]
        lines = [ln["message"] for ln in plane.jobs.job_logs(jid).since(0)]
        new_chip = view["allocation"]["chips"][1]
        on_raylet = any(f"rank 1 on chip {new_chip}: node {raylet[:12]}" in ln for ln in lines)
        plane.call_sync(plane.jobs.stop, jid, actor="bench")
        return {"resume_s": round(float(rec["resume_s"]), 3),
                # The record ends resume_s after the loss was noticed (detected_t, unix seconds
                # like injected_at; its t_end is RFC 3339).
                "kill_to_step_s": round(float(rec["detected_t"]) + float(rec["resume_s"]) - float(out["injected_at"]), 3),
                "steps_lost": int(rec["steps_lost"]), "path": rec["path"], "restored_from": rec["source"],
                "killed_pid": out["pid"], "new_chip": new_chip, "on_raylet": on_raylet}
    finally:
        plane.call_sync(plane.delete_cluster, name, actor="bench")


def run(quick: bool = False) -> dict:
    from podfleet import compose
    from podfleet.control.fabricaccess import FabricAccess
    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.ray.local_cluster import LocalRayCluster
    from podfleet.store.memory import MemoryStore

    saved = os.environ.pop("PODFLEET_RAY_ADDRESS", None)
    with tempfile.TemporaryDirectory(prefix="bench-recovery-ray-") as wd, \
            LocalRayCluster(head_cpus=2, node_cpus=(1,), env={"RAY_AUTH_MODE": "disabled"}) as cluster:
        [raylet] = cluster.wait_nodes()
        # The bench's own Ray cluster is the one address its clusters may name.
        parts = compose.build(MemoryStore(), Timeline(seed=7, speed=1.0), workdir=wd,
                              fabric_access=FabricAccess(ray_addresses=(cluster.address,)))
        plane = parts.plane
        plane.start()
        plane.call_timeout_s = 120
        try:
            warm = 6 if quick else 14
            own = _shape(plane, cluster.address, raylet, spare=False, warm_steps=warm)
            moved = _shape(plane, cluster.address, raylet, spare=True, warm_steps=warm)
        finally:
            plane.stop()
    if saved is not None:
        os.environ["PODFLEET_RAY_ADDRESS"] = saved
    return {
        "resume_s": own["resume_s"],
        "steps_lost": own["steps_lost"],
        "kill_to_step_s": own["kill_to_step_s"],
        "path": own["path"],
        "restored_from": own["restored_from"],
        "spare_resume_s": moved["resume_s"],
        "spare_steps_lost": moved["steps_lost"],
        "spare_kill_to_step_s": moved["kill_to_step_s"],
        "spare_path": moved["path"],
        "spare_on_raylet": moved["on_raylet"],
        "killed_pid_known": own["killed_pid"] is not None and moved["killed_pid"] is not None,
        "checkpoint_interval_steps": CKPT_EVERY,
        "ray_nodes": cluster.n_nodes,
        "model": "debug preset, 2 ranks (Ray actors, 1 CPU each), gloo, global batch 4 x 32 tokens, "
                 "step_delay_s 0.1",
    }
