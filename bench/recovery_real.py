"""kill -9 of a worker of a running local job, over and over, through the control plane.

The control plane as served (``compose.build`` on a wall-clock timeline) runs a 2-rank
data-parallel job of the ``medium`` preset (25.5M parameters, gloo on CPU) on a 3-slot
local cluster with one spare and one warm standby worker (``PODFLEET_LOCAL_WARM_WORKERS=1``).
``KILLS`` times, alternating rank 1 and rank 0 (rank 0 hosts the rendezvous store), the
bench asks for ``kill-worker`` (SIGKILL of that rank's process) a few steps after the
previous recovery closed, and waits for the next recovery record.

kill_to_step_s: from the kill (``injected_at``, the plane's clock just after the signal)
to the first step the re-formed gang trained (the record's ``t_end``: the plane's clock
when that step's progress reached it), detection included: measured, nothing modelled.
steps_lost: completed steps redone (``last_step`` - ``restored_step``).
paths: recoveries by mechanism, ``rank-move`` (the other rank kept its process) and
``relaunch`` (the whole gang restarted: the fallback); ``placements``: where the rank went
(the first kill takes the spare; later ones find no free slot and restart the rank on its
own slot once it passes its check). ``survivor_pid_kept``: kills after which the rank
that was not killed still ran in the same process.

phases_p50_s: where the seconds go, the median over the kills of each phase of the
fabric's records (``phases_s``, seconds since the kill): ``detected`` (the engine handled
the exit), ``spawned`` (the replacement assigned), the moved rank's ``started``,
``joined`` (the new process group), ``built``, ``synced`` (state received), the kept
rank's ``lost`` (its collective failed), ``released`` (the broken group dropped),
``rendezvous``, ``joined``, ``synced``, and ``first_step``.

``--quick`` runs the ``debug`` preset (0.13M parameters), 2 kills (tests/test_benchmarks.py).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from podfleet.rehearsal.calibrate import until as _until

NAME = "recovery-real"
DESCRIPTION = ("kill -9 of a local worker, repeated, through the control plane: kill_to_step_s p50/p99, "
               "steps_lost, rank-move vs relaunch")
KILLS = 20
QUICK_KILLS = 2
STEPS_BETWEEN = 3  # steps trained after a recovery closes before the next kill


def _secs(v: object) -> float:
    """A record's time: Unix seconds, or an RFC 3339 string."""
    if isinstance(v, str):
        from datetime import datetime

        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    return float(v)  # type: ignore[arg-type]


def _scenario(plane: Any, name: str, model: str, kills: int) -> dict[str, Any]:
    plane.call_sync(plane.create_cluster, {"name": name, "fabric": "local", "chips": 3, "spares": 1}, actor="bench")
    try:
        _until(lambda: plane.describe_cluster(name)["state"] == "active", 120, "the cluster")
        opts: dict[str, Any] = {"seed": 3, "global_batch": 2, "seq_len": 32, "threads": 1}
        job = plane.call_sync(plane.jobs.submit, name, {
            "model": model, "chips": 2, "steps": 1_000_000, "checkpoint_interval": 0, "options": opts},
            actor="bench")
        jid = job["id"]
        fab = plane.clusters[job["cluster_id"]].fabric  # for its pids and warm standbys: read only

        def view() -> dict[str, Any]:
            return dict(plane.jobs.describe(jid))

        def step() -> int:
            return int(view()["progress"]["step"] or 0)

        _until(lambda: step() >= 3, 600, "the first steps")
        samples: list[dict[str, Any]] = []
        for i in range(kills):
            rank = (i + 1) % 2
            base = step()
            _until(lambda b=base: step() >= b + STEPS_BETWEEN and view()["state"] == "RUNNING", 300,
                   f"steps before kill {i + 1}")
            _until(lambda: fab.warm_ready() >= 1, 120, "a warm standby")
            before = dict(fab.pids(jid))
            out = plane.call_sync(plane.inject_fault, name, "kill-worker", rank=rank, actor="bench")
            n = len(samples)
            rec = _until(lambda n=n: next(iter((view().get("runtime") or {}).get("recoveries", [])[n:]), None),
                         300, f"recovery {i + 1}")
            after = dict(fab.pids(jid))
            other = 1 - rank
            samples.append({"rank": rank, "kill_to_step_s": _secs(rec["t_end"]) - _secs(out["injected_at"]),
                            "steps_lost": int(rec["steps_lost"] or 0), "mechanism": rec.get("mechanism"),
                            "path": rec.get("path"), "state": rec.get("state"),
                            "kept": before.get(other) is not None and before.get(other) == after.get(other)})
        recs = list(fab.job_status(jid).recoveries)
        plane.call_sync(plane.jobs.stop, jid, actor="bench")
        return {**_summary(samples), "phases_p50_s": _phases(recs)}
    finally:
        plane.call_sync(plane.delete_cluster, name, actor="bench")


