"""Who a worker runs as, and under which resource limits.

A job's code runs inside its worker, so the worker must not hold the server's powers,
nor share a uid with another job (a uid guards files, signals and, through ``ptrace``
and ``/proc/PID/mem``, memory). Where the server (or a Ray actor) runs as root:

* ``PODFLEET_WORKER_USER`` unset: every job gets its own uid, drawn from
  ``PODFLEET_WORKER_UIDS`` (``START-END``; default ``security.uids.DEFAULT_RANGE``), gid the
  same number, no account needed (``security.uids``: leases, released at job end);
  ``PODFLEET_WORKER_UIDS=off`` with no user is refused, as is any set-up under which the
  uids cannot run a worker (the error names the fix);
* a user name or uid: every job runs as that one user (an unknown one is refused when the
  fabric starts). Jobs then share a uid: a warning says so;
* ``root``: workers run as root on purpose, for a single-user host; every fabric start
  logs a SECURITY warning.

A server that is not root cannot switch users; its workers run as itself (and are still
undumpable, ``security.harden``). The worker's uid must be able to run the interpreter
and read podfleet: when the server's own interpreter is out of its reach (a venv or
pyenv under ``/root``), workers run the system's Python of the same version with the
server's packages on ``PYTHONPATH`` (``fallback_python``) if that can be reached; else
``PODFLEET_WORKER_PYTHON`` names the interpreter (with ``PYTHONPATH`` pointing at podfleet
and its dependencies), or install podfleet outside ``/root`` (e.g. a venv under ``/opt``).

The switch uses ``subprocess``'s own ``user``/``group``/``extra_groups`` (no
``preexec_fn``: the server is threaded); a warm standby, started before its job (and so
its uid) is known, drops to the job's uid itself on assignment, before it reads the key
or any of the job's code (``security.harden.drop_privileges``). The job's directory is
handed to its uid (``security.jobfiles``) and taken back when the job ends; pushed code
is staged read-only beside it. The key directory and the database stay root's 0600/0700
files; the checkpoint key reaches a worker over a pipe (``key_material``).

Resource limits (``PODFLEET_WORKER_LIMIT_*``; 0 leaves a limit as it is) are applied by
the worker to itself as the very first thing it does, before it reads a job or runs
any of its code (``apply_limits``): limits only go down, and an unprivileged process
cannot raise its hard limits again.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pwd
import resource
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from podfleet.errors import InvalidInputError
from podfleet.security.files import open_private_append
from podfleet.security.uids import UIDS_ENV, parse_range

log = logging.getLogger("podfleet.security.sandbox")

USER_ENV = "PODFLEET_WORKER_USER"
PYTHON_ENV = "PODFLEET_WORKER_PYTHON"
LIMIT_ENV_PREFIX = "PODFLEET_WORKER_LIMIT_"
# name -> (RLIMIT_*, default). NPROC counts every thread of the user's processes, so it
# only bounds fork bombs; AS is off by default (CUDA and torch reserve huge address space).
LIMITS: dict[str, tuple[int, int]] = {
    "NOFILE": (resource.RLIMIT_NOFILE, 16384),
    "NPROC": (resource.RLIMIT_NPROC, 16384),
    "CORE": (resource.RLIMIT_CORE, 0),  # no core dumps: a dump holds the checkpoint key
    "AS": (resource.RLIMIT_AS, -1),  # bytes; -1: unchanged
}
REFUSED = (f"the server runs as root and will not run job code as root: leave {USER_ENV} and {UIDS_ENV} unset "
           f"(one uid per job from a default range), set {UIDS_ENV}=START-END (a free uid range), "
           f"{USER_ENV}=NAME (an unprivileged user), or {USER_ENV}=root to accept root workers on a single-user host")
_warned: set[str] = set()


@dataclass(frozen=True)
class WorkerSandbox:
    """``uid``/``gid`` None: the worker runs as the server's user, or (``uid_range`` set) is
    a template whose jobs each get a uid of their own (``for_uid``)."""

    user: str | None = None
    uid: int | None = None
    gid: int | None = None
    limits: Mapping[str, int] = field(default_factory=dict)  # LIMITS name -> value (-1: unchanged)
    python: str | None = None  # the interpreter workers run; None: the server's own
    uid_range: tuple[int, int] | None = None  # one uid per job from this range
    pythonpath: str | None = None  # with ``python``: where it finds podfleet and its dependencies
    root_opt_in: bool = False  # PODFLEET_WORKER_USER=root on a root server

    @property
    def executable(self) -> str:
        return self.python or sys.executable

    @property
    def switches_user(self) -> bool:
        return self.uid is not None and self.uid != os.geteuid()

    @property
    def per_job(self) -> bool:
        return self.uid_range is not None

    def for_uid(self, uid: int) -> WorkerSandbox:
        """A job's own sandbox: its leased uid, gid the same number, no account needed."""
        return replace(self, user=f"podfleet-{uid}", uid=uid, gid=uid, uid_range=None)

    def limits_arg(self) -> str:
        """The worker's ``--rlimits`` argument."""
        return json.dumps({k: v for k, v in self.limits.items() if v >= 0}, sort_keys=True)

    def env(self, jobdir: Path | None) -> dict[str, str]:
        """What the worker's environment says about who it is (HOME: a place it can write)
        and, with a fallback interpreter, where it finds podfleet."""
        out = {"PYTHONPATH": self.pythonpath} if self.pythonpath else {}
        if (not self.switches_user and not self.per_job) or self.user is None:
            return out
        out.update({"USER": self.user, "LOGNAME": self.user})
        if jobdir is not None:
            out["HOME"] = str(jobdir)
        return out


