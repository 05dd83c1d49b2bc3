"""This process's I/O counters (``/proc/self/io``), readable after it made itself undumpable.

An undumpable process's ``/proc/self`` files belong to root, so a worker running under
its job's uid can no longer open ``/proc/self/io`` (EACCES). Reading one's own counters is
still allowed, so the worker opens the file before ``set_undumpable`` and keeps the
descriptor (``keep_open``); ``wchar`` reads through it when it is there.
"""

from __future__ import annotations

import os

PATH = "/proc/self/io"
_fd: int | None = None


def keep_open() -> None:
    """Open the counters now, while this process may (call before ``set_undumpable``)."""
    global _fd
    if _fd is None:
        try:
            _fd = os.open(PATH, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no procfs (not Linux): the meter reports n/a
            _fd = None


def _text() -> str:
    if _fd is not None:
        return os.pread(_fd, 4096, 0).decode()
    with open(PATH) as f:
        return f.read()


def available() -> bool:
    return _fd is not None or os.path.exists(PATH)


def wchar() -> int | None:
    """Bytes this process has written (write/writev/send: gloo's sockets included)."""
    try:
        for line in _text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
