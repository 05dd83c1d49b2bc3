"""kill -9 of a rank's actor process of a running Ray job, over and over, through the
control plane as served.

A Ray head (2 CPUs) and a second raylet (1 CPU) are started on this machine with
``ray start``; the control plane (``compose.build``, paced at the wall clock) runs a
2-rank data-parallel job on a 3-chip ``--fabric ray`` cluster whose spare (chip 2) is the
second raylet's. ``KILLS`` times, alternating rank 1 and rank 0 (rank 0 hosts the
rendezvous store), the bench sends SIGKILL to that rank's actor process (its pid as the
fabric reports it: the raylets run on this machine) a few steps after the previous
recovery closed, and waits for the next recovery record.

kill_to_step_s (the headline): from the kill (the wall clock just before the signal) to
the first step the re-formed gang trained (the record's ``t_end``: the plane's clock when
that step's progress reached it), detection included: measured, nothing modelled.
resume_s: the record's own figure, from the fabric noticing the loss to that step.
steps_lost: completed steps redone (``last_step`` - ``restored_step``).
paths: recoveries by mechanism, ``rank-move`` (the other rank kept its actor process)
and ``relaunch`` (the whole gang restarted from its last checkpoint: the fallback);
``placements``: where the rank went (the first kill takes the spare on the second raylet;
later ones find it held and come back on the killed rank's own chip).
``survivor_pid_kept``: kills after which the rank that was not killed still ran in the
same process. Every figure comes out of the run (``job describe``'s ``runtime.recoveries``).

``PODFLEET_BENCH_RAY_KILLS`` sets the number of kills (default 20); ``--quick`` runs 2.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NAME = "recovery-ray"
DESCRIPTION = ("kill -9 of a Ray rank's actor process, repeated, through the control plane on 2 raylets: "
               "kill_to_step_s p50/p99, steps_lost, rank-move vs relaunch")
KILLS = 20
QUICK_KILLS = 2
STEPS_BETWEEN = 3  # steps trained after a recovery closes before the next kill
CKPT_EVERY = 4  # the fallback's relaunch restarts from the last of these


def _recovery_real() -> Any:
    """bench/recovery_real.py, whose summary (p50/p99, paths, placements) this bench shares;
    bench modules are loaded by path (``podfleet.benchmarks.discover``), not as a package."""
    name = "podfleet_bench_recovery_real"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("recovery_real.py"))
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _scenario(plane: Any, address: str, raylet: str, kills: int, warm: bool) -> dict[str, Any]:
    from podfleet.rehearsal.calibrate import until as _until

    real = _recovery_real()
    _secs, _summary = real._secs, real._summary

    name = "raymoves"
    plane.call_sync(plane.create_cluster, {"name": name, "fabric": "ray", "chips": 3, "spares": 1,
                                           "spare_chips": [2], "ray_address": address}, actor="bench")
    try:
        _until(lambda: plane.describe_cluster(name)["state"] == "active", 120, "the cluster")
        job = plane.call_sync(plane.jobs.submit, name, {
            "model": "debug", "chips": 2, "steps": 1_000_000, "checkpoint_interval": CKPT_EVERY,
            "options": {"seed": 5, "global_batch": 4, "seq_len": 32, "step_delay_s": 0.1}}, actor="bench")
        jid = job["id"]
        fab = plane.clusters[job["cluster_id"]].fabric  # for the ranks' pids: read only

        def view() -> dict[str, Any]:
            return dict(plane.jobs.describe(jid))

        def step() -> int:
            return int(view()["progress"]["step"] or 0)

        def pids() -> dict[int, int]:
            return {int(r["rank"]): int(r["pid"] or 0) for r in fab.job_status(jid)["ranks"]}

        _until(lambda: step() >= 6 and view()["state"] == "RUNNING", 300, "the first steps")
        samples: list[dict[str, Any]] = []
        on_raylet = 0
        breakdown: list[dict[str, float]] = []
        for i in range(kills):
            rank = (i + 1) % 2
            base = step()
            _until(lambda b=base: step() >= b + STEPS_BETWEEN and view()["state"] == "RUNNING", 300,
                   f"steps before kill {i + 1}")
            if warm:
                _until(lambda: fab.warm_ready() >= 2, 180, "a warm standby on each node")
            before = _until(lambda: (p := pids()) and all(p.values()) and p, 60, "the ranks' pids")
            killed_at = time.time()
            os.kill(before[rank], signal.SIGKILL)
            n = len(samples)
            rec = _until(lambda n=n: next(iter((view().get("runtime") or {}).get("recoveries", [])[n:]), None),
                         300, f"recovery {i + 1}")
            _until(lambda: view()["state"] == "RUNNING", 120, f"RUNNING after recovery {i + 1}")
            after = pids()
            other = 1 - rank
            chip = view()["allocation"]["chips"][rank]
            lines = [ln["message"] for ln in plane.jobs.job_logs(jid).since(0)]
            done = [ln for ln in lines if "rank move generation" in ln and " done: " in ln]
            on_raylet += chip == 2 and any(f"rank {rank} on chip 2: node {raylet[:12]}" in ln for ln in lines)
            if done and i < len(done):
                # "... its actor ran A s and the gang re-formed B s after the loss was seen"
                words = done[i].split()
                breakdown.append({"actor_s": float(words[words.index("ran") + 1]),
                                  "reformed_s": float(words[words.index("re-formed") + 1])})
            samples.append({"rank": rank, "kill_to_step_s": _secs(rec["t_end"]) - killed_at,
                            "resume_s": float(rec.get("resume_s") or 0.0),
                            "steps_lost": int(rec["steps_lost"] or 0), "mechanism": rec.get("mechanism"),
                            "path": rec.get("path"), "state": rec.get("state"),
                            "kept": before.get(other) is not None and before.get(other) == after.get(other)})
        plane.call_sync(plane.jobs.stop, jid, actor="bench")
        out = _summary(samples)
        out["resume_s_p50"] = round(float(sorted(s["resume_s"] for s in samples)[len(samples) // 2]), 3)
        out["on_spare_raylet"] = on_raylet  # recoveries after which the rank ran on the spare's raylet
        out["moves_breakdown_s"] = breakdown  # from the loss seen: new actor up, gang re-formed
        return out
    finally:
        plane.call_sync(plane.delete_cluster, name, actor="bench")


def run(quick: bool = False) -> dict:
    from podfleet import compose
    from podfleet.control.fabricaccess import FabricAccess
    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.ray.local_cluster import LocalRayCluster
    from podfleet.fabric.ray.standby import WARM_ENV
    from podfleet.store.memory import MemoryStore

    kills = QUICK_KILLS if quick else int(os.environ.get("PODFLEET_BENCH_RAY_KILLS", str(KILLS)))
    warm = int(os.environ.get("PODFLEET_BENCH_RAY_WARM", "1"))  # standby actors per node (0: cold moves)
    saved = os.environ.pop("PODFLEET_RAY_ADDRESS", None)
    saved_warm = os.environ.get(WARM_ENV)
    os.environ[WARM_ENV] = str(warm)  # read by each Ray fabric the plane builds
    try:
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
                moves = _scenario(plane, cluster.address, raylet, kills, warm > 0)
            finally:
                plane.stop()
    finally:
        if saved_warm is None:
            os.environ.pop(WARM_ENV, None)
        else:
            os.environ[WARM_ENV] = saved_warm
        if saved is not None:
            os.environ["PODFLEET_RAY_ADDRESS"] = saved
    return {
        "warm_actors_per_node": warm,
        **moves,
        "goal_kill_to_step_s_p99": 8.0,
        "checkpoint_interval_steps": CKPT_EVERY,
        "ray_nodes": cluster.n_nodes,
        "model": "debug preset, 2 ranks (Ray actors, 1 CPU each), gloo, global batch 4 x 32 tokens, "
                 "step_delay_s 0.1; 3 chips, the spare on the second raylet",
    }
