"""Fabrics that reach outside this process are built off the engine thread.

Connecting to a Ray cluster or running the host's ``neuron-ls`` can take as long as the
network or the command likes (a Ray address that never answers hangs ``ray.init`` for
many minutes). The engine is the one writer of every cluster, so it must never wait on
that: a cluster whose fabric reaches out is persisted at once as ``deploying`` (a
``ConnectingCluster``, with its log), its fabric is built on a daemon thread, and the
outcome comes back to the engine as a command (``FabricConnector.start``'s ``done``):
the fabric, or one line saying why there is none. A wall-clock timeout delivers
``timed out`` if the build has not answered by then; whatever the thread brings after
that is closed, never installed.

While the build runs, the fabric's own calls to the timeline (``submit``: its first
events) are held (``HeldTimeline``) and run on the engine only after the plane has
subscribed to the fabric, so none is lost.

The flow on the engine thread (register, build, install or fail, retry) and the reload of
each cluster's record at a restart are ``control.connections``; this module holds the parts
that run beside the engine.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from podfleet.control.clusterrecord import ClusterRecordOwner
from podfleet.control.lifecycle import ClusterState
from podfleet.control.logbuf import LogBuffer, rfc3339
from podfleet.control.runtime import DEPLOY_STEPS
from podfleet.control.specs import ClusterSpec
from podfleet.engine.timeline import Timeline
from podfleet.errors import PodfleetError
from podfleet.fabric.base import Fabric, close_fabric
from podfleet.hardware.topology import Topology
from podfleet.store.records import ClusterRecord
from podfleet.wire import JsonObject

log = logging.getLogger("podfleet.control")

# How long a fabric's build (a Ray connection, neuron-ls) may take before the cluster
# fails with "timed out" (PODFLEET_FABRIC_CONNECT_TIMEOUT_S).
DEFAULT_CONNECT_TIMEOUT_S = 60.0
# A deployed cluster reloaded at a restart whose fabric cannot be reached (a Ray head that
# is down) is tried again after this, doubling up to RETRY_MAX_S: it is a dependency that
# may come back, not a cluster to give up on until the next restart.
RETRY_FIRST_S = 2.0
RETRY_MAX_S = 60.0


def retry_delay(attempts: int) -> float:
    """Seconds before the next connection attempt after ``attempts`` failed ones."""
    return float(min(RETRY_MAX_S, RETRY_FIRST_S * 2.0 ** max(0, attempts - 1)))


def pending_deployment(state: str) -> JsonObject:
    return {"state": state, "percent": 0, "steps": [{"name": s, "state": "pending"} for s in DEPLOY_STEPS]}


@dataclass
class ConnectingCluster(ClusterRecordOwner):
    """A cluster whose fabric is being built, or could not be (state ``failed``). Engine
    thread only; it has the parts of a ``ClusterRuntime`` its read paths use."""

    rec: ClusterRecord
    spec: ClusterSpec
    topology: Topology  # the spec's, until the fabric brings its own
    spares: tuple[int, ...]
    target: str  # what it connects to, for messages: "Ray at HOST:6379", "neuron-ls 'CMD'"
    logs: LogBuffer = field(default_factory=LogBuffer)
    settled: bool = False  # the build answered, or timed out: later answers are closed
    failed: str | None = None  # why there is no fabric (set when the build failed)
    restored: bool = False  # reloaded from the store at a restart (not a new create)
    held_jobs: list[str] = field(default_factory=list)  # restored jobs waiting for the fabric
    attempts: int = 0  # failed connections of a deployed cluster reloaded at a restart

    @property
    def id(self) -> str:
        return self.rec.id

    @property
    def state(self) -> ClusterState:
        return ClusterState(self.rec.state)

    @property
    def deployment(self) -> JsonObject:
        return self.rec.status.deployment or pending_deployment("connecting")

    def view(self) -> JsonObject:
        rec, topo = self.rec, self.topology
        return {"id": rec.id, "name": rec.name, "state": rec.state, "type": self.spec.type,
                "fabric": self.spec.fabric, "chips": topo.n_chips, "dims": list(topo.dims),
                # The fabric says what its chips are once connected (Ray CPU slots are "cpu",
                # a Neuron host's devices its own type): until then only what the spec named.
                "chip_type": self.spec.chip_type, "spares": list(self.spares), "spare_shortfall": "",
                "cordoned": [], "draining": [], "spec": self.spec.to_dict(), "deployment": self.deployment,
                "jobs_running": 0, "scheduler": {}, "reason": rec.status.reason,
                "created_at": rfc3339(rec.created_at), "updated_at": rfc3339(rec.updated_at)}


class HeldTimeline:
    """What a fabric sees of the timeline while it is built off the engine thread:
    ``submit`` is held until ``release`` (engine thread), then passes through."""

    def __init__(self, timeline: Timeline) -> None:
        self._tl = timeline
        self._lock = threading.Lock()
        self._held: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] | None = []

    @property
    def now(self) -> float:
        return self._tl.now

    @property
    def stopping(self) -> bool:
        return self._tl.stopping

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._held is not None:
                self._held.append((fn, args, kwargs))
                return None
        return self._tl.submit(fn, *args, **kwargs)

    def release(self) -> None:
        """Engine thread: run what was held, in order; from now on calls pass through."""
        with self._lock:
            held, self._held = self._held or [], None
        for fn, args, kwargs in held:
            try:
                fn(*args, **kwargs)
            except Exception:  # one fabric event must not stop the others
                log.exception("fabric event held during its connection failed")


Done = Callable[[Fabric | None, str | None], None]


class FabricConnector:
    """Runs fabric builds on daemon threads and answers on the engine thread."""

    def __init__(self, timeline: Timeline, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
        self.tl = timeline
        self.timeout_s = timeout_s
        self._threads: set[threading.Thread] = set()
        # A build's thread outlives the fabric it built: Linux sends a child's
        # PR_SET_PDEATHSIG when the *thread* that started it exits, and Ray starts its
        # private GCS and raylet that way, so they would die with a finished build thread.
        self._released = threading.Event()

    def start(self, name: str, build: Callable[[], Fabric], done: Done) -> None:
        """Build on a thread; ``done(fabric, None)`` or ``done(None, reason)`` runs once,
        on the engine thread, within ``timeout_s``."""
        once = threading.Lock()  # the first of the build and the timer answers

        def answer(fabric: Fabric | None, reason: str | None) -> None:
            if not once.acquire(blocking=False) or self.tl.stopping:
                if fabric is not None:  # too late: nobody will own it
                    discard(fabric)
                return
            timer.cancel()
            self.tl.submit(done, fabric, reason)

        def run() -> None:
            try:
                fabric = build()
            except PodfleetError as exc:
                answer(None, exc.message)
            except Exception as exc:  # a library's own error: one line, never a traceback
                text = str(exc).strip().splitlines()
                answer(None, f"{type(exc).__name__}: {text[0][:300] if text else ''}".rstrip(": "))
            else:
                answer(fabric, None)
                self._released.wait()  # see __init__: the fabric's processes live on

        timer = threading.Timer(self.timeout_s, answer, args=(None, f"timed out after {self.timeout_s:g} s"))
        timer.daemon = True
        worker = threading.Thread(target=run, name=f"podfleet-connect-{name}", daemon=True)
        self._threads = {t for t in self._threads if t.is_alive()} | {worker}
        worker.start()
        timer.start()

    def close(self) -> None:
        """Let the threads of finished builds end (at shutdown, after the fabrics closed)."""
        self._released.set()


def discard(fabric: Fabric) -> None:
    """Close a fabric nobody owns, off the caller's thread (closing may wait on Ray)."""
    def close() -> None:
        with contextlib.suppress(Exception):
            close_fabric(fabric)

    threading.Thread(target=close, name="podfleet-fabric-close", daemon=True).start()


def target(spec: ClusterSpec) -> str:
    """What a fabric's build reaches, for messages."""
    if spec.neuron_ls is not None and spec.ray_address:
        return f"the Trainium hosts of the Ray cluster at {spec.ray_address} (neuron-ls {spec.neuron_ls!r})"
    if spec.neuron_ls is not None:
        return f"the host's Neuron devices (neuron-ls {spec.neuron_ls!r})"
    return f"fabric {spec.fabric}" + (f" at {spec.ray_address}" if spec.ray_address else "")
