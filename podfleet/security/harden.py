"""What a worker does to itself before it holds a secret: undumpable, and unprivileged.

``PR_SET_DUMPABLE`` 0 (``prctl`` through ctypes; the standard library has no binding)
makes ``/proc/PID/{mem,environ,maps,fd}`` root's and refuses ``ptrace`` to every process
without ``CAP_SYS_PTRACE``, even one of the same uid: another job (or a stray process of
this one) cannot lift the checkpoint key out of a worker's memory. It also stops core
dumps. The kernel resets the flag when a process changes uid, so ``drop_privileges``
sets it again after the switch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
PR_SET_PDEATHSIG = 1


def _prctl(option: int, arg: int = 0) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    rc = int(libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")
    return rc


def set_undumpable() -> None:
    """No core dumps, no ptrace, ``/proc/self`` readable by root only (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_DUMPABLE, 0)


def set_dumpable() -> None:
    """Undo ``set_undumpable`` (tests that ran a server's start in their own process)."""
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_DUMPABLE, 1)


def is_dumpable() -> bool:
    return not sys.platform.startswith("linux") or bool(_prctl(PR_GET_DUMPABLE))


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``/``gid`` for good (real, effective, saved; no supplementary groups),
    then undumpable. Raises PermissionError if the switch could be undone."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    set_undumpable()
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
        raise PermissionError(f"could not drop to uid {uid} gid {gid}")
    if uid != 0:
        try:
            os.setuid(0)
        except PermissionError:
            return
        raise PermissionError("privileges were not dropped: setuid(0) still works")


def die_with_parent(parent: int, sig: int = 9) -> None:
    """Be sent ``sig`` (default SIGKILL) when ``parent`` dies: a Ray actor's child must not
    outlive the actor (Linux; elsewhere a no-op). The kernel clears this on a uid change."""
    if sys.platform.startswith("linux"):
        _prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # it died before the request took hold
            os._exit(75)
