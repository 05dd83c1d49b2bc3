"""A job's files on a root server: handed to the job's uid, taken back, never followed.

A worker owns its job's directory, so anything in it may be a link it planted, swapped in
between a check and a use. What the server does there therefore goes through directory
file descriptors (``os.fwalk``, ``dir_fd=``) and ``O_NOFOLLOW``, never through a path
a worker could redirect:

* ``prepare_job_dir``: the tree becomes the job uid's (files the server wrote since the
  last attempt too, such as checkpoint manifests, which the worker reads to resume); links
  are never followed and a file with several hard links is left alone. Directories above
  it get search permission for others (``o+x``: crossable, not listable).
* ``reclaim_job_dir``: at the job's end the tree goes back to the server (0700), so the
  next job to draw the same uid cannot read it.
* ``stage_code``: a pushed artifact (``<code root>/<sha256>/...``, private to the server)
  is copied, fresh on every gang, into a directory the *server* creates and owns
  (``<workdir>/staged/<job>``, group: the job's gid, 0750; files 0640): the job reads its
  code but can plant nothing there for the server to follow.
* ``read_tail``: the server reads a worker's log without following a link (a log swapped
  for a link to the key file would otherwise print the key into the job's failure tail).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from pathlib import Path

from podfleet.security.sandbox import WorkerSandbox

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _chown_tree(top: Path, uid: int, gid: int) -> None:
    for _root, dirs, files, rootfd in os.fwalk(top, follow_symlinks=False):
        for name in (*dirs, *files):
            try:
                st = os.stat(name, dir_fd=rootfd, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode) or (st.st_uid, st.st_gid) == (uid, gid):
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    continue  # a link to someone else's file: not the job's to receive
                os.chown(name, uid, gid, dir_fd=rootfd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed by the worker meanwhile


def _search(sandbox: WorkerSandbox, st: os.stat_result) -> bool:
    if st.st_uid == sandbox.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == sandbox.gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def prepare_job_dir(sandbox: WorkerSandbox, jobdir: Path) -> None:
    """Hand ``jobdir`` (logs, checkpoints, replicas) to the sandbox's uid (see the module's docstring)."""
    if not sandbox.switches_user:
        return
    uid, gid = sandbox.uid, sandbox.gid
    assert uid is not None and gid is not None
    jobdir.mkdir(parents=True, exist_ok=True, mode=0o700)
    for parent in jobdir.resolve().parents:
        st = parent.stat()
        if not _search(sandbox, st):
            os.chmod(parent, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
    _chown_tree(jobdir, uid, gid)
    os.chown(jobdir, uid, gid, follow_symlinks=False)
    os.chmod(jobdir, 0o700)


def reclaim_job_dir(jobdir: Path) -> None:
    """Take ``jobdir`` back from the job's uid (the server's user, 0700), links untouched."""
    if not jobdir.is_dir() or jobdir.is_symlink():
        return
    uid, gid = os.geteuid(), os.getegid()
    _chown_tree(jobdir, uid, gid)
    os.chown(jobdir, uid, gid, follow_symlinks=False)
    os.chmod(jobdir, 0o700)


def artifact_root(entrypoint: str) -> Path | None:
    """The ``<sha256>`` directory of a pushed code artifact, or None (an admin-allowed path)."""
    return next((p for p in Path(entrypoint).parents if _HEX64.match(p.name)), None)


def _copy_into(src: Path, dfd: int, gid: int) -> None:
    """Copy ``src``'s tree into the directory ``dfd`` (new entries only, never following)."""
    for entry in os.scandir(src):
        if entry.is_symlink():
            continue  # an artifact holds no links (refused at push)
        if entry.is_dir(follow_symlinks=False):
            os.mkdir(entry.name, 0o750, dir_fd=dfd)
            sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dfd)
            try:
                os.fchown(sub, 0 if os.geteuid() == 0 else -1, gid)
                os.fchmod(sub, 0o750)
                _copy_into(Path(entry.path), sub, gid)
            finally:
                os.close(sub)
        elif entry.is_file(follow_symlinks=False):
            out = os.open(entry.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640, dir_fd=dfd)
            try:
                with open(entry.path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        os.write(out, chunk)
                os.fchown(out, 0 if os.geteuid() == 0 else -1, gid)
                os.fchmod(out, 0o640)
            finally:
                os.close(out)


def stage_code(sandbox: WorkerSandbox, entrypoint: str | None, stage_dir: Path) -> str | None:
    """The path a worker of another uid runs: a pushed artifact copied afresh under
    ``stage_dir`` (server-owned, see the module's docstring); anything else as given."""
    if entrypoint is None or not sandbox.switches_user:
        return entrypoint
    root = artifact_root(entrypoint)
    if root is None:
        return entrypoint  # an admin-allowed code directory: it must be readable by the worker's user
    assert sandbox.gid is not None
    stage_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
    os.chmod(stage_dir.parent, 0o711)
    with contextlib.suppress(FileExistsError):
        os.mkdir(stage_dir, 0o750)
    pfd = os.open(stage_dir, _DIR_FLAGS)  # created by the server, inside the server's own directory
    try:
        os.fchown(pfd, -1, sandbox.gid)
        os.fchmod(pfd, 0o750)
        tmp = f".{root.name}.tmp-{os.getpid()}"
        for stale in (tmp, root.name):
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(stale, dir_fd=pfd)
        os.mkdir(tmp, 0o750, dir_fd=pfd)
        tfd = os.open(tmp, _DIR_FLAGS, dir_fd=pfd)
        try:
            os.fchown(tfd, -1, sandbox.gid)
            os.fchmod(tfd, 0o750)
            _copy_into(root, tfd, sandbox.gid)
        finally:
            os.close(tfd)
        os.rename(tmp, root.name, src_dir_fd=pfd, dst_dir_fd=pfd)
    finally:
        os.close(pfd)
    return str(stage_dir / root.name / Path(entrypoint).relative_to(root))


def read_tail(path: Path, n: int, max_bytes: int = 256 * 1024) -> list[str]:
    """The last ``n`` lines of a worker's log, read without following a planted link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            return []  # a fifo, a device or a hard link to another file: not a log
        f.seek(max(0, st.st_size - max_bytes))
        lines = f.read(max_bytes).decode(errors="replace").splitlines()
    return lines[-n:]


def write_for_job(path: Path, data: bytes, uid: int | None, gid: int | None) -> None:
    """Atomically replace ``path`` in a job's directory with a file the job's uid reads
    (0600, its own): never writing through what sits at the temporary name."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        if uid is not None and gid is not None:
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)
    os.replace(tmp, path)
