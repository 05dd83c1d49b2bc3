"""End to end on the twin: a precursor builds up, the monitor predicts the failure from
telemetry alone, the orchestrator drains the chip, and the failure never lands."""

from __future__ import annotations

import pytest

from podfleet.health.monitor import HealthMonitor
from podfleet.rehearsal.harness import check_invariants, make_pod


@pytest.mark.parametrize(("kind", "warmup_s", "lead_s"), [
    ("hbm-uncorrectable", 600.0, 2400.0),
    ("chip-failure", 5400.0, 2400.0),  # the thermal baseline needs an hour of history
])
def test_predicted_failure_is_drained_before_it_lands(kind: str, warmup_s: float, lead_s: float) -> None:
    pod = make_pod(3, topology="trn2-ultraserver", jobs=(48,), spares=8)
    mon = HealthMonitor("cl-drain", pod.fab, pod.tl, drain=pod.orch.drain)
    mon.start()
    pod.tl.run(until=warmup_s)
    chip = pod.fab.job("job-0").chips[17]
    pod.fab.inject_fault(kind, chip=chip, precursor=True, lead_s=lead_s)
    due = pod.tl.now + lead_s
    pod.tl.run(until=due + 60.0)
    predicted = pod.tl.log.filter("failure-predicted", chip=chip)
    assert predicted and predicted[0]["t"] <= due - 600.0  # at least 10 minutes ahead
    drains = [r for r in pod.orch.done if r.kind == "drain"]
    assert drains and chip not in pod.fab.job("job-0").chips
    faults = [r for r in pod.tl.log.filter("fault", chip=chip)]
    assert faults and faults[-1].get("averted") is True  # the chip was out of service in time
    assert str(pod.fab.job("job-0").state) == "running" and check_invariants(pod) == []
    assert mon.book.is_open("cl-drain", f"chip:{chip}", "predicted-failure")
