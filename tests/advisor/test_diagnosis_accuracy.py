"""Diagnosis accuracy measured on injected faults on the twin (the ``diagnosis`` bench's
quick run): every kind, one and two at once, with decoys."""

from __future__ import annotations

from podfleet.benchmarks import discover


def test_diagnosis_accuracy_on_injected_faults() -> None:
    out = discover()["diagnosis"].module.run(quick=True)
    assert out["faults"] >= 12
    assert out["accuracy"] >= 0.98, out["missed"]
    assert out["false_findings_ratio"] <= 0.02, out["extra"]
