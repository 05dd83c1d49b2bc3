"""Read neuron-monitor's report stream incrementally.

neuron-monitor writes one complete JSON document per period to stdout, one per line
in practice; the reader also accepts pretty-printed (multi-line) documents by
buffering lines until a document decodes. A malformed document is skipped and recorded
(``errors``) so one bad report does not stop telemetry; ``strict=True`` raises instead.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, Protocol

from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.fabric.neuron.monitor import MonitorReport, parse_monitor_report

MAX_DOC_BYTES = 16 * 1024 * 1024  # a runaway buffer is a broken stream, not a big report

# All metric groups, every ``period_s``: the configuration neuron-monitor documents.
DEFAULT_CONFIG: dict[str, Any] = {
    "neuron_runtimes": [
        {
            "tag_filter": ".*",
            "metrics": [
                {"type": "neuroncore_counters"},
                {"type": "memory_used"},
                {"type": "neuron_runtime_vcpu_usage"},
                {"type": "execution_stats"},
            ],
        }
    ],
    "system_metrics": [{"type": "vcpu_usage"}, {"type": "memory_info"}, {"type": "neuron_hw_counters"}],
}


class LineStream(Protocol):
    """What the reader needs of its stream: a file, a pipe, or a bounded line reader."""

    def readline(self) -> str | bytes: ...

    def read(self, n: int = ..., /) -> str | bytes: ...


class NeuronMonitorReader:
    """Iterate over ``MonitorReport``s from a text stream (a file or a process's stdout)."""

    def __init__(self, stream: IO[str] | IO[bytes] | LineStream, *, strict: bool = False, keep_errors: int = 100,
                 on_error: Callable[[str], Any] | None = None) -> None:
        self._stream = stream
        self.strict = strict
        # Called (on the reading thread) with each malformed-document message as it is
        # skipped, so a supervisor notices garbage even when no report follows it.
        self.on_error = on_error
        self.errors: list[str] = []  # the most recent malformed-document messages
        self.skipped = 0
        self.count = 0
        self.latest: MonitorReport | None = None
        self._keep = keep_errors
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    # --- reading --------------------------------------------------------------------
    def __iter__(self) -> Iterator[MonitorReport]:
        buf = ""
        sentinel: str | bytes = b"" if self._is_bytes() else ""
        readline: Callable[[], str | bytes] = self._stream.readline
        for raw in iter(readline, sentinel):
            line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            if not buf and not line.strip():
                continue
            buf += line
            doc, buf = self._decode(buf, line)
            if doc is None:
                continue
            try:
                report = parse_monitor_report(doc)
            except InvalidInputError as exc:
                self._bad(exc.message)
                continue
            self.count += 1
            self.latest = report
            yield report
        if buf.strip():
            self._bad("malformed neuron-monitor document: stream ended inside a document")

    def _decode(self, buf: str, line: str) -> tuple[Any, str]:
        """(document or None, what stays buffered)."""
        if buf != line and line.startswith("{"):
            # neuron-monitor writes each report on one unindented line: a line that is a
            # whole document on its own ends whatever was pending (a truncated report).
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                pass
            else:
                self._bad("malformed neuron-monitor document: truncated (a new report began)")
                return doc, ""
        try:
            return json.loads(buf), ""
        except json.JSONDecodeError as exc:
            if _incomplete(buf, exc) and len(buf) < MAX_DOC_BYTES:
                return None, buf  # a multi-line document: read on
            self._bad(f"malformed neuron-monitor document: not JSON ({exc.msg} at char {exc.pos})")
        if buf != line and line.startswith("{"):
            return None, line  # resynchronise: this line may begin a multi-line document
        return None, ""

    def _is_bytes(self) -> bool:
        return isinstance(self._stream.read(0), bytes)

    def _bad(self, message: str) -> None:
        if self.strict:
            raise InvalidInputError(message, field="document")
        self.skipped += 1
        self.errors.append(message)
        del self.errors[: -self._keep]
        if self.on_error is not None:
            self.on_error(message)

    def follow(self, on_report: Callable[[MonitorReport], Any]) -> threading.Thread:
        """Read in a daemon thread, calling ``on_report`` for each report (from that thread)."""

        def run() -> None:
            for report in self:
                on_report(report)

        t = threading.Thread(target=run, name="neuron-monitor-reader", daemon=True)
        t.start()
        return t

    # --- a live neuron-monitor --------------------------------------------------------
    @classmethod
    def spawn(
        cls, *, period_s: float = 1.0, executable: str = "neuron-monitor", strict: bool = False
    ) -> NeuronMonitorReader:
        """Start ``neuron-monitor -c CONFIG`` (all metric groups every ``period_s``) and read it."""
        path = shutil.which(executable)
        if path is None:
            raise NotFoundError(
                f"{executable!r} not found on PATH; install aws-neuronx-tools "
                "(it lives in /opt/aws/neuron/bin) or pass executable=",
                field="executable",
            )
        if period_s <= 0:
            raise InvalidInputError(f"period_s must be positive, got {period_s}", field="period_s")
        tmp = tempfile.TemporaryDirectory(prefix="podfleet-neuron-")
        conf = f"{tmp.name}/monitor.conf"
        with open(conf, "w") as f:
            json.dump({"period": f"{period_s:g}s", **DEFAULT_CONFIG}, f)
        proc = subprocess.Popen([path, "-c", conf], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        reader = cls(proc.stdout, strict=strict)
        reader._proc = proc
        reader._tmp = tmp
        return reader

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> NeuronMonitorReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _incomplete(buf: str, exc: json.JSONDecodeError) -> bool:
    """True when the decoder failed only because the document has not ended yet."""
    stripped = buf.rstrip()
    return stripped.startswith(("{", "[")) and exc.pos >= len(stripped) - 1 and "Extra data" not in exc.msg
