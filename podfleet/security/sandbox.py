"""Who a local worker runs as, and under which resource limits.

A job's code runs inside its worker, so the worker must not hold the server's powers.
Where the server runs as root, workers run as an unprivileged user (like nginx's
``user`` directive or a CI runner's job user), chosen by ``PODFLEET_WORKER_USER``:

* unset: ``podfleet-worker`` when that user exists; otherwise workers stay root and the
  fabric logs a loud warning once (create the user with
  ``useradd --system --no-create-home podfleet-worker``);
* a user name or uid: that user (an unknown one is refused when the fabric starts);
* ``root``: run workers as root on purpose (no warning).

A server that is not root cannot switch users; its workers run as itself. The worker's
user must be able to run the interpreter and read podfleet (install it outside
``/root``, e.g. a venv in ``/opt``), else the fabric refuses to start and says which
directory is in the way; ``PODFLEET_WORKER_PYTHON`` names another interpreter for
workers (with ``PYTHONPATH`` pointing at podfleet and its dependencies).

The switch uses ``subprocess``'s own ``user``/``group``/``extra_groups`` (no
``preexec_fn``: the server is threaded). Before a worker starts, its job's directory is
handed to that user (``prepare_job_dir``: owned by it, the directories above it made
traversable, never listable), so it can write its logs and checkpoints; the key
directory and the database stay root's 0600/0700 files it cannot read. The checkpoint
key reaches it over a pipe (``key_material``), never through a file it could read.

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
import re
import resource
import shutil
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from podfleet.errors import InvalidInputError

log = logging.getLogger("podfleet.security.sandbox")

USER_ENV = "PODFLEET_WORKER_USER"
PYTHON_ENV = "PODFLEET_WORKER_PYTHON"
DEFAULT_USER = "podfleet-worker"
LIMIT_ENV_PREFIX = "PODFLEET_WORKER_LIMIT_"
# name -> (RLIMIT_*, default). NPROC counts every thread of the user's processes, so it
# only bounds fork bombs; AS is off by default (CUDA and torch reserve huge address space).
LIMITS: dict[str, tuple[int, int]] = {
    "NOFILE": (resource.RLIMIT_NOFILE, 16384),
    "NPROC": (resource.RLIMIT_NPROC, 16384),
    "CORE": (resource.RLIMIT_CORE, 0),  # no core dumps: a dump holds the checkpoint key
    "AS": (resource.RLIMIT_AS, -1),  # bytes; -1: unchanged
}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_warned = False


@dataclass(frozen=True)
class WorkerSandbox:
    """``uid``/``gid`` None: the worker runs as the server's user."""

    user: str | None = None
    uid: int | None = None
    gid: int | None = None
    limits: Mapping[str, int] = field(default_factory=dict)  # LIMITS name -> value (-1: unchanged)
    python: str | None = None  # the interpreter workers run; None: the server's own

    @property
    def executable(self) -> str:
        return self.python or sys.executable

    @property
    def switches_user(self) -> bool:
        return self.uid is not None and self.uid != os.geteuid()

    def limits_arg(self) -> str:
        """The worker's ``--rlimits`` argument."""
        return json.dumps({k: v for k, v in self.limits.items() if v >= 0}, sort_keys=True)

    def env(self, jobdir: Path | None) -> dict[str, str]:
        """What the worker's environment says about who it is (HOME: a place it can write)."""
        if not self.switches_user or self.user is None:
            return {}
        out = {"USER": self.user, "LOGNAME": self.user}
        if jobdir is not None:
            out["HOME"] = str(jobdir)
        return out


def _lookup(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError):
        raise InvalidInputError(f"{USER_ENV}={name}: no such user on this host; create it "
                                f"(useradd --system --no-create-home {name}) or unset {USER_ENV}",
                                field="worker_user") from None


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


