"""Running the Neuron tools: ``neuron-ls`` once, ``neuron-monitor`` supervised.

Commands are operator-given strings (``--neuron-ls``, ``--neuron-monitor``), split with
``shlex`` and run without a shell, with a scrubbed environment (PATH, locale, HOME and
``NEURON_*`` only: the control plane's secrets never reach them).

``MonitorSupervisor`` keeps neuron-monitor running: a command that cannot start, exits,
prints ``max_bad_in_row`` malformed documents in a row or falls silent for
``stale_after_s`` is reported (``on_trouble``) and restarted after an exponential
backoff (``backoff_initial_s`` doubling up to ``backoff_max_s``; back to the initial
delay after a run that delivered reports for ``stable_after_s``, 30 s: a monitor that
crashes after every report still backs off). Memory is bounded: lines are read at most
``MAX_DOC_BYTES`` at a time and only the last ``STDERR_TAIL`` stderr lines are kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.fabric.commands import (
    split_command,
)
from podfleet.fabric.neuron.ls import NeuronInventory, parse_neuron_ls
from podfleet.fabric.neuron.monitor import MonitorReport
from podfleet.fabric.neuron.reader import MAX_DOC_BYTES, NeuronMonitorReader

log = logging.getLogger("podfleet.fabric.neuron")

STDERR_TAIL = 20
_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
_NEURON_LS_MAX_BYTES = 16 * 1024 * 1024
# Runs the monitor with PR_SET_PDEATHSIG (SIGTERM) set, then execs it: the kernel ends it
# when the process that started it dies, even by SIGKILL (a Ray actor whose owner died).
# Linux only; elsewhere the command runs as it is.
_DIE_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, 15, 0, 0, 0)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() == 1:\n"
    "    sys.exit(0)\n"
    "try:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "except OSError as exc:\n"
    "    print(f'{sys.argv[1]}: {exc.strerror}', file=sys.stderr)\n"
    "    sys.exit(127)\n"
)




def tool_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith("NEURON_")}


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def run_neuron_ls(command: str, timeout_s: float = 30.0) -> NeuronInventory:
    """Run the neuron-ls command once and parse its JSON. Every failure is one line that
    names the command: ``InfeasibleError`` when it cannot run or fails, ``InvalidInputError``
    when what it printed is not a ``neuron-ls -j`` document."""
    argv = split_command(command, "neuron-ls")
    what = f"neuron-ls command {command!r}"
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=tool_env(), start_new_session=True)
    except FileNotFoundError:
        raise InfeasibleError(f"{what}: {argv[0]!r} not found (install aws-neuronx-tools, or pass --neuron-ls)",
                              field="neuron_ls") from None
    except OSError as exc:
        raise InfeasibleError(f"{what} cannot start: {exc.strerror or exc}", field="neuron_ls") from None
    assert proc.stdout is not None and proc.stderr is not None
    # Bounded reads: a command that prints without end is stopped, not buffered.
    out, err = bytearray(), bytearray()
    readers = [threading.Thread(target=_read_bounded, args=(proc, proc.stdout, out, _NEURON_LS_MAX_BYTES),
                                daemon=True),
               threading.Thread(target=_read_bounded, args=(proc, proc.stderr, err, 64 * 1024), daemon=True)]
    for t in readers:
        t.start()
    try:
        code = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        _terminate(proc)
        raise InfeasibleError(f"{what} did not finish within {timeout_s:g} s", field="neuron_ls") from None
    finally:
        for t in readers:
            t.join(2.0)
        for stream in (proc.stdout, proc.stderr):
            stream.close()
    if len(out) > _NEURON_LS_MAX_BYTES:
        raise InvalidInputError(f"{what} printed more than {_NEURON_LS_MAX_BYTES} bytes", field="neuron_ls")
    if code != 0:
        tail = _last_line(bytes(err)) or _last_line(bytes(out[-4096:]))
        raise InfeasibleError(f"{what} exited with code {code}" + (f": {tail}" if tail else ""),
                              field="neuron_ls")
    try:
        return parse_neuron_ls(bytes(out))
    except InvalidInputError as exc:
        raise InvalidInputError(f"{what} printed a bad document: {exc.message}", field="neuron_ls") from None


def _read_bounded(proc: subprocess.Popen[bytes], stream: IO[bytes], buf: bytearray, limit: int) -> None:
    """Read ``stream`` into ``buf``; past ``limit`` bytes, stop the process."""
    with contextlib.suppress(OSError, ValueError):
        while chunk := stream.read1(65536):  # type: ignore[attr-defined]
            buf.extend(chunk)
            if len(buf) > limit:
                _terminate(proc)
                return


class _Lines:
    """A process's stdout read a bounded line at a time (a line with no end is split)."""

    mode = "rb"

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw

    def readline(self) -> bytes:
        return self._raw.readline(MAX_DOC_BYTES)

    def read(self, n: int = -1) -> bytes:
        return self._raw.read(n)


