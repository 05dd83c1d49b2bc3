"""One placement without a queue (the signature of the first-fit placer the control plane
used before it drove a ``Scheduler`` per cluster).

Runs the default framework once on a throwaway cluster state in which the chips that are
not ``usable`` are held, so callers get topology-aware placement before they adopt the
full ``Scheduler`` (queue, quotas, preemption).
"""

from __future__ import annotations

import itertools

import numpy as np

from podfleet.hardware.topology import Topology
from podfleet.scheduler.types import JobRequest, Placement

_ids = itertools.count()


def place(topology: Topology, usable: np.ndarray, chips: int) -> Placement | None:
    """A gang of ``chips`` chips among ``usable`` (bool mask over chips), or None.

    The result has ``chips`` (rank order), ``shape``, ``reason`` and ``to_dict()``.
    """
    from podfleet.scheduler.scheduler import Scheduler
    from podfleet.scheduler.types import DecisionKind

    usable = np.asarray(usable, dtype=bool)
    if chips < 1 or int(usable.sum()) < chips:
        return None
    sched = Scheduler(topology)
    blocker = sched.cluster
    for pod in blocker.pods:
        lo = pod.index * blocker.chips_per_pod
        pod.owner[~usable[lo : lo + blocker.chips_per_pod]] = -2  # held by "someone else"
        blocker.touch(pod)
    job = JobRequest(f"place-{next(_ids)}", chips)
    d = sched.submit(job)
    if d.kind is DecisionKind.REJECTED:
        return None
    for d in sched.schedule():
        if d.kind is DecisionKind.BIND:
            return d.placement
    return None
