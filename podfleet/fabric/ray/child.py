"""A rank's job code, run by a root Ray actor as a child process under the job's own uid.

A raylet started as root starts its actors as root. Job code must never run there: it
could read every key on the node, the server's files and (a private instance) the
server's own memory. So an actor that finds itself root runs the rank the way a local
worker runs (``python -m podfleet.training.worker``) as a child under the sandbox the
node's settings ask for (``security.sandbox``: one uid per job, leased on this node from
``security.uids``, the same for every rank of the job here), with an allow-listed
environment, the job's directory handed to the uid and pushed code staged read-only
(``security.jobfiles``), the key over a pipe. The child makes itself undumpable, and dies
with the actor (``PR_SET_PDEATHSIG``). Its JSON-line reports are relayed to the actor's
reporter, which the driver polls as before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from podfleet.security.files import private_dir
from podfleet.security.jobfiles import prepare_job_dir, reclaim_job_dir, stage_code
from podfleet.security.sandbox import WorkerSandbox, key_material, spawn_worker, worker_reports
from podfleet.security.uids import UidLeases
from podfleet.security.workerenv import worker_env
from podfleet.training.config import EXIT_USER_ERROR, MessageReporter, Reporter, WorkerConfig


def _relay(fd: int, reporter: Reporter) -> dict[str, Any]:
    """Forward the child's reports; returns its last ``error`` / ``done`` message."""
    last: dict[str, Any] = {}
    for msg in worker_reports(fd):
        kind = msg.get("type")
        if kind == "progress":
            step, loss = int(msg["step"]), float(msg["loss"])
            tps, step_s = float(msg.get("tokens_per_s", 0.0)), float(msg.get("step_time_s", 0.0))
            t = msg.get("t")
            if isinstance(reporter, MessageReporter) and isinstance(t, int | float):
                # The child's own end-of-step time, which the rank's measured speed is
                # computed from (ray/telemetry.py), not the time this relay got to it.
                reporter.send("progress", step=step, loss=loss, tokens_per_s=tps, step_time_s=step_s, t=float(t))
            else:
                reporter.progress(step, loss, tps, step_s)
        elif kind == "checkpoint":
            reporter.checkpoint(int(msg["step"]), str(msg.get("path", "")))
        elif kind == "log":
            reporter.log(str(msg.get("line", "")))
        elif kind == "regrouped" and isinstance(reporter, MessageReporter):  # a rank move's gang re-formed
            reporter.send("regrouped", **{k: v for k, v in msg.items() if k not in ("type", "t", "rank")})
        elif kind in ("error", "done"):
            last = msg
        else:
            reporter.heartbeat()
    return last


def run_as_child(cfg: WorkerConfig, sandbox: WorkerSandbox, reporter: Reporter, jobdir: Path,
                 keep_env: Iterable[str] = ()) -> dict[str, Any]:
    """Run rank ``cfg.rank`` in a child under its job's uid; the ``WorkerResult``-shaped dict."""
    owner = f"ray:{jobdir.resolve()}"
    leases = UidLeases(sandbox.uid_range) if sandbox.uid_range is not None else None
    sb = sandbox.for_uid(leases.acquire(owner)) if leases is not None else sandbox
    stage_dir = jobdir.parent / "staged" / f"{jobdir.name}.rank-{cfg.rank}"
    try:
        private_dir(jobdir)
        entry = stage_code(sb, cfg.entrypoint, stage_dir)
        prepare_job_dir(sb, jobdir)
        if cfg.checkpoint_dir and not Path(cfg.checkpoint_dir).resolve().is_relative_to(jobdir.resolve()):
            prepare_job_dir(sb, Path(cfg.checkpoint_dir))
        cfg = cfg.replace(entrypoint=entry)
        key = key_material(cfg.key_file, cfg.key_env) if cfg.encrypt_checkpoints else None
        env = worker_env(os.environ, {**sb.env(jobdir), "OMP_NUM_THREADS": str(cfg.threads)}, keep=keep_env)
        args = ["--config", cfg.to_json(), "--rlimits", sb.limits_arg(), "--die-with-parent", str(os.getpid())]
        if sb.root_opt_in:
            args.append("--allow-root")
        proc, r_fd = spawn_worker(sb, args, log_path=jobdir / f"rank-{cfg.rank}.log", env=env, cwd=jobdir, key=key)
        try:
            last = _relay(r_fd, reporter)
        finally:
            code = proc.wait()
        if last.get("type") == "done":
            return {"rank": cfg.rank, "steps_done": int(last.get("step", 0)), "final_loss": last.get("final_loss"),
                    "exit_code": code, "error": None, "extra": {}}
        err = last.get("message") or f"exit code {code}"
        return {"rank": cfg.rank, "steps_done": int(last.get("step") or 0), "final_loss": None,
                "exit_code": code if code > 0 else EXIT_USER_ERROR, "error": str(err),
                "extra": {"kind": last.get("kind")} if last.get("kind") else {}}
    finally:
        shutil.rmtree(stage_dir, ignore_errors=True)  # the node's own tree, never the job's
        if leases is not None and leases.release(owner) is not None:
            with contextlib.suppress(OSError):
                reclaim_job_dir(jobdir)  # the last rank of the job on this node
