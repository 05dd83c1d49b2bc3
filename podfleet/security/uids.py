"""One unprivileged uid per job: host-wide leases on a range of uids.

Jobs that share a uid share everything a uid guards: each other's files, ``kill``, and
(``ptrace``, ``/proc/PID/mem``) each other's memory, keys included. So a root server
gives every job its own uid from ``PODFLEET_WORKER_UIDS`` (``START-END``; default
``DEFAULT_RANGE``, a block no distribution or systemd hands out). Nothing needs an
``/etc/passwd`` entry: ``subprocess`` takes a numeric uid, and the gid is the same number.

Leases live in one JSON file under ``PODFLEET_WORKER_UID_DIR`` (default
``/run/podfleet/worker-uids``: a tmpfs, so a reboot, which ends every worker, also
clears them), guarded by ``flock``, so every fabric of every server on the host draws
from one pool. A lease names its owner (a job's key: its directory, or a Ray job) and
the processes holding it; a restarted server does not reuse a uid while any holder is
alive *or* any process still runs as that uid (workers outlive a server under
``podfleet agent``). Releasing the last hold kills whatever still runs as the uid (a job
may leave daemons behind), so the next job that draws the uid inherits nothing live.
A uid that has an account (``getpwuid``) or that any process uses is never handed out.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from podfleet.errors import ConflictError, InvalidInputError

UIDS_ENV = "PODFLEET_WORKER_UIDS"
LEASE_DIR_ENV = "PODFLEET_WORKER_UID_DIR"
# 0x70000000 + 64 Ki: above the container ranges systemd-nspawn and subuid hand out
# (524288..1879048191) and below 2^31 (tools that treat uids as signed).
DEFAULT_RANGE = (1879048192, 1879048192 + 65535)
DEFAULT_LEASE_DIR = "/run/podfleet/worker-uids"
_OFF = ("off", "none", "no", "0")
_UID_MAX = 2**31 - 2


def parse_range(raw: str | None) -> tuple[int, int] | None:
    """``START-END`` (inclusive) -> (start, end); unset -> the default; ``off`` -> None."""
    text = (raw or "").strip()
    if not text:
        return DEFAULT_RANGE
    if text.lower() in _OFF:
        return None
    lo, sep, hi = text.partition("-")
    try:
        start, end = int(lo), int(hi)
    except ValueError:
        raise InvalidInputError(f"{UIDS_ENV}={text!r}: expected START-END, e.g. 1879048192-1879113727",
                                field="worker_uids") from None
    if not sep or not 1000 <= start <= end <= _UID_MAX:
        raise InvalidInputError(f"{UIDS_ENV}={text!r}: need 1000 <= START <= END <= {_UID_MAX}",
                                field="worker_uids")
    return start, end


def _scan() -> dict[int, set[int]]:
    """pid -> the uids (real, effective, saved, filesystem) it runs with, from
    ``/proc/PID/status``, not the owner of ``/proc/PID``: a worker that made itself
    undumpable shows as root there."""
    out: dict[int, set[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        out[int(entry.name)] = {int(x) for x in line.split()[1:]}
                        break
        except (OSError, ValueError):
            continue  # gone meanwhile
    return out


def processes_of(uid: int) -> list[int]:
    """Pids of processes running with ``uid`` as any of their uids."""
    return sorted(pid for pid, ids in _scan().items() if uid in ids)


def uids_in_use() -> set[int]:
    return {u for ids in _scan().values() for u in ids}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


@dataclass(frozen=True)
class Lease:
    uid: int
    owner: str


class UidLeases:
    """The host's pool of worker uids (see the module's docstring)."""

    def __init__(self, uid_range: tuple[int, int], directory: str | Path | None = None) -> None:
        self.start, self.end = uid_range
        self.dir = Path(directory or os.environ.get(LEASE_DIR_ENV) or DEFAULT_LEASE_DIR)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, dict[str, object]]]:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.dir, 0o700)
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            path = self.dir / "leases.json"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                state = {}
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                tmp = self.dir / f".leases.json.tmp-{os.getpid()}"
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
                wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(wfd, "w") as f:
                    json.dump(state, f, sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
        finally:
            os.close(fd)  # releases the lock

    @staticmethod
    def _stale(entry: Mapping[str, object], uid: int, busy: set[int]) -> bool:
        holders = entry.get("holders")
        live = [p for p in holders if isinstance(p, int) and _alive(p)] if isinstance(holders, list) else []
        return not live and uid not in busy

    def acquire(self, owner: str, holder: int | None = None) -> int:
        """The uid ``owner`` runs as: its current lease (one more holder), else a free uid."""
        holder = os.getpid() if holder is None else holder
        with self._locked() as state:
            busy = uids_in_use()  # one scan of /proc for the whole decision
            for key in [k for k, v in state.items() if v.get("owner") != owner and self._stale(v, int(k), busy)]:
                del state[key]
            for key, entry in state.items():
                if entry.get("owner") == owner:
                    holders = [p for p in entry.get("holders", []) if isinstance(p, int) and _alive(p)]  # type: ignore[attr-defined]
                    entry["holders"] = sorted({*holders, holder})
                    return int(key)
            for uid in range(self.start, self.end + 1):
                if str(uid) in state or uid in busy or _has_account(uid):
                    continue
                state[str(uid)] = {"owner": owner, "holders": [holder], "since": time.time()}
                return uid
        raise ConflictError(f"every worker uid in {UIDS_ENV}={self.start}-{self.end} is taken "
                            f"({self.end - self.start + 1} jobs or stray processes): widen the range",
                            field="worker_uids")

    def release(self, owner: str, holder: int | None = None) -> int | None:
        """Drop ``holder``'s hold; the last one frees the uid and kills what still runs as it.
        Returns the uid freed, or None while others still hold it (or it was not leased)."""
        holder = os.getpid() if holder is None else holder
        with self._locked() as state:
            for key, entry in list(state.items()):
                if entry.get("owner") != owner:
                    continue
                holders = [p for p in entry.get("holders", []) if isinstance(p, int) and p != holder  # type: ignore[attr-defined]
                           and _alive(p)]
                if holders:
                    entry["holders"] = holders
                    return None
                del state[key]
                kill_all(int(key))
                return int(key)
        return None

    def leases(self) -> list[Lease]:
        with self._locked() as state:
            return [Lease(int(k), str(v.get("owner"))) for k, v in sorted(state.items())]


def kill_all(uid: int) -> None:
    """SIGKILL every process running as ``uid`` (never root's)."""
    if uid == 0:
        return
    for _ in range(3):  # a fork between the scan and the kill: look again
        pids = processes_of(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
