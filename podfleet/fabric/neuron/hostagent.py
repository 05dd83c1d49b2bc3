"""The Neuron tools of one Trainium host of a neuron cluster across Ray nodes.

``NeuronHostAgent`` is a Ray actor pinned to its host's node (``hosts.py`` wraps it with
``ray.remote``, so this module imports without Ray). On the node it runs the cluster's
neuron-ls command once and neuron-monitor under a ``MonitorSupervisor``, exactly as the
single-host fabric runs them here (no shell, the scrubbed tool environment, restarts with
backoff; the monitor ends with the agent's process, even one Ray kills), and buffers what the monitor says until the control plane's poller drains it.
The commands see the node's environment (``NEURON_*`` passes the scrub): a host's own
tools, or in tests a replay that picks the host's recorded documents.

Nothing the tools print is trusted past parsing: neuron-ls is parsed into a
``NeuronInventory`` on the node (a bad document is an error the driver shows, naming the
node), reports into ``MonitorReport`` values, bounded (``MAX_PENDING``)."""

from __future__ import annotations

import os
import socket
import threading
from collections import deque
from typing import Any

from podfleet.errors import PodfleetError
from podfleet.fabric.neuron.command import MonitorSupervisor, run_neuron_ls
from podfleet.fabric.neuron.ls import NeuronInventory
from podfleet.fabric.neuron.monitor import MonitorReport

# Reports kept between two drains (the poller drains every fraction of a second; a
# monitor's period is a second or more): past it the oldest go, the newest count.
MAX_PENDING = 64
TROUBLE_KEPT = 20


class NeuronHostAgent:
    def __init__(self, neuron_ls: str, neuron_monitor: str, *, ls_timeout_s: float = 30.0,
                 backoff_initial_s: float = 1.0, backoff_max_s: float = 60.0, stale_after_s: float = 60.0,
                 max_bad_in_row: int = 3) -> None:
        self._lock = threading.Lock()
        self._reports: deque[MonitorReport] = deque(maxlen=MAX_PENDING)
        self._trouble: deque[str] = deque(maxlen=TROUBLE_KEPT)
        self.inventory: NeuronInventory | None = None
        self.error: dict[str, str] | None = None
        try:
            self.inventory = run_neuron_ls(neuron_ls, ls_timeout_s)
        except PodfleetError as exc:  # shown by the driver, naming this node
            self.error = {"kind": type(exc).__name__, "message": exc.message, "field": exc.field or "neuron_ls"}
        self._monitor = MonitorSupervisor(
            neuron_monitor, on_report=self._report, on_trouble=self._troubled,
            backoff_initial_s=backoff_initial_s, backoff_max_s=backoff_max_s,
            stale_after_s=stale_after_s, max_bad_in_row=max_bad_in_row, die_with_parent=True)
        self._started = False

    def hello(self) -> dict[str, Any]:
        """The host's inventory (or why neuron-ls failed) and where the agent runs."""
        return {"inventory": self.inventory, "error": self.error, "hostname": socket.gethostname(),
                "pid": os.getpid(), "node_id": _node_id()}

    def start(self) -> None:
        if not self._started and self.inventory is not None:
            self._started = True
            self._monitor.start()

    def drain(self) -> dict[str, Any]:
        """The reports and troubles since the last drain, and the monitor's counters."""
        with self._lock:
            reports, self._reports = list(self._reports), deque(maxlen=MAX_PENDING)
            trouble, self._trouble = list(self._trouble), deque(maxlen=TROUBLE_KEPT)
        m = self._monitor
        return {"reports": reports, "trouble": trouble, "pid": m.pid, "runs": m.runs, "restarts": m.restarts,
                "malformed": m.malformed, "stderr_tail": list(m.stderr_tail)}

    def close(self) -> None:
        self._monitor.close()

    def _report(self, report: MonitorReport) -> None:
        with self._lock:
            self._reports.append(report)

    def _troubled(self, reason: str) -> None:
        with self._lock:
            self._trouble.append(reason)


def _node_id() -> str:
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:  # outside Ray (tests)
        return ""
