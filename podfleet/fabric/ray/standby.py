"""Warm standby actors for rank moves on the Ray fabric (``PODFLEET_RAY_WARM_ACTORS``).

Most of a rank move's time is its replacement's start: a new Ray worker process, then
torch and the training modules imported in it (measured on this 2-core machine under
load: the actor up about 4 s after the loss, the gang re-formed 15 s later). A standby is
a ``WorkerActor`` started ahead on a node that holds chips, that has already imported
all that (``training.worker.preload``, as the local fabric's warm workers do); a move onto
a chip of that node takes it instead of starting a cold actor, and the poller makes a new
one for the next move.

A standby reserves no CPU of its own (``num_cpus=0``, hard affinity to its node): the
chip it then runs a rank for is still reserved by a bundle of the job (the gang's
placement group, or the move's own), so it runs beside that bundle, never on top of
another job's. CPU slots only: a GPU or Neuron device is Ray's to hand to an actor.
Standbys are detached and named ``standby/<node>/<token>`` in the cluster's namespace, so
a moved rank's record names its actor as any other; the fabric kills the idle ones when
it closes, and a plane that starts discards those it finds.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from podfleet.fabric.ray import supervisor
from podfleet.fabric.ray.nodes import NodeMap

WARM_ENV = "PODFLEET_RAY_WARM_ACTORS"  # standbys per node with chips (default 0: none)
ROLE = "standby"


def per_node(resource: str) -> int:
    """How many standbys each node keeps (0 unless asked, and only for CPU slots)."""
    try:
        n = int(os.environ.get(WARM_ENV, "0") or 0)
    except ValueError:
        return 0
    return max(0, n) if resource == "CPU" else 0


class Standbys:
    """The idle standbys per node (poller thread and mover threads; its own lock)."""

    def __init__(self, ray: Any, namespace: str, n: int, names: set[str]) -> None:
        self.ray, self.namespace, self.n = ray, namespace, n
        self._lock = threading.Lock()
        self._idle: dict[str, list[tuple[str, Any, Any]]] = {}  # node id -> (name, actor, preload ref)
        # Every standby made and not yet killed or taken: ``RayState.standby_names``, which
        # ``discard_unadopted`` spares.
        self.names = names

    def refill(self, nodes: NodeMap, actor_class: Any, options: dict[str, Any]) -> None:
        """Start standbys on live nodes holding chips until each has ``n`` (no lock held by the caller)."""
        if self.n <= 0:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        for node in list(nodes.nodes.values()):
            if not node.alive or not nodes.chips_on(node.node_id):
                continue
            with self._lock:
                have = self._idle.setdefault(node.node_id, [])
                missing = self.n - len(have)
            for _ in range(missing):
                name = f"{ROLE}/{node.short}/{supervisor.launch_token()}"
                renv = {"runtime_env": options["runtime_env"]} if options.get("runtime_env") else {}
                actor = actor_class.options(
                    num_cpus=0, max_concurrency=4, max_restarts=0, name=name, namespace=self.namespace,
                    lifetime="detached", **renv,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                ).remote(ROLE, 0)
                with self._lock:
                    self._idle[node.node_id].append((name, actor, actor.preload.remote()))
                    self.names.add(name)

    def take(self, node_id: str) -> tuple[str, Any] | None:
        """A standby on ``node_id`` that has finished its imports, or None (a Ray call that
        does not wait)."""
        with self._lock:
            idle = list(self._idle.get(node_id, ()))
        for entry in idle:
            name, actor, ref = entry
            ready, _ = self.ray.wait([ref], timeout=0)
            if not ready:
                continue
            with self._lock:
                if entry not in self._idle.get(node_id, []):
                    continue
                self._idle[node_id].remove(entry)
            try:
                self.ray.get(ref, timeout=0)
            except Exception:  # it died while preloading: drop it, a cold actor is started
                self._drop(name, actor)
                continue
            return name, actor
        return None

    def ready(self) -> int:
        """Idle standbys that finished their imports (a Ray call that does not wait)."""
        with self._lock:
            refs = [ref for entries in self._idle.values() for _n, _a, ref in entries]
        return len(self.ray.wait(refs, num_returns=len(refs), timeout=0)[0]) if refs else 0

    def taken(self, name: str) -> None:
        """The standby now runs a rank: its job's record names it (and keeps it from discard)."""
        with self._lock:
            self.names.discard(name)

    def close(self) -> None:
        """Kill every idle standby."""
        with self._lock:
            idle = [(n, a) for entries in self._idle.values() for n, a, _r in entries]
            self._idle.clear()
        for name, actor in idle:
            self._drop(name, actor)

    def _drop(self, name: str, actor: Any) -> None:
        with contextlib.suppress(Exception):
            self.ray.kill(actor, no_restart=True)
        with self._lock:
            self.names.discard(name)
