"""State machines: every pair of states, table-driven."""

from __future__ import annotations

import itertools

import pytest

from podfleet.control.lifecycle import (
    CLUSTER_TRANSITIONS,
    JOB_TRANSITIONS,
    TERMINAL,
    ClusterState,
    JobState,
    check_cluster_transition,
    check_job_transition,
)
from podfleet.errors import InvalidTransitionError


@pytest.mark.parametrize("src,dst", list(itertools.product(JobState, JobState)))
def test_job_transitions(src: JobState, dst: JobState) -> None:
    if dst in JOB_TRANSITIONS[src]:
        check_job_transition(src, dst)
    else:
        with pytest.raises(InvalidTransitionError, match=f"from {src.value} to {dst.value}"):
            check_job_transition(src, dst)


def test_job_machine_has_the_documented_edges() -> None:
    J = JobState
    for a, b in [(J.PENDING, J.PLACING), (J.PLACING, J.RUNNING), (J.RUNNING, J.CHECKPOINTING),
                 (J.CHECKPOINTING, J.RUNNING), (J.RUNNING, J.RECOVERING), (J.RECOVERING, J.RUNNING),
                 (J.RUNNING, J.SUCCEEDED), (J.RUNNING, J.FAILED), (J.RUNNING, J.STOPPED)]:
        assert b in JOB_TRANSITIONS[a]
    for t in TERMINAL:
        assert JOB_TRANSITIONS[t] == frozenset()


@pytest.mark.parametrize("src,dst", list(itertools.product(ClusterState, ClusterState)))
def test_cluster_transitions(src: ClusterState, dst: ClusterState) -> None:
    if dst in CLUSTER_TRANSITIONS[src]:
        check_cluster_transition(src, dst)
    else:
        with pytest.raises(InvalidTransitionError):
            check_cluster_transition(src, dst)
