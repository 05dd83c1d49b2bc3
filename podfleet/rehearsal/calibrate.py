"""Measure the recovery costs the twin samples, on real worker processes, and write them
to ``podfleet/recovery/data/measured_costs.json`` (``python -m podfleet.rehearsal.calibrate``).

Three measurements, each the path users run (the control plane as served, ``compose.build``
on a wall-clock timeline, a ``local`` cluster of real training workers):

* ``rank_moves``: ``kill-worker`` (SIGKILL) of one rank of a 2-rank data-parallel ``debug``
  job with a spare and one warm standby, alternating ranks; each becomes a rank move (the
  other rank keeps its process, the newcomer gets its state from it). Per kill, from the
  fabric's own record (monotonic clock): kill -> the fabric sees the exit
  (``kill_to_detect_s``), detection -> the first step trained by the re-formed gang
  (``detect_to_step_s``) and the state transfer inside it (``restore_s``).
* ``relaunches``: the same kill of a 1-rank job with checkpoints and no warm standby: no
  peer holds its state, so the gang relaunches cold (every process imports torch again)
  and loads the latest checkpoint. Same fields, ``state_bytes`` the checkpoint it read.
* ``checkpoint_io``: encrypted write and restore of the ``small`` GPT with its AdamW state
  (as ``bench/checkpoint_io.py``), bytes/s per repetition.

The file keeps the raw samples plus the command, the UTC time, the machine (with its load
average: a shared machine says so) and the git commit; ``recovery.model.load_measured``
reads it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from podfleet.recovery.model import MEASURED_COSTS_PATH, SCHEMA

COMMAND = "python -m podfleet.rehearsal.calibrate"
MOVE_KILLS = 8
RELAUNCH_KILLS = 4
IO_REPS = 5
STEPS_BETWEEN = 3  # steps trained after a recovery closes before the next kill


def until(cond: Callable[[], object], timeout_s: float, what: str) -> Any:
    """Poll ``cond`` every 50 ms until it is truthy (returned), or raise naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def _kills(plane: Any, name: str, *, chips: int, spares: int, warm: int, kills: int,
           checkpoint_interval: int) -> list[dict[str, Any]]:
    """``kills`` kill -9 of a running job's workers; the fabric's record of each recovery."""
    from podfleet.fabric.factory import LOCAL_WARM_ENV

    with _env(LOCAL_WARM_ENV, str(warm)):
        plane.call_sync(plane.create_cluster, {"name": name, "fabric": "local", "chips": chips + spares,
                                               "spares": spares}, actor="calibrate")
        until(lambda: plane.describe_cluster(name)["state"] == "active", 120, f"cluster {name}")
    try:
        job = plane.call_sync(plane.jobs.submit, name, {
            "model": "debug", "chips": chips, "steps": 1_000_000, "checkpoint_interval": checkpoint_interval,
            "options": {"seed": 3, "global_batch": 2, "seq_len": 32, "threads": 1}}, actor="calibrate")
        jid = job["id"]
        fab = plane.clusters[job["cluster_id"]].fabric

        def step() -> int:
            return int(plane.jobs.describe(jid)["progress"]["step"] or 0)

        def trained(base: int) -> bool:
            return step() >= base + STEPS_BETWEEN and plane.jobs.describe(jid)["state"] == "RUNNING"

        def checkpointed(base: int) -> bool:  # a committed checkpoint of this attempt to relaunch from
            return int(fab.job_status(jid).checkpoint_step or 0) > base

        def recovered(n: int) -> bool:
            return len(fab.job_status(jid).recoveries) >= n

        until(lambda: step() >= 3, 600, "the first steps")
        for i in range(kills):
            base = step()
            until(functools.partial(trained, base), 300, f"steps before kill {i + 1}")
            if warm:
                until(lambda: fab.warm_ready() >= 1, 120, "a warm standby")
            if checkpoint_interval:
                until(functools.partial(checkpointed, base), 300, f"a checkpoint before kill {i + 1}")
            plane.call_sync(plane.inject_fault, name, "kill-worker", rank=(i + 1) % chips, actor="calibrate")
            until(functools.partial(recovered, i + 1), 300, f"recovery {i + 1}")
        recs = list(fab.job_status(jid).recoveries)
        plane.call_sync(plane.jobs.stop, jid, actor="calibrate")
    finally:
        plane.call_sync(plane.delete_cluster, name, actor="calibrate")
    return recs


def _sample(rec: dict[str, Any], state_bytes: float | None = None) -> dict[str, Any]:
    out = {"kill_to_detect_s": round(rec["detect_mono"] - rec["kill_mono"], 4),
           "detect_to_step_s": round(rec["first_step_mono"] - rec["detect_mono"], 4),
           "mechanism": rec.get("mechanism"), "source": rec.get("source"), "path": rec.get("path")}
    if rec.get("restore_s") is not None:
        out["restore_s"] = round(float(rec["restore_s"]), 4)
    if state_bytes is not None:
        out["state_bytes"] = state_bytes
    return out


def _debug_state_bytes() -> float:
    """What a ``debug`` rank restores: fp32 weights + AdamW m and v (``training/``)."""
    from podfleet.training.model import build_model

    return float(sum(p.numel() for p in build_model("debug", 0).parameters()) * 12)


