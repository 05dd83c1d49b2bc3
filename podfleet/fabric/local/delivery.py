"""How work reaches the local fabric's one thread, and how its events leave it.

The reader and monitor threads never change state themselves: ``deliver`` hands the
callable to ``timeline.submit`` (or, with no timeline attached, to this dispatcher
thread), and it runs under the state's lock. ``emit`` records a ``FabricEvent`` (its
details redacted), feeds the fault log and calls the subscribers. ``LocalFabric`` owns
one ``Delivery`` and passes it the state, redactor and fault log it uses.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from podfleet.fabric.base import FabricEvent
from podfleet.fabric.local.faultlog import FaultLog
from podfleet.fabric.local.state import LocalState
from podfleet.security.redact import Redactor

log = logging.getLogger("podfleet.fabric.local")  # the fabric's logger: its handlers' errors


class Delivery:
    def __init__(self, state: LocalState, redactor: Redactor, faults: FaultLog) -> None:
        self.state, self.redactor, self.faults = state, redactor, faults
        self.subs: list[Callable[[FabricEvent], None]] = []
        self.events: deque[FabricEvent] = deque(maxlen=2000)
        self.timeline: Any = None
        self._inbox: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.SimpleQueue()
        self._dispatcher = threading.Thread(target=self._dispatch, name="local-fabric-dispatch", daemon=True)
        self._dispatcher.start()

    def emit(self, kind: str, *, chip: int | None = None, job_id: str | None = None, **detail: Any) -> None:
        t = float(self.timeline.now) if self.timeline is not None else time.time()
        detail = {k: self.redactor.redact(v) if isinstance(v, str) else v for k, v in detail.items()}
        ev = FabricEvent(kind, t, chip=chip, job_id=job_id, detail=detail)
        self.events.append(ev)
        if kind in ("hang", "worker-exited"):
            rss = float(self.state.metrics["mem_bytes"][chip]) if chip is not None else None
            self.faults.observe(ev, rss)
        for cb in list(self.subs):
            try:
                cb(ev)
            except Exception:  # a subscriber's bug must not stop event delivery
                log.exception("fabric event subscriber failed on %s", kind)

    def deliver(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.timeline is not None and not self.timeline.stopping:
            self.timeline.submit(self._run_locked, fn, *args)
        else:
            self._inbox.put((fn, args))

    def wake(self) -> None:
        """Let the dispatcher see the fabric closed (it ends once its inbox is empty)."""
        self._inbox.put((lambda: None, ()))

    def _run_locked(self, fn: Callable[..., Any], *args: Any) -> None:
        with self.state.lock:
            try:
                fn(*args)
            except Exception:  # nobody awaits these futures: log rather than lose the error
                log.exception("local fabric handler %s failed", getattr(fn, "__name__", fn))

    def _dispatch(self) -> None:
        while True:
            fn, args = self._inbox.get()
            self._run_locked(fn, *args)
            if self.state.closed.is_set() and self._inbox.empty():
                return
