"""Cluster and job lifecycles: enums with enforced transitions (``podfleet.states``)."""

from __future__ import annotations

from enum import StrEnum

from podfleet.states import check_transition, transitions


class ClusterState(StrEnum):
    DEPLOYING = "deploying"
    ACTIVE = "active"
    FAILED = "failed"
    DELETING = "deleting"
    DELETED = "deleted"


CLUSTER_TRANSITIONS = transitions(ClusterState, {
    ClusterState.DEPLOYING: {ClusterState.ACTIVE, ClusterState.FAILED, ClusterState.DELETING},
    ClusterState.ACTIVE: {ClusterState.DELETING},
    ClusterState.FAILED: {ClusterState.DELETING},
    ClusterState.DELETING: {ClusterState.DELETED},
})


class JobState(StrEnum):
    PENDING = "PENDING"
    PLACING = "PLACING"
    RUNNING = "RUNNING"
    CHECKPOINTING = "CHECKPOINTING"
    RECOVERING = "RECOVERING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED})
_END = frozenset({JobState.FAILED, JobState.STOPPED})

JOB_TRANSITIONS = transitions(JobState, {
    JobState.PENDING: frozenset({JobState.PLACING}) | _END,
    # PLACING -> PENDING: the launch was undone (e.g. a chip failed before it started).
    JobState.PLACING: frozenset({JobState.RUNNING, JobState.PENDING}) | _END,
    JobState.RUNNING: frozenset({JobState.CHECKPOINTING, JobState.RECOVERING, JobState.SUCCEEDED}) | _END,
    # CHECKPOINTING -> PENDING: preempted. Only ``control.dispatch`` takes it, after the
    # victim's checkpoint is persisted and its workers are stopped (checkpoint and requeue).
    JobState.CHECKPOINTING: frozenset({JobState.RUNNING, JobState.RECOVERING, JobState.SUCCEEDED,
                                       JobState.PENDING}) | _END,
    # RECOVERING -> PENDING: a job whose pod was lost, requeued from its checkpoint by its
    # on-pod-loss policy (``control.podloss``), its workers stopped and chips released.
    JobState.RECOVERING: frozenset({JobState.RUNNING, JobState.PENDING}) | _END,
})

# Jobs that hold chips (an allocation) on their cluster.
HOLDS_CHIPS = frozenset({JobState.PLACING, JobState.RUNNING, JobState.CHECKPOINTING, JobState.RECOVERING})


def check_cluster_transition(src: ClusterState, dst: ClusterState) -> None:
    check_transition("cluster", CLUSTER_TRANSITIONS, src, dst)


def check_job_transition(src: JobState, dst: JobState) -> None:
    check_transition("job", JOB_TRANSITIONS, src, dst)
