"""The job table's cheap re-render paths give what a full re-render gives."""

from __future__ import annotations

import copy

from podfleet.control.jobstatus import _plain_copy
from podfleet.control.jobtable import (
    Job,
    JobStatus,
    JobTable,
    Progress,
    SchedulingInfo,
)
from podfleet.control.lifecycle import JobState
from podfleet.control.placement import Allocation
from podfleet.control.specs import JobSpec
from podfleet.store.memory import MemoryStore


def test_plain_copy_is_a_deep_copy_of_json_like_data() -> None:
    v = {"shares": [3, 4, 5], "applied": True, "t": 1.5, "ring": [2, 1, 0], "nested": {"a": [{"b": None}]},
         "other": (1, [2])}
    out = _plain_copy(v)
    assert out == copy.deepcopy(v)
    assert out is not v and out["shares"] is not v["shares"] and out["nested"]["a"][0] is not v["nested"]["a"][0]
    assert out["other"][1] is not v["other"][1]  # not plain: through ``deepcopy``


def test_refresh_scheduling_renders_what_refresh_renders() -> None:
    table = JobTable(MemoryStore(), lambda: 100.0)
    job = Job("job-1", "cl-1", JobState.RUNNING, JobSpec("m", 2),
              JobStatus(Progress(step=3, steps=10), allocation=Allocation((0, 1), (2,), ""),
                        scheduling=SchedulingInfo(queue_wait_s=0.0, team="t", balance_degree=0.9,
                                                  work_split={"shares": [1, 2], "applied": True})))
    table.add(job)
    before = table.describe(job.id)
    job.status.scheduling.balance_degree = 0.95
    job.status.scheduling.work_split = {"shares": [2, 1], "applied": True}
    table.refresh_scheduling(job)
    view = table.describe(job.id)
    assert view is not before and before["scheduling"]["balance_degree"] == 0.9  # replaced, not mutated
    assert view == table.view_of(job) and list(view) == list(table.view_of(job))
    assert list(view["scheduling"]) == list(table.view_of(job)["scheduling"])


def test_views_deferred_renders_each_changed_job_once_at_the_end() -> None:
    # A reload's path: add, amend, transition several jobs, then read them.
    table = JobTable(MemoryStore(), lambda: 100.0)
    renders: list[str] = []
    table.view_of = lambda job: renders.append(job.id) or JobTable.view_of(job)  # type: ignore[method-assign]
    jobs = [Job(f"job-{i}", "cl-1", JobState.RUNNING, JobSpec("m", 2), JobStatus(Progress(step=i, steps=10)))
            for i in range(3)]
    with table.views_deferred():
        for job in jobs:
            table.add(job)
            table.amend(job, checkpoint_step=job.status.progress.step)
            table.transition(job, JobState.RECOVERING, "control plane restarted")
        with table.views_deferred():  # nested: the outer block renders
            table.refresh_scheduling(jobs[0])
        assert renders == [] and table.views == {}
    assert sorted(renders) == ["job-0", "job-1", "job-2"]
    for job in jobs:
        view = table.describe(job.id)
        assert view == JobTable.view_of(job) and view["state"] == "RECOVERING"
        assert view["checkpoint_step"] == job.status.progress.step
    table.refresh(jobs[0])  # outside the block: rendered at once again
    assert renders[-1] == "job-0"
