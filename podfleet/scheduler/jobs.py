"""The scheduler's record of each job and its phase machine (enforced transitions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from podfleet.scheduler.types import JobRequest, Nomination, Placement
from podfleet.states import check_transition, transitions


class JobPhase(StrEnum):
    PENDING = "pending"  # queued; ``reason`` says why it is not running
    NOMINATED = "nominated"  # chips chosen, waiting for victims to checkpoint
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"  # a preemption victim saving its state
    FINISHED = "finished"
    REJECTED = "rejected"  # UnschedulableAndUnresolvable


PHASE_TRANSITIONS = transitions(JobPhase, {
    JobPhase.PENDING: {JobPhase.NOMINATED, JobPhase.RUNNING, JobPhase.REJECTED, JobPhase.FINISHED},
    JobPhase.NOMINATED: {JobPhase.RUNNING, JobPhase.PENDING, JobPhase.FINISHED},
    JobPhase.RUNNING: {JobPhase.CHECKPOINTING, JobPhase.FINISHED, JobPhase.PENDING},
    # A victim goes back to the queue only with its checkpoint (victims_checkpointed).
    JobPhase.CHECKPOINTING: {JobPhase.PENDING, JobPhase.FINISHED},
})


@dataclass
class SchedulerJob:
    """The scheduler's record of one job: its request, phase and placement (not the
    control plane's job record, ``store.records.JobRecord``)."""

    request: JobRequest
    slot: int  # small integer stored in the owner arrays
    submitted_s: float
    enqueued_s: float  # when it last entered the queue (aging counts from here)
    phase: JobPhase = JobPhase.PENDING
    reason: str = ""
    placement: Placement | None = None
    resume_step: int = 0  # the checkpoint step it resumes from
    last_checkpoint_step: int = 0
    victims: tuple[str, ...] = ()  # while NOMINATED
    nomination: Nomination | None = None  # while NOMINATED
    preempted_by: str | None = None  # while CHECKPOINTING
    preempt_reason: str = ""  # while CHECKPOINTING: why (a reclaim names the queues)
    started_s: float | None = None
    finished_s: float | None = None
    wait_s: float = 0.0  # total time queued so far
    preemptions: int = 0
    moves: int = 0  # times a reclaim moved it out of a block (checkpoint and relaunch, no requeue)
    history: list[tuple[float, str]] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return self.request.job_id

    def to(self, phase: JobPhase, now_s: float) -> None:
        check_transition("job", PHASE_TRANSITIONS, self.phase, phase)
        if self.phase in (JobPhase.PENDING, JobPhase.NOMINATED):
            self.wait_s += now_s - self.enqueued_s  # waiting for victims is queue wait too
        self.enqueued_s = now_s
        self.phase = phase
        self.history.append((now_s, phase.value))
