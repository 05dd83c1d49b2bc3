"""Prediction trained on some twin seeds, measured on others (held out)."""

from __future__ import annotations

from podfleet.twin.evaluate import fit_model, run_seed, score


def test_prediction_on_held_out_seeds() -> None:
    kw = {"pods": 2, "hours": 12.0, "rate_scale": 800.0, "interval_s": 10.0}
    model = fit_model([run_seed(1, **kw)])
    held_out = score([run_seed(55, model=model, **kw)])
    assert held_out["failures_with_precursor"] >= 2
    assert held_out["recall"] >= 0.5
    assert held_out["recall_all_failures"] <= held_out["precursor_share"] + 0.25
    assert held_out["median_lead_s"] >= 600.0
