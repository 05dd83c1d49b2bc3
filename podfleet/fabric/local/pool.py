"""Spawning a gang's worker processes, from warm standbys when there are any.

Warm standbys (torch already imported) make a recovered gang start in ~1 s, not ~5-10 s.
Callers hold the fabric's lock; a refill is handed to the engine thread (``deliver``).

Workers run in the sandbox the settings ask for (``security.sandbox``: on a root server
one uid per job, leased from ``security.uids`` at the job's first gang and released by
``release`` at its end; resource limits). The pool hands each job's directory to that uid
(``security.jobfiles``), stages pushed code read-only for it, and passes the checkpoint
key to each worker over a pipe. A warm standby starts before its job's uid is known, so
on a per-job-uid server it starts as root, runs nothing but podfleet's imports, and
drops to the job's uid itself on assignment before it reads the key or the job.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from podfleet.fabric.local.process import OnExit, OnMessage, WorkerProcess
from podfleet.security.jobfiles import prepare_job_dir, reclaim_job_dir, stage_code
from podfleet.security.sandbox import WorkerSandbox, from_env, key_material
from podfleet.security.uids import UidLeases
from podfleet.security.workerenv import worker_env
from podfleet.training.config import KEY_ENV_DEFAULT, WorkerConfig


class WorkerPool:
    outlives_fabric = False  # its workers are this process's children (``spawner.Spawner``)

    def __init__(self, workdir: Path, *, n_gpus: int, warm_workers: int, refill_delay_s: float,
                 closed: threading.Event, deliver: Callable[..., Any],
                 extra_env: Callable[[int], Mapping[str, str]] | None = None, keep_env: tuple[str, ...] = (),
                 sandbox: WorkerSandbox | None = None) -> None:
        self.workdir, self.n_gpus, self.extra_env = workdir, n_gpus, extra_env
        # Server variables a worker may still see. The checkpoint key's is not among them
        # even when named here: the key goes over a pipe (``key_material``).
        self.keep_env = tuple(k for k in keep_env if k != KEY_ENV_DEFAULT)
        self.sandbox = sandbox if sandbox is not None else from_env()
        self._prepared: set[Path] = set()  # job directories already handed over
        self._staged: dict[Path, str | None] = {}  # job directory -> its gang's staged entrypoint
        self._leases = UidLeases(self.sandbox.uid_range) if self.sandbox.uid_range is not None else None
        self._job_uids: dict[Path, int] = {}  # job directory -> its leased uid
        self.warm_workers, self.refill_delay_s = warm_workers, refill_delay_s
        self.closed, self.deliver = closed, deliver
        self.standbys: list[WorkerProcess] = []
        self._made = 0
        self._took = False

    def chip_env(self, chip: int) -> dict[str, str]:
        env = {"CUDA_VISIBLE_DEVICES": str(chip % self.n_gpus) if self.n_gpus else "", "PODFLEET_CHIP": str(chip)}
        if self.extra_env is not None:
            env.update(self.extra_env(chip))
        return env

    def spawn(self, cfg: WorkerConfig, chip: int, attempt: int, log_path: Path, on_message: OnMessage,
              on_exit: OnExit, group: Mapping[str, Any] | None = None) -> WorkerProcess:
        """One rank's worker: a standby given the rank, else a fresh process."""
        jobdir = log_path.parent
        sb = self.job_sandbox(jobdir)
        if cfg.rank == 0 or jobdir not in self._prepared:
            # Once per gang (rank 0 starts it): code staged afresh, and files the server wrote
            # since the last gang (checkpoint manifests) handed to the job's uid too.
            self._staged[jobdir] = stage_code(sb, cfg.entrypoint, self.workdir / "staged" / jobdir.name)
            prepare_job_dir(sb, jobdir)
            self._prepared.add(jobdir)
        cfg = cfg.replace(entrypoint=self._staged.get(jobdir, cfg.entrypoint))
        key = key_material(cfg.key_file, cfg.key_env) if cfg.encrypt_checkpoints else None
        ident = sb.env(jobdir)
        standby = self._take_standby()
        if standby is not None:
            standby.assign(cfg, chip, attempt, log_path, {**self.chip_env(chip), **ident}, on_message, on_exit,
                           key=key, sandbox=sb)
            self._took = True
            return standby
        # Scrubbed: a job's code must not read the server's secrets (PODFLEET_ADMIN_TOKEN, ...).
        env = worker_env(os.environ, {**self.chip_env(chip), "OMP_NUM_THREADS": str(cfg.threads), **ident},
                         keep=self.keep_env)
        return WorkerProcess(cfg=cfg, chip=chip, attempt=attempt, log_path=log_path, env=env,
                             on_message=on_message, on_exit=on_exit, cwd=jobdir, sandbox=sb, key=key)

    def job_sandbox(self, jobdir: Path) -> WorkerSandbox:
        """The sandbox of the job in ``jobdir``: its own leased uid on a per-job-uid server."""
        if self._leases is None:
            return self.sandbox
        uid = self._job_uids.get(jobdir)
        if uid is None:
            uid = self._job_uids[jobdir] = self._leases.acquire(str(jobdir.resolve()))
        return self.sandbox.for_uid(uid)

    def job_owner(self, jobdir: Path) -> tuple[int, int] | None:
        """(uid, gid) the job in ``jobdir`` runs as, when that is not the server's."""
        if self._leases is not None:
            uid = self._job_uids.get(jobdir)
            return None if uid is None else (uid, uid)
        sb = self.sandbox
        return (sb.uid, sb.gid) if sb.switches_user and sb.uid is not None and sb.gid is not None else None

    def release(self, jobdir: Path) -> None:
        """The job in ``jobdir`` ended: its uid goes back to the pool (whatever still runs as
        it is killed), its directory back to the server, its staged code away."""
        self._prepared.discard(jobdir)
        self._staged.pop(jobdir, None)
        uid = self._job_uids.pop(jobdir, None)
        if uid is None or self._leases is None:
            return
        self._leases.release(str(jobdir.resolve()))
        reclaim_job_dir(jobdir)
        shutil.rmtree(self.workdir / "staged" / jobdir.name, ignore_errors=True)  # the server's own tree

    def gang_started(self) -> None:
        if self._took:
            self._took = False
            # Refill later: a standby importing torch now would slow the gang that just started.
            threading.Timer(self.refill_delay_s, lambda: self.deliver(self.refill)).start()

    def _take_standby(self) -> WorkerProcess | None:
        live = [wp for wp in self.standbys if wp.alive and wp.killed_by is None]
        if not live:
            return None
        wp = max(live, key=lambda w: w.ready)  # a ready one first
        self.standbys.remove(wp)
        return wp

    def refill(self) -> None:
        self.standbys = [wp for wp in self.standbys if wp.alive]
        while not self.closed.is_set() and len(self.standbys) < self.warm_workers:
            self._made += 1
            self.standbys.append(WorkerProcess(
                env=worker_env(os.environ, {"OMP_NUM_THREADS": "1", **self.sandbox.env(None)}, keep=self.keep_env),
                log_path=self.workdir / "standby" / f"standby-{self._made}.log", sandbox=self.sandbox,
                on_message=lambda wp, msg: None,
                on_exit=lambda wp, code: None,  # a dead standby is dropped at the next take/refill
            ))

    def ready(self) -> int:
        return sum(1 for wp in self.standbys if wp.alive and wp.ready)

    def close(self) -> None:
        for wp in self.standbys:
            wp.kill("stop")
        self.standbys.clear()
        for jobdir in list(self._job_uids):
            self.release(jobdir)