def recoveries(move_kills: int = MOVE_KILLS, relaunch_kills: int = RELAUNCH_KILLS) -> dict[str, Any]:
    from podfleet import compose
    from podfleet.engine.timeline import Timeline
    from podfleet.store.memory import MemoryStore

    with tempfile.TemporaryDirectory(prefix="calibrate-recovery-") as wd:
        plane = compose.build(MemoryStore(), Timeline(seed=7, speed=1.0), workdir=wd).plane
        plane.start()
        plane.call_timeout_s = 120
        try:
            moves = _kills(plane, "moves", chips=2, spares=1, warm=1, kills=move_kills, checkpoint_interval=0)
            cold = _kills(plane, "cold", chips=1, spares=0, warm=0, kills=relaunch_kills, checkpoint_interval=2)
        finally:
            plane.stop()
    nbytes = _debug_state_bytes()
    bad = [r for r in moves if r.get("mechanism") != "rank-move"] + \
          [r for r in cold if r.get("mechanism") != "relaunch" or r.get("source") != "checkpoint"]
    if bad:
        raise RuntimeError(f"{len(bad)} recoveries took another path than asked: "
                           f"{[(r.get('mechanism'), r.get('source')) for r in bad]}")
    return {"rank_moves": [_sample(r) for r in moves], "relaunches": [_sample(r, nbytes) for r in cold]}


def checkpoint_io(reps: int = IO_REPS) -> dict[str, Any]:
    import torch

    from podfleet.checkpoint import manifest
    from podfleet.checkpoint.torch_state import load, snapshot, write_shard
    from podfleet.training.model import build_model

    torch.set_num_threads(1)
    model = build_model("small", 0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for p in model.parameters():  # optimizer state, as after a step
        p.grad = torch.zeros_like(p)
    opt.step()
    kek = secrets.token_bytes(32)
    write, restore, size = [], [], 0
    with tempfile.TemporaryDirectory(prefix="calibrate-ckpt-") as wd:
        for i in range(reps):
            root = Path(wd) / str(i)
            t0 = time.perf_counter()
            path = write_shard(root, "calibrate", 1, 0, snapshot(model, opt, 0, 1), kek)
            w = time.perf_counter() - t0
            manifest.commit(root, "calibrate", 1, 1)
            size = path.stat().st_size
            t0 = time.perf_counter()
            load(manifest.step_dir(root, 1), "calibrate", kek)
            r = time.perf_counter() - t0
            write.append(round(size / w))
            restore.append(round(size / r))
    return {"model": "small", "bytes": size, "encrypted": True, "write_bytes_per_s": write,
            "restore_bytes_per_s": restore}


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).parent, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine(shared: bool) -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "load_avg_1_5_15": [round(x, 2) for x in load] if load else None,
            "shared": shared}


def calibrate(move_kills: int = MOVE_KILLS, relaunch_kills: int = RELAUNCH_KILLS, io_reps: int = IO_REPS,
              shared: bool = False, note: str = "") -> dict[str, Any]:
    started = datetime.now(UTC)
    rec = recoveries(move_kills, relaunch_kills)
    io = checkpoint_io(io_reps)
    return {
        "schema": SCHEMA,
        "command": f"{COMMAND} --move-kills {move_kills} --relaunch-kills {relaunch_kills} --io-reps {io_reps}"
                   + (" --shared" if shared else ""),
        "started_utc": started.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "git_commit": _git_commit(),
        "machine": machine(shared),
        "note": note,
        "setup": {
            "rank_moves": "local cluster, 2-rank DP job of the debug preset (0.13M params, gloo on CPU), one spare, "
                          "one warm standby; kill-worker alternating ranks; fabric record: kill_mono, detect_mono, "
                          "first_step_mono, restore_s",
            "relaunches": "local cluster, 1-rank job of the debug preset, checkpoint every 2 steps, no warm standby; "
                          "kill-worker -> cold relaunch from the latest checkpoint",
            "checkpoint_io": "small preset (10.8M params) + AdamW state, AES-256-GCM, atomic write with fsync, "
                             "local disk",
        },
        **rec,
        "checkpoint_io": io,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m podfleet.rehearsal.calibrate", description=__doc__.split("\n")[0])
    ap.add_argument("--move-kills", type=int, default=MOVE_KILLS)
    ap.add_argument("--relaunch-kills", type=int, default=RELAUNCH_KILLS)
    ap.add_argument("--io-reps", type=int, default=IO_REPS)
    ap.add_argument("--shared", action="store_true", help="the machine runs other work: say so in the file")
    ap.add_argument("--note", default="")
    ap.add_argument("--output", default=str(MEASURED_COSTS_PATH), help="where to write (default: the packaged file)")
    a = ap.parse_args(argv)
    if min(a.move_kills, a.relaunch_kills, a.io_reps) < 1:
        ap.error("--move-kills, --relaunch-kills and --io-reps must be at least 1")
    data = calibrate(a.move_kills, a.relaunch_kills, a.io_reps, a.shared, a.note)
    Path(a.output).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {a.output}: {len(data['rank_moves'])} rank moves, {len(data['relaunches'])} relaunches, "
          f"{a.io_reps} checkpoint write/restore pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