def _lookup(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError):
        raise InvalidInputError(f"{USER_ENV}={name}: no such user on this host; create it "
                                f"(useradd --system --no-create-home {name}) or unset {USER_ENV} "
                                f"(one uid per job)", field="worker_user") from None


def _limits(env: Mapping[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, (_, default) in LIMITS.items():
        raw = env.get(LIMIT_ENV_PREFIX + name, "").strip()
        try:
            out[name] = int(raw) if raw else default
        except ValueError:
            raise InvalidInputError(f"{LIMIT_ENV_PREFIX}{name}={raw!r} is not an integer",
                                    field="worker_limits") from None
        if out[name] == 0 and name != "CORE":
            out[name] = -1  # 0 open files or processes cannot run anything: read it as "no limit"
    return out


def _warn(key: str, msg: str, *args: object, every_time: bool = False) -> None:
    if every_time or key not in _warned:
        _warned.add(key)
        log.warning(msg, *args)


def from_env(env: Mapping[str, str] | None = None) -> WorkerSandbox:
    """The sandbox the settings ask for (see the module's docstring); InvalidInputError,
    with the fix in its message, where a root server would run job code as root."""
    env = os.environ if env is None else env
    limits = _limits(env)
    python = env.get(PYTHON_ENV, "").strip() or None
    wanted = env.get(USER_ENV, "").strip()
    if os.geteuid() != 0:
        if wanted and wanted != pwd.getpwuid(os.geteuid()).pw_name:
            _warn("ignored", "%s=%s ignored: only a root server can run workers as another user", USER_ENV, wanted)
        return WorkerSandbox(limits=limits, python=python)
    if wanted:
        pw = _lookup(wanted)
        if pw.pw_uid == 0:
            _warn("root", "SECURITY: %s=%s: job workers run as ROOT and can read every key, token and the "
                  "database of this server. Only for a single-user host; unset %s for one uid per job.",
                  USER_ENV, wanted, USER_ENV, every_time=True)
            return WorkerSandbox(limits=limits, python=python, root_opt_in=True)
        _warn("shared", "%s=%s: every job runs as uid %d, so jobs can read each other's files; unset it "
              "for one uid per job", USER_ENV, pw.pw_name, pw.pw_uid)
        sb = WorkerSandbox(pw.pw_name, pw.pw_uid, pw.pw_gid, limits, python)
        probe = sb
    else:
        rng = parse_range(env.get(UIDS_ENV))
        if rng is None:
            raise InvalidInputError(REFUSED, field="worker_user")
        sb = WorkerSandbox(limits=limits, python=python, uid_range=rng)
        probe = sb.for_uid(rng[0])
    return _reachable(sb, probe, explicit_python=python is not None)


def _reachable(sb: WorkerSandbox, probe: WorkerSandbox, *, explicit_python: bool) -> WorkerSandbox:
    blocked = unreachable(probe)
    if blocked is None:
        return sb
    if not explicit_python:
        fb = fallback_python(probe)
        if fb is not None:
            _warn("fallback", "workers run %s (the server's interpreter is under %s, out of their reach)",
                  fb[0], blocked)
            return replace(sb, python=fb[0], pythonpath=fb[1])
    who = probe.user if sb.uid_range is None else "a job's uid"
    raise InvalidInputError(
        f"workers cannot reach {blocked} as {who}: install podfleet and its interpreter where any user can "
        f"read them (e.g. a venv under /opt), or set {PYTHON_ENV} (and PYTHONPATH)", field="worker_user")


def fallback_python(probe: WorkerSandbox) -> tuple[str, str] | None:
    """The system's Python of this version and a PYTHONPATH of this server's packages, if
    ``probe``'s user can reach them all (the server's interpreter under /root, say)."""
    import podfleet

    exe = f"python{sys.version_info.major}.{sys.version_info.minor}"
    paths = list(dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                str(Path(podfleet.__file__).resolve().parents[1])]))
    for d in ("/usr/bin", "/usr/local/bin"):
        cand = WorkerSandbox(probe.user, probe.uid, probe.gid, python=os.path.join(d, exe))
        if os.path.isfile(cand.executable) and unreachable(cand) is None \
                and all(_path_blocked(Path(p), probe) is None for p in paths):
            return cand.executable, os.pathsep.join(paths)
    return None


