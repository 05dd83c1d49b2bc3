"""The fault log of a worker fabric (``HardwareErrors`` on local and Ray): what happened to
its workers, as observed, never a label someone attached.

Entries are ``FabricEvent``s of kind ``worker-fault`` with the evidence in ``detail``:
``observed`` (what the fabric saw: ``hang`` -- no heartbeat for ``heartbeat_age_s``;
``signal`` -- the worker died of ``signal`` that podfleet did not send; ``oom-kill`` --
it died of SIGKILL while the host's OOM-kill counter rose; ``exit`` -- it exited with
``exit_code`` on its own), the rank, the job, the slot, and the last sampled RSS.

The OOM counter is the kernel's: ``oom_kill`` in the server's memory cgroup
(``memory.events`` on cgroup v2, ``memory.oom_control`` on v1; workers inherit the
cgroup). Where neither file is readable, an OOM kill looks like any outside SIGKILL
(``signal``), which is what it is as far as the evidence goes.
"""

from __future__ import annotations

import signal
from collections import deque
from collections.abc import Callable
from pathlib import Path

from podfleet.fabric.base import FabricEvent

WORKER_FAULT = "worker-fault"


def _cgroup_files(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> list[Path]:
    out: list[Path] = []
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, ctrls, path = parts
        rel = path.lstrip("/")
        if ctrls == "":  # v2 unified
            out += [Path(root) / rel / "memory.events", Path(root) / "memory.events"]
        elif "memory" in ctrls.split(","):
            out += [Path(root) / "memory" / rel / "memory.oom_control", Path(root) / "memory" / "memory.oom_control"]
    return out


def oom_kill_counter() -> Callable[[], int | None]:
    """A reader of the kernel's OOM-kill count for this process's memory cgroup (None when
    no cgroup file says)."""
    files = [f for f in _cgroup_files() if f.exists()]

    def read() -> int | None:
        for f in files:
            try:
                for line in f.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
            except (OSError, ValueError):
                continue
        return None

    return read


class FaultLog:
    """Bounded, oldest first. ``observe`` reads the fabric's own events (worker exits and
    hangs) and keeps those that are faults of a worker, with what was seen."""

    def __init__(self, keep: int = 1000, oom_counter: Callable[[], int | None] | None = None) -> None:
        self.entries: deque[FabricEvent] = deque(maxlen=keep)
        self._oom = oom_counter if oom_counter is not None else oom_kill_counter()
        self._oom_seen = self._oom()

    def observe(self, ev: FabricEvent, rss_bytes: float | None = None) -> FabricEvent | None:
        """Log ``ev`` if it shows a worker fault; returns the entry (None when it is not one)."""
        d = ev.detail
        entry: dict[str, object] | None = None
        if ev.kind == "hang":
            entry = {"observed": "hang", "heartbeat_age_s": d.get("heartbeat_age_s"), "started": d.get("armed", True)}
        elif ev.kind == "worker-exited":
            code = int(d.get("exit_code", 0))
            killed_by = d.get("killed_by")
            oom = self._oom()
            rose = oom is not None and self._oom_seen is not None and oom > self._oom_seen
            self._oom_seen = oom if oom is not None else self._oom_seen
            if killed_by in ("stop", "recovery", "hang"):
                return None  # our own kill: of a hung worker (logged as the hang), or a stop
            if code == -signal.SIGKILL and killed_by is None and rose:
                entry = {"observed": "oom-kill", "signal": "SIGKILL"}
            elif code < 0 and killed_by is None:
                entry = {"observed": "signal", "signal": _signame(-code)}
            elif killed_by == "fault":
                entry = {"observed": "signal", "signal": _signame(-code) if code < 0 else None, "injected_kill": True}
            elif d.get("cause") in ("user-code", "infra"):
                entry = {"observed": "exit", "exit_code": code}
        if entry is None:
            return None
        entry.update({"rank": d.get("rank"), "attempt": d.get("attempt"), "rss_bytes": rss_bytes,
                      "message": d.get("message")})
        out = FabricEvent(WORKER_FAULT, ev.t, chip=ev.chip, job_id=ev.job_id, detail=entry)
        self.entries.append(out)
        return out

    def all(self) -> list[FabricEvent]:
        return list(self.entries)


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
