"""One server per SQLite store: a second ``podfleet up`` on the same file is refused.

SQLite serves one control plane (its engine is the only writer); two on one file would
both schedule the same chips. The server holds an exclusive ``flock`` on ``<db>.lock``
beside the database for its whole life; the kernel drops it when the process ends, however
it ends, so a crashed server never blocks its restart. Several servers need PostgreSQL,
where they elect a leader (``store.lease``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from podfleet.errors import ConflictError


def lock_path(db_file: str) -> Path:
    return Path(f"{db_file}.lock")


def hold_sqlite(db_file: str) -> IO[str]:
    """Take the store's lock (kept while the returned file stays open) or refuse in one line."""
    path = lock_path(db_file)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    handle = os.fdopen(fd, "r+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConflictError(
            f"store {db_file} is already served by podfleet (pid {holder}); SQLite serves one server: "
            "stop that one, or run several on PostgreSQL (--db postgresql+psycopg://...)", field="db") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle
