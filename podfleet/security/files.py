"""Files podfleet writes are private to its user: 0600 files, 0700 directories.

The server sets a 077 umask once at start (every file it, SQLite and its workers
create inherits it) and tightens what an older version left readable. Helpers here
create single files and directories with the right mode regardless of the umask.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
PRIVATE_UMASK = 0o077


def private_umask() -> int:
    """Make every file this process (and its children) creates owner-only; returns the old umask."""
    return os.umask(PRIVATE_UMASK)


def private_dir(path: str | Path) -> Path:
    """Create ``path`` (and parents) as 0700, and tighten it if it already existed."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if stat.S_IMODE(p.stat().st_mode) & 0o077:
        p.chmod(DIR_MODE)
    return p


def write_private(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a new 0600 file atomically (temp file, fsync, rename)."""
    p = Path(path)
    private_dir(p.parent)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return p


def open_private_append(path: str | Path) -> int:
    """A 0600 file descriptor for appending (logs). Never through a link: a log lies in a
    job's directory, where the job could plant one to have the server append to another
    file; a link found there is removed (and one planted again meanwhile fails the open)."""
    p = Path(path)
    private_dir(p.parent)
    if p.is_symlink():
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    return os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE)


def tighten(*paths: str | Path) -> None:
    """chmod existing files to 0600 (a database an older version created 0644)."""
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(os.stat(p).st_mode) & 0o077:
                os.chmod(p, FILE_MODE)


def sqlite_files(url: str) -> list[Path]:
    """The database, WAL and shared-memory files behind a ``sqlite:///PATH`` URL."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix):] in ("", ":memory:"):
        return []
    db = Path(url[len(prefix):].split("?", 1)[0])
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]


def is_loopback(host: str) -> bool:
    h = host.strip("[]").lower()
    return h in ("localhost", "::1") or h.startswith("127.")


def exposure_warning(host: str, *, tls: bool) -> str | None:
    """The warning to print loudly when serving beyond this host without TLS."""
    if is_loopback(host) or tls:
        return None
    return (f"WARNING: serving on {host} without TLS: bearer tokens cross the network in clear text. "
            "Pass --tls-cert/--tls-key (or PODFLEET_TLS_CERT/_KEY), or bind 127.0.0.1 behind a TLS proxy.")
