"""What the local fabric shares with its monitor thread and its report / exit handlers.

Handlers get this explicit state (and the fabric's public methods), never the fabric's
private fields. Hold ``lock`` to read or change it from another thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from podfleet.fabric.local.jobs import TERMINAL, LocalJob
from podfleet.fabric.local.process import WorkerProcess


@dataclass(eq=False)
class LocalState:
    n_slots: int
    metrics: dict[str, np.ndarray]  # telemetry over slots, written by the monitor and reports
    jobs: dict[str, LocalJob] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    closed: threading.Event = field(default_factory=threading.Event)

    def live_workers(self) -> list[WorkerProcess]:
        """Workers of jobs still running, alive now."""
        with self.lock:
            return [wp for j in self.jobs.values() if j.state not in TERMINAL for wp in j.workers.values()
                    if wp.alive]