def _can(st: os.stat_result, uid: int, gid: int, bits: tuple[int, int, int]) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & bits[0])
    if st.st_gid == gid:
        return bool(st.st_mode & bits[1])
    return bool(st.st_mode & bits[2])


_SEARCH = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
_READ = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)


def unreachable(sb: WorkerSandbox) -> Path | None:
    """The first path on the way to the interpreter or to podfleet's code that the
    sandbox's user cannot enter or read; None when it can run a worker."""
    if sb.uid is None or sb.gid is None:
        return None
    import podfleet

    exe = Path(sb.executable)
    for t in (exe, exe.resolve(), Path(podfleet.__file__).resolve().parent):
        blocked = _path_blocked(t, sb)
        if blocked is not None:
            return blocked
    return None


def _path_blocked(t: Path, sb: WorkerSandbox) -> Path | None:
    assert sb.uid is not None and sb.gid is not None
    for d in reversed(t.parents):
        if not _can(d.stat(), sb.uid, sb.gid, _SEARCH):
            return d
    try:
        st = t.stat()
    except FileNotFoundError:
        return t
    return None if _can(st, sb.uid, sb.gid, _READ) else t


def apply_limits(spec: str) -> None:
    """In the worker, first thing: lower its own limits (soft and hard) to ``spec``."""
    for name, value in json.loads(spec or "{}").items():
        which = LIMITS[name][0]
        soft, hard = resource.getrlimit(which)
        new_hard = value if hard == resource.RLIM_INFINITY else min(hard, value)
        new_soft = new_hard if soft == resource.RLIM_INFINITY else min(soft, new_hard)
        resource.setrlimit(which, (new_soft, new_hard))


# --- the checkpoint key -----------------------------------------------------------------


def key_material(key_file: str | None, key_env: str, env: Mapping[str, str] | None = None) -> bytes | None:
    """The checkpoint key as the worker should receive it over a pipe: a JSON line
    (``source`` for error messages, ``data`` base64 of the file's or variable's bytes), or
    None when the server cannot read it either (the worker then reports the error)."""
    env = os.environ if env is None else env
    if key_file:
        try:
            data = Path(key_file).read_bytes()
        except OSError:
            return None
        source = f"key file {key_file}"
    else:
        value = env.get(key_env)
        if not value:
            return None
        data, source = value.encode(), f"${key_env}"
    return json.dumps({"source": source, "data": base64.b64encode(data).decode()}).encode() + b"\n"


def key_pipe(material: bytes) -> int:
    """A pipe's read end already holding ``material`` (writer closed): pass it to the worker."""
    r, w = os.pipe()
    try:
        if len(material) > 60_000:  # a pipe buffers 64 KiB; a key ring is a few hundred bytes
            raise InvalidInputError("checkpoint key file too large to hand to a worker", field="key_file")
        os.write(w, material)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return r


def spawn_worker(sandbox: WorkerSandbox, args: list[str], *, log_path: str | Path, env: Mapping[str, str],
                 cwd: str | Path | None, key: bytes | None = None,
                 stdin: int = subprocess.DEVNULL) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``python -m podfleet.training.worker ARGS`` under ``sandbox`` (its uid and gid
    when it switches user, its own session), its output appended to the owner-only
    ``log_path``. The worker reports on a pipe (``--report-fd``) and reads its checkpoint
    key from another (``--key-fd``, when ``key`` is given). Returns the process and the
    report pipe's read end, which the caller reads and closes; the child's ends are closed
    here whatever happens."""
    r_fd, w_fd = os.pipe()
    fds = [w_fd]
    args = [*args, "--report-fd", str(w_fd)]
    switch = sandbox.switches_user
    try:
        if key is not None:
            fds.append(key_pipe(key))
            args += ["--key-fd", str(fds[-1])]
        with os.fdopen(open_private_append(log_path), "ab") as log:
            proc = subprocess.Popen(
                [sandbox.executable, "-m", "podfleet.training.worker", *args], stdin=stdin,
                stdout=log, stderr=subprocess.STDOUT, pass_fds=tuple(fds), env=env, cwd=cwd,
                start_new_session=True, user=sandbox.uid if switch else None,
                group=sandbox.gid if switch else None,
                extra_groups=[] if switch else None,  # subprocess's own: no preexec_fn in a threaded server
            )
    except BaseException:
        os.close(r_fd)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return proc, r_fd


def worker_reports(fd: int) -> Iterator[dict[str, Any]]:
    """The messages a worker writes on its report pipe (``spawn_worker``), one JSON object
    a line, until it closes; a line that is not JSON (a torn write at a kill) is skipped.
    Closes ``fd``."""
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(msg, dict):
                yield msg
