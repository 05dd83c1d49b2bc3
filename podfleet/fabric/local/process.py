"""One worker subprocess: spawn (or keep warm), read its JSON-line report channel, kill.

The report channel is a pipe on its own file descriptor (not stdout), so a user
script's prints cannot corrupt it; stdout and stderr go to the rank's log file.
EOF on the pipe means the process is gone (or closing), which is how an exit is
noticed within milliseconds; the reader thread then reaps it and reports the code.

A *standby* (``cfg=None``) is a warm process that has already imported torch and waits
for an assignment on stdin; ``assign`` hands it a rank. Recovery takes standbys so a
replacement gang skips the multi-second torch import.

A worker may run as another, unprivileged user under resource limits (``sandbox``,
``podfleet.security.sandbox``); the checkpoint key reaches it over a pipe of its own
(``--key-fd``) or, for a standby, in its assignment on stdin: never in its environment
or in a file it could read. A standby of a per-job-uid server starts as root and is told
the job's uid in its assignment; it drops to it before it reads anything else of the job.
A worker that finds itself root refuses to run unless root was opted into
(``--allow-root``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podfleet.security.files import private_dir
from podfleet.security.jobfiles import read_tail
from podfleet.security.sandbox import WorkerSandbox, spawn_worker, worker_reports
from podfleet.training.config import WorkerConfig

Message = dict[str, Any]
OnMessage = Callable[["WorkerProcess", Message], None]
OnExit = Callable[["WorkerProcess", int], None]


class WorkerProcess:
    def __init__(
        self,
        *,
        env: dict[str, str],
        log_path: Path,
        on_message: OnMessage,
        on_exit: OnExit,
        cfg: WorkerConfig | None = None,
        chip: int = -1,
        attempt: int = 0,
        cwd: Path | None = None,
        sandbox: WorkerSandbox | None = None,
        key: bytes | None = None,
    ) -> None:
        self.cfg: WorkerConfig | None = cfg
        self.chip, self.attempt, self.log_path = chip, attempt, log_path
        self.started_mono = time.monotonic()
        self.last_beat_mono = self.started_mono
        self.armed = False  # hang detection starts once torch is imported (the import can starve heartbeats)
        self.ready = False  # a standby that finished preloading
        self.exit_code: int | None = None
        # Set on the engine thread once the exit was handled. ``exit_code`` is set on the
        # reader thread earlier, so judging "the gang is down" by it would let the job's
        # final event overtake the last ``worker-exited``.
        self.exit_handled = False
        self.killed_by: str | None = None  # "fault", "hang", "stop", "recovery": why *we* killed it
        self.kill_mono: float | None = None
        self.error: Message | None = None  # the worker's last "error" report, if any
        self.hang_reported = False
        self._on_message, self._on_exit = on_message, on_exit
        self.sandbox = sandbox or WorkerSandbox()
        args = ["--standby"] if cfg is None else ["--config", cfg.to_json()]
        args += ["--rlimits", self.sandbox.limits_arg()]
        if self.sandbox.root_opt_in or os.geteuid() != 0:
            # Root on purpose (or a server that is not root anyway): any other worker that is
            # still root when its job's code is due (a standby told no uid) refuses to run it.
            args.append("--allow-root")
        # Logs are the job's: owner-only (0600), in the job's own directory, which is also
        # the worker's working directory.
        self.popen, r_fd = spawn_worker(self.sandbox, args, log_path=log_path, env=env, cwd=cwd, key=key,
                                        stdin=subprocess.PIPE if cfg is None else subprocess.DEVNULL)
        self.pid = self.popen.pid
        self._reader = threading.Thread(target=self._read, args=(r_fd,), name=f"worker-{self.pid}", daemon=True)
        self._reader.start()

    @property
    def rank(self) -> int:
        return self.cfg.rank if self.cfg else -1

    @property
    def alive(self) -> bool:
        return self.exit_code is None

    def assign(self, cfg: WorkerConfig, chip: int, attempt: int, log_path: Path, env: dict[str, str],
               on_message: OnMessage, on_exit: OnExit, key: bytes | None = None,
               sandbox: WorkerSandbox | None = None) -> None:
        """Give a standby its rank (and the checkpoint key); its output moves to ``log_path``.
        ``sandbox``: the job's, when the standby must first drop to the job's uid."""
        self.cfg, self.chip, self.attempt, self.log_path = cfg, chip, attempt, log_path
        self._on_message, self._on_exit = on_message, on_exit
        self.started_mono = self.last_beat_mono = time.monotonic()
        job_sb = sandbox or self.sandbox
        if not job_sb.switches_user:
            private_dir(log_path.parent)  # else the pool handed the job's directory to the worker's user
        assert self.popen.stdin is not None
        msg: dict[str, Any] = {"config": cfg.to_json(), "env": env, "log": str(log_path),
                               "cwd": str(log_path.parent)}
        if job_sb.switches_user and job_sb.uid != self.sandbox.uid:
            msg["uid"], msg["gid"] = job_sb.uid, job_sb.gid
            self.sandbox = job_sb
        if key is not None:
            msg["key"] = key.decode()
        line = json.dumps(msg) + "\n"
        try:
            self.popen.stdin.write(line.encode())
            self.popen.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died meanwhile; the reader reports the exit

    def _read(self, fd: int) -> None:
        for msg in worker_reports(fd):
            now = time.monotonic()
            self.last_beat_mono = now
            kind = msg.get("type")
            if kind == "heartbeat":
                continue
            if kind == "ready":
                self.ready = True
                continue
            if kind in ("running", "progress"):
                self.armed = True
            msg["recv_mono"] = now
            self._on_message(self, msg)
        code = self.popen.wait()
        self.exit_code = code
        self._on_exit(self, code)

    def kill(self, why: str, sig: int = signal.SIGKILL) -> None:
        if self.exit_code is None and self.killed_by is None:
            self.killed_by = why
            self.kill_mono = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def heartbeat_age_s(self) -> float:
        return time.monotonic() - self.last_beat_mono

    def log_tail(self, n: int = 20) -> list[str]:
        # The log lies in a directory the worker owns: never follow what it put there.
        return read_tail(self.log_path, n)
