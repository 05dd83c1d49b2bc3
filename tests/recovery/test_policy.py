"""A job's recovery policy from its spec and the chips it runs on now."""

from __future__ import annotations

from podfleet.control.specs import JobSpec
from podfleet.recovery.service import policy_for


def _spec(d: dict) -> JobSpec:
    return JobSpec.from_dict({"model": "debug", **d})


def test_policy_from_the_spec() -> None:
    spec = _spec({"chips": 32, "parallelism": {"tp": 8, "pp": 1, "dp": 4}})
    assert policy_for(spec).dp == 4 and policy_for(spec).on_no_spare == "shrink"
    assert policy_for(_spec({"chips": 16, "parallelism": {"tp": 8, "pp": 2, "dp": 1}})).on_no_spare == "wait"
    assert policy_for(_spec({"chips": 8, "parallelism": "auto"})).dp == 1


def test_a_shrunk_job_relaunched_after_a_restart_counts_its_replicas_now() -> None:
    # Shrunk from 4 replicas to 3 before the restart: a next shrink drops a whole 8-chip
    # replica, not 24 / 4 = 6 chips across two tensor-parallel groups.
    spec = _spec({"chips": 32, "parallelism": {"tp": 8, "pp": 1, "dp": 4}})
    assert policy_for(spec, 24).dp == 3
    assert policy_for(spec, 8).dp == 1 and policy_for(spec, 8).on_no_spare == "wait"
    assert policy_for(spec, 32).dp == 4
    assert policy_for(spec, 20).dp == 4  # not whole replicas: the spec's figure