def _phases(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each phase of the fabric's move records (``phases_s``: seconds since
    the kill): the fabric's (detected, spawned, first step), the moved rank's and the
    kept rank's (started / lost, released, rendezvous, joined, synced)."""
    got: dict[str, list[float]] = {}
    for rec in recs:
        ph = rec.get("phases_s") or {}
        moved = f"rank{rec.get('rank')}"
        for key, val in ph.items():
            if isinstance(val, dict):
                who = "moved" if key == moved else "kept"
                for name, t in val.items():
                    got.setdefault(f"{who}_{name}", []).append(float(t))
            else:
                got.setdefault(key, []).append(float(val))
    return {k: round(float(np.percentile(v, 50)), 3) for k, v in sorted(got.items(), key=lambda kv: np.median(kv[1]))}


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    k2s = np.array([s["kill_to_step_s"] for s in samples])
    lost = [s["steps_lost"] for s in samples]
    paths: dict[str, int] = {"rank-move": 0, "relaunch": 0}
    placements: dict[str, int] = {}
    for s in samples:
        paths[str(s["mechanism"])] = paths.get(str(s["mechanism"]), 0) + 1
        placements[str(s["path"])] = placements.get(str(s["path"]), 0) + 1
    return {
        "kills": len(samples),
        "kill_to_step_s_p50": round(float(np.percentile(k2s, 50)), 3),
        "kill_to_step_s_p99": round(float(np.percentile(k2s, 99)), 3),
        "kill_to_step_s_max": round(float(k2s.max()), 3),
        "steps_lost_max": max(lost),
        "steps_lost_total": sum(lost),
        "paths": paths,
        "placements": placements,
        "survivor_pid_kept": sum(1 for s in samples if s["kept"]),
        "failed_recoveries": sum(1 for s in samples if s["state"] != "done"),
        "kill_to_step_s": [round(float(x), 3) for x in k2s],
    }


def run(quick: bool = False) -> dict:
    from podfleet import compose
    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.factory import LOCAL_WARM_ENV
    from podfleet.store.memory import MemoryStore

    model = "debug" if quick else "medium"
    saved = os.environ.get(LOCAL_WARM_ENV)
    os.environ[LOCAL_WARM_ENV] = "1"
    try:
        with tempfile.TemporaryDirectory(prefix="bench-recovery-real-") as wd:
            parts = compose.build(MemoryStore(), Timeline(seed=7, speed=1.0), workdir=wd)
            plane = parts.plane
            plane.start()
            plane.call_timeout_s = 120
            try:
                moves = _scenario(plane, "moves", model, QUICK_KILLS if quick else KILLS)
            finally:
                plane.stop()
    finally:
        if saved is None:
            os.environ.pop(LOCAL_WARM_ENV, None)
        else:
            os.environ[LOCAL_WARM_ENV] = saved
    return {
        **moves,
        "goal_kill_to_step_s_p99": 5.0,
        "goal_steps_lost": 1,
        "model": f"{model} preset ({'0.13M' if quick else '25.5M'} params), 2 ranks, gloo on CPU, global batch "
                 "2 x 32 tokens, one spare slot, one warm standby",
    }