def from_env(env: Mapping[str, str] | None = None) -> WorkerSandbox:
    """The sandbox the settings ask for (see the module's docstring)."""
    global _warned
    env = os.environ if env is None else env
    limits = _limits(env)
    python = env.get(PYTHON_ENV, "").strip() or None
    wanted = env.get(USER_ENV, "").strip()
    if os.geteuid() != 0:
        if wanted and wanted != pwd.getpwuid(os.geteuid()).pw_name:
            log.warning("%s=%s ignored: only a root server can run workers as another user", USER_ENV, wanted)
        return WorkerSandbox(limits=limits, python=python)
    if not wanted:
        try:
            pw = pwd.getpwnam(DEFAULT_USER)
        except KeyError:
            if not _warned:
                _warned = True
                log.warning(
                    "SECURITY: the server runs as root and no %s user exists, so job workers run as ROOT. "
                    "Create it (useradd --system --no-create-home %s), set %s to an unprivileged user, "
                    "or set %s=root to accept this.", DEFAULT_USER, DEFAULT_USER, USER_ENV, USER_ENV)
            return WorkerSandbox(limits=limits, python=python)
    else:
        pw = _lookup(wanted)
    if pw.pw_uid == 0:
        return WorkerSandbox(limits=limits, python=python)
    sb = WorkerSandbox(pw.pw_name, pw.pw_uid, pw.pw_gid, limits, python)
    blocked = unreachable(sb)
    if blocked is not None:
        raise InvalidInputError(
            f"workers run as {pw.pw_name} ({USER_ENV}), but {pw.pw_name} cannot reach {blocked}: install podfleet "
            f"and its interpreter where that user can read them (e.g. a venv under /opt), or set {PYTHON_ENV}",
            field="worker_user")
    return sb


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
    targets = [exe, exe.resolve(), Path(podfleet.__file__).resolve().parent]
    for t in targets:
        for d in reversed(t.parents):
            if not _can(d.stat(), sb.uid, sb.gid, _SEARCH):
                return d
        if not _can(t.stat(), sb.uid, sb.gid, _READ):
            return t
    return None


def apply_limits(spec: str) -> None:
    """In the worker, first thing: lower its own limits (soft and hard) to ``spec``."""
    for name, value in json.loads(spec or "{}").items():
        which = LIMITS[name][0]
        soft, hard = resource.getrlimit(which)
        new_hard = value if hard == resource.RLIM_INFINITY else min(hard, value)
        new_soft = new_hard if soft == resource.RLIM_INFINITY else min(soft, new_hard)
        resource.setrlimit(which, (new_soft, new_hard))


# --- the job's directory ---------------------------------------------------------------


def prepare_job_dir(sandbox: WorkerSandbox, jobdir: Path) -> None:
    """Hand ``jobdir`` (logs, checkpoints, replicas) to the sandbox's user.

    The tree becomes the user's (files the server wrote since the last attempt too, such
    as checkpoint manifests, which the worker reads to resume); links are never followed
    and a file with several hard links is left alone (a link the worker made to a file
    of the server's must not be handed over). Directories above it get search permission
    for others (``o+x``: they can be crossed, not listed), nothing more.
    """
    if not sandbox.switches_user:
        return
    uid, gid = sandbox.uid, sandbox.gid
    assert uid is not None and gid is not None
    jobdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for parent in jobdir.resolve().parents:
        st = parent.stat()
        if not _can(st, uid, gid, _SEARCH):
            os.chmod(parent, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
    for root, dirs, files in os.walk(jobdir, followlinks=False):
        for name in (*dirs, *files):
            p = os.path.join(root, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode) or st.st_uid == uid:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                continue
            os.chown(p, uid, gid, follow_symlinks=False)
    os.chown(jobdir, uid, gid, follow_symlinks=False)
    os.chmod(jobdir, 0o700)


def stage_entrypoint(sandbox: WorkerSandbox, entrypoint: str | None, jobdir: Path) -> str | None:
    """A pushed code artifact (``<code root>/<sha256>/...``, private to the server) is
    copied into the job's directory for a worker of another user; the path to run."""
    if entrypoint is None or not sandbox.switches_user:
        return entrypoint
    path = Path(entrypoint)
    root = next((p for p in path.parents if _HEX64.match(p.name)), None)
    if root is None:
        return entrypoint  # an admin-allowed code directory: it must be readable by the worker's user
    dest = jobdir / "code" / root.name
    if not dest.is_dir():
        tmp = dest.with_name(f".{root.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(root, tmp, symlinks=True)  # an artifact holds no links (refused at push)
        assert sandbox.uid is not None and sandbox.gid is not None
        for d, _, files in os.walk(tmp):
            for p in (d, *(os.path.join(d, f) for f in files)):
                os.chown(p, sandbox.uid, sandbox.gid, follow_symlinks=False)
        os.chown(dest.parent, sandbox.uid, sandbox.gid, follow_symlinks=False)
        os.replace(tmp, dest)
    return str(dest / path.relative_to(root))


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
