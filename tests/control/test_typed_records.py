"""A job's typed spec, allocation and plan keep the JSON shape rows and views had."""

from __future__ import annotations

from podfleet.control.jobstatus import Job
from podfleet.control.lifecycle import JobState
from podfleet.control.placement import Allocation
from podfleet.control.planning import Plan
from podfleet.control.specs import JobSpec
from podfleet.store.records import JobRecord


def test_a_row_stored_before_the_types_loads_and_saves_the_same_json() -> None:
    spec = {"model": "debug", "chips": 8, "steps": 100, "checkpoint_interval": 10, "priority": 50,
            "parallelism": {"tp": 2, "pp": 1, "dp": 4}, "team": "ml", "a_field_since_removed": 1}
    status = {"progress": {"step": 5, "steps": 100},
              "allocation": {"pod": 0, "chips": [4, 5, 6, 7, 0, 1, 2, 3], "shape": [2, 4], "offset": [0, 0],
                             "cores": [[0, 1]], "score": 0.75, "reason": "bound"},
              "plan": {"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1, "num_micro_batches": 8, "recompute": "selective",
                       "step_time_s": 0.5, "block_shape": [2, 4]}}
    job = Job.from_record(JobRecord("job-1", "cl-1", "RUNNING", spec, status, 1.0, 2.0))
    assert job.state is JobState.RUNNING and job.spec.parallelism == (2, 1, 4) and job.spec.team == "ml"
    assert job.chips == (4, 5, 6, 7, 0, 1, 2, 3)
    assert job.status.allocation == Allocation((4, 5, 6, 7, 0, 1, 2, 3), (2, 4), "bound", 0, (0, 0), ((0, 1),), 0.75)
    assert job.status.plan is not None and job.status.plan.block_shape == (2, 4) and job.status.plan.predicted
    again = job.record()
    assert again.spec == JobSpec.from_dict(spec).to_dict()
    assert "a_field_since_removed" not in again.spec and again.spec["parallelism"] == {"tp": 2, "pp": 1, "dp": 4}
    assert again.status["allocation"] == status["allocation"] and again.status["plan"] == status["plan"]


def test_the_spec_view_is_one_rendering_and_to_dict_a_fresh_copy() -> None:
    spec = JobSpec("debug", 4, options={"seed": 1})
    a, b = spec.to_dict(), spec.to_dict()
    a["options"]["seed"] = 2
    assert b["options"] == {"seed": 1} and spec.view["options"] == {"seed": 1} and spec.view is spec.view


def test_a_plan_without_a_prediction_gives_workers_no_plan() -> None:
    fallback = Plan(1, 1, 30, note="no planner prediction: scattered")
    assert not fallback.predicted and fallback.to_dict() == {"tp": 1, "pp": 1, "dp": 30,
                                                             "note": "no planner prediction: scattered"}
    assert Plan.from_dict({"note": "x"}) is None
