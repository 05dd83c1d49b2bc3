"""The Ray fabric's fault log (``HardwareErrors``): what happened to its workers and nodes,
as the fabric observed it, never a label someone attached. Entries are ``worker-fault``
``FabricEvent``s in fabric/local/faultlog.py's vocabulary, so health alerts and ``diagnose``
read both fabrics the same way (``detail["observed"]``):

* ``hang``: an actor that had trained (armed) stopped heartbeating and answering polls
  for ``heartbeat_age_s`` (a rank still starting is never one: runner.py arms a rank at
  its first step, as local arms a worker once its imports are done);
* ``signal``: the actor died without an exit of its own (``RayActorError``: its process
  was killed or crashed), or its worker child died of ``signal``; ``actor_error`` is
  Ray's first line about it, ``injected_kill`` marks podfleet's own ``kill_worker``;
* ``node-lost``: the actor's node died (Ray says so), or a node holding chips left the
  cluster (``chip-failed`` with its ``node_id``);
* ``cluster-unreachable``: the gang was lost with the Ray head (no alert of a worker:
  the cluster's own ``fabric-unreachable`` says it);
* ``exit``: the worker exited with ``exit_code`` that ``fabric.base.exit_cause`` charges to
  the job's code or the infrastructure.

Each entry has ``cause`` (``ExitCause`` value), ``rank``, ``attempt`` (1: this fabric
restarts nothing itself) and ``rss_bytes`` (the rank's last sampled memory). Bounded,
oldest first, like local's.
"""

from __future__ import annotations

import re
import signal
import threading
from collections import deque

from podfleet.fabric.base import ExitCause, FabricEvent, exit_cause
from podfleet.fabric.ray.jobs import RayState

WORKER_FAULT = "worker-fault"
# Ray's words for an actor whose node went (ActorDiedError: "... because its node has
# died", the runner's "its Ray node ... is not alive").
_NODE_GONE = re.compile(r"\bnode\b.*\b(died|dead|not alive|lost)\b", re.IGNORECASE)
# Exits that are not faults of a worker: a clean end, a survivor that lost its peer (the
# first rank's fault is the one logged), input the job refused.
_LOGGED_CAUSES = frozenset({ExitCause.USER_CODE, ExitCause.INFRA})


class FaultLog:
    """``observe`` reads the fabric's own events as it publishes them (engine thread);
    ``all`` may be called from any thread."""

    def __init__(self, keep: int = 1000) -> None:
        self.entries: deque[FabricEvent] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def observe(self, ev: FabricEvent, state: RayState | None = None) -> FabricEvent | None:
        """Log ``ev`` if it shows a worker or node fault; returns the entry (None when not)."""
        entry = _entry(ev)
        if entry is None:
            return None
        rank = ev.detail.get("rank")
        entry.update({"rank": rank, "attempt": 1, "rss_bytes": _rss(state, ev.job_id, rank),
                      "message": ev.detail.get("reason")})
        out = FabricEvent(WORKER_FAULT, ev.t, chip=ev.chip, job_id=ev.job_id, detail=entry)
        with self._lock:
            self.entries.append(out)
        return out

    def all(self) -> list[FabricEvent]:
        with self._lock:
            return list(self.entries)


def _entry(ev: FabricEvent) -> dict[str, object] | None:
    d = ev.detail
    if ev.kind == "hang":
        return {"observed": "hang", "heartbeat_age_s": d.get("heartbeat_age_s"), "started": True,
                "cause": ExitCause.INFRA.value}
    if ev.kind == "chip-failed" and d.get("node_id"):
        return {"observed": "node-lost", "node_id": d["node_id"], "cause": ExitCause.INFRA.value}
    if ev.kind != "worker-exited":
        return None
    killed_by = d.get("killed_by")
    if killed_by in ("stop", "hang", "drain"):
        return None  # our own kill: of a hung rank (logged as the hang), a stop, a drained chip's rank
    code = d.get("exit_code")
    error = str(d.get("error") or "")
    injected = {"injected_kill": True} if killed_by == "fault" else {}
    if code is None:  # no exit of its own: the actor (or its node, or the cluster) is gone
        if killed_by is None and ev.chip is None and "unreachable" in error:
            # runner.lose_all: the head is lost, so nothing is known of the actors; not a
            # worker's fault (the cluster's fabric-unreachable alert says what happened).
            return {"observed": "cluster-unreachable", "actor_error": error, "cause": ExitCause.INFRA.value}
        if _NODE_GONE.search(error) and killed_by is None:
            return {"observed": "node-lost", "actor_error": error, "cause": ExitCause.INFRA.value}
        return {"observed": "signal", "signal": None, "actor_error": error, "cause": ExitCause.INFRA.value,
                **injected}
    code = int(code)
    if code < 0:  # the worker child (root sandbox, ray/child.py) died of a signal
        return {"observed": "signal", "signal": _signame(-code), "cause": ExitCause.INFRA.value, **injected}
    cause = exit_cause(code)
    if cause not in _LOGGED_CAUSES:
        return None
    return {"observed": "exit", "exit_code": code, "cause": cause.value}


def _rss(state: RayState | None, job_id: str | None, rank: object) -> float | None:
    if state is None or job_id is None or not isinstance(rank, int):
        return None
    with state.lock:
        job = state.jobs.get(job_id)
        if job is None or not 0 <= rank < len(job.ranks):
            return None
        mem = job.ranks[rank].mem_bytes
    return mem or None


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