class MonitorSupervisor:
    """Run ``command`` (neuron-monitor) and restart it with capped exponential backoff.

    Callbacks run on the supervisor's threads: ``on_report`` per parsed report,
    ``on_trouble(reason)`` when something is wrong (a malformed document, an exit, a
    restart), ``on_start(pid)`` when a run begins. ``die_with_parent``: the monitor ends
    when this process dies, however it dies (a host agent's, ``hostagent.py``)."""

    def __init__(self, command: str, *, on_report: Callable[[MonitorReport], Any],
                 on_trouble: Callable[[str], Any], on_start: Callable[[int], Any] | None = None,
                 backoff_initial_s: float = 1.0, backoff_max_s: float = 60.0, stale_after_s: float = 60.0,
                 max_bad_in_row: int = 3, stable_after_s: float = 30.0, die_with_parent: bool = False) -> None:
        self.command = command
        self.argv = split_command(command, "neuron-monitor")
        if die_with_parent and sys.platform.startswith("linux"):
            self.argv = [sys.executable, "-c", _DIE_WITH_PARENT, *self.argv]
        self.on_report, self.on_trouble, self.on_start = on_report, on_trouble, on_start
        self.backoff_initial_s, self.backoff_max_s = backoff_initial_s, backoff_max_s
        self.stale_after_s, self.max_bad_in_row = stale_after_s, max_bad_in_row
        self.stable_after_s = stable_after_s
        self.runs = 0  # processes started
        self.restarts = 0
        self.reports = 0
        self.malformed = 0
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = threading.Event()
        self._garbage = threading.Event()
        self._bad_in_row = 0
        self._last_bad = ""
        self._got_report = False
        self._last_report_mono = 0.0
        self._thread = threading.Thread(target=self._supervise, name="neuron-monitor-supervisor", daemon=True)

    @property
    def pid(self) -> int | None:
        p = self._proc
        return p.pid if p is not None and p.poll() is None else None

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        self._closed.set()
        p = self._proc
        if p is not None:
            _terminate(p)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    # --- the loop -------------------------------------------------------------------------
    def _supervise(self) -> None:
        delay = self.backoff_initial_s
        while not self._closed.is_set():
            started = time.monotonic()
            reason = self._run_once()
            if self._closed.is_set() or reason is None:
                break
            if self._got_report and time.monotonic() - started >= self.stable_after_s:
                delay = self.backoff_initial_s  # it worked for a while: start the backoff over
            self.restarts += 1
            self._trouble(f"neuron-monitor command {self.command!r} {reason}; restarting in {delay:g} s")
            if self._closed.wait(delay):
                break
            delay = min(delay * 2, self.backoff_max_s)

    def _run_once(self) -> str | None:
        self._bad_in_row, self._got_report = 0, False
        self._garbage.clear()
        self.stderr_tail.clear()
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=tool_env(), start_new_session=True)
        except OSError as exc:
            return f"cannot start: {exc.strerror or exc}"
        self._proc = proc
        self.runs += 1
        if self._closed.is_set():  # closed while starting
            _terminate(proc)
            return None
        if self.on_start is not None:
            self.on_start(proc.pid)
        self._last_report_mono = time.monotonic()
        assert proc.stdout is not None and proc.stderr is not None
        out = threading.Thread(target=self._read_stdout, args=(proc.stdout,), name="neuron-monitor-stdout",
                               daemon=True)
        err = threading.Thread(target=self._read_stderr, args=(proc.stderr,), name="neuron-monitor-stderr",
                               daemon=True)
        out.start()
        err.start()
        reason = self._watch(proc, out)
        _terminate(proc)
        out.join(2.0)
        err.join(2.0)
        for stream in (proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                stream.close()
        return reason

    def _watch(self, proc: subprocess.Popen[bytes], out: threading.Thread) -> str | None:
        while not self._closed.wait(0.1):
            code = proc.poll()
            if code is not None:
                out.join(2.0)  # what it printed before exiting is still read
                if self._closed.is_set():
                    return None
                tail = self.stderr_tail[-1] if self.stderr_tail else ""
                how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
                return how + (f" ({tail})" if tail else "")
            if self._garbage.is_set():
                return f"printed {self._bad_in_row} malformed documents in a row (last: {self._last_bad})"
            silent = time.monotonic() - self._last_report_mono
            if silent > self.stale_after_s:
                return f"printed no report for {silent:.0f} s"
        return None

    def _read_stdout(self, stream: IO[bytes]) -> None:
        reader = NeuronMonitorReader(_Lines(stream), on_error=self._malformed, keep_errors=10)
        try:
            for report in reader:
                if self._closed.is_set():
                    return
                self._bad_in_row = 0
                self._got_report = True
                self._last_report_mono = time.monotonic()
                self.reports += 1
                try:
                    self.on_report(report)
                except Exception:  # a consumer's bug must not stop telemetry
                    log.exception("neuron-monitor report handler failed")
        except (OSError, ValueError):
            return  # the pipe closed under us (terminated)

    def _read_stderr(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in iter(lambda: stream.readline(4096), b""):
                line = raw.decode("utf-8", "replace").strip()
                if line:
                    self.stderr_tail.append(line[:300])

    def _malformed(self, message: str) -> None:
        if self._closed.is_set():
            return
        self.malformed += 1
        self._bad_in_row += 1
        self._last_bad = message.removeprefix("malformed neuron-monitor document: ")[:200]
        self._trouble(f"neuron-monitor command {self.command!r} printed a malformed document "
                      f"({self._last_bad})")
        if self._bad_in_row >= self.max_bad_in_row:
            self._garbage.set()

    def _trouble(self, reason: str) -> None:
        try:
            self.on_trouble(reason)
        except Exception:
            log.exception("neuron-monitor trouble handler failed")


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (a wrapper script's children too), SIGKILL after 2 s."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(2.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(2.0)
