"""podfleet.scheduler: topology-aware gang scheduling, queueing, preemption, balancing.

Modelled on the Kubernetes scheduling framework: one Protocol per extension point
(``extension.py``), one module per plugin (``plugins/``, each with ``NAME``), a plain
registry (``registry.py``), plugin choice and weights as configuration
(``FrameworkConfig``), and every hook returning a ``Status`` value (``status.py``).

Dropping it into the control plane (engine thread only; one ``Scheduler`` per cluster)::

    from podfleet.scheduler import Scheduler, JobRequest, DecisionKind

    sched = Scheduler(topology, spares=4, quotas={"ml": 48}, clock=lambda: tl.now)
    d = sched.submit(JobRequest("job-1", chips=16, team="ml", priority=1, tp=4))
    if d.kind is DecisionKind.REJECTED:       # UnschedulableAndUnresolvable
        reject at submit with str(d.status)   # e.g. "no 128-chip block ..."
    for d in sched.schedule():                # call on submit, finish, chip change, or a tick
        BIND    -> fabric.launch(WorkerGroupSpec(d.job_id, d.placement.chips, ...))
                   resume from d.resume_step (0 = fresh); cores: d.placement.cores
        PREEMPT -> checkpoint each of d.victims, stop them, then
                   sched.victims_checkpointed(d.job_id, {victim: step, ...})
                   -> returns the preemptor's BIND once every victim is saved
    sched.finish(job_id)                      # done / cancelled: chips released
    sched.requeue(job_id)                     # lost a chip: back to the queue from its checkpoint
    sched.set_chip_state(chip, ChipState.FAILED); sched.set_telemetry(temperature_c=..., ...)
    sched.describe(job_id)                    # {"phase", "allocation": {"chips", "shape", "reason"}, ...}
    cluster_metrics(sched)                    # pod utilization, fragmentation, queue wait

``place(topology, usable, chips)`` places one gang without a queue (the signature of the
first-fit placer the control plane used before it drove a ``Scheduler`` per cluster; see
``podfleet.control.dispatch`` and docs/scheduler.md "In the control plane").
Balancing (``balance.py``) and forecasting (``forecast.py``) are pure numpy modules the
control plane drives from telemetry.
"""

from __future__ import annotations

from podfleet.scheduler.compat import place
from podfleet.scheduler.framework import Framework, FrameworkConfig, PluginConfig
from podfleet.scheduler.jobs import JobPhase
from podfleet.scheduler.metrics import cluster_metrics
from podfleet.scheduler.queue import QueuePolicy
from podfleet.scheduler.scheduler import Scheduler
from podfleet.scheduler.spares import choose_spares
from podfleet.scheduler.status import Code, Status
from podfleet.scheduler.types import Decision, DecisionKind, JobRequest, Placement

__all__ = [
    "Code",
    "Decision",
    "DecisionKind",
    "Framework",
    "FrameworkConfig",
    "JobPhase",
    "JobRequest",
    "Placement",
    "PluginConfig",
    "QueuePolicy",
    "Scheduler",
    "Status",
    "choose_spares",
    "cluster_metrics",
    "place",
]
