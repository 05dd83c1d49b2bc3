"""Jobs the control plane runs on the twin get their step time from the performance
model: the plan they were given, their gradient compression and where their ranks sit."""

from __future__ import annotations

import pytest

from podfleet.fabric.sim.perfstep import perf_breakdown
from podfleet.rehearsal.recovery_rehearsal import rehearse

JOB = {"model": "llama3-8b", "chips": 16, "steps": 10**6, "checkpoint_interval": 50}


def _step_s(body: dict[str, object]) -> tuple[float, float, dict[str, object]]:
    r = rehearse(2)
    job = r.submit(dict(body))
    r.tl.run(r.tl.now + 600.0)
    run = r.fabric.job(job)
    expected = perf_breakdown(run.spec, r.fabric)
    assert expected is not None and "params" not in run.spec.options
    return float(run.step_time_s), expected[2], dict(run.spec.options)


def test_plan_and_compression_set_the_twin_step_time() -> None:
    tp8, tp8_model, _ = _step_s({**JOB, "parallelism": {"tp": 8, "pp": 1, "dp": 2}})
    tp2, tp2_model, _ = _step_s({**JOB, "parallelism": {"tp": 2, "pp": 1, "dp": 8}})
    comp, comp_model, opts = _step_s({**JOB, "parallelism": {"tp": 2, "pp": 1, "dp": 8},
                                      "grad_compression": "powersgd:4"})
    # Each within the twin's per-step noise of what perf predicts for its own plan.
    assert tp8 == pytest.approx(tp8_model, rel=0.02) and tp2 == pytest.approx(tp2_model, rel=0.02)
    assert tp8 > 1.2 * tp2  # tp 8 puts twice the all-reduce volume on the links per step
    # The compression option reaches the twin and its estimate (codec time included).
    assert opts["grad_compression"] == "powersgd:4" and comp == pytest.approx(comp_model, rel=0.02)
    assert comp_model != tp2_model
