"""Fitted efficiency parameters, stored as data.

Produced by ``python -m podfleet.perf.calibration`` (prints this table as JSON), from
the rows named in ``source``; ``tests/perf/test_step.py`` re-runs the fits and checks
these values. Edit only by re-running that command.
"""

from __future__ import annotations

COMMAND = "python -m podfleet.perf.calibration"

FITS: dict[str, dict[str, float | str]] = {
    "a100": {
        "matmul": 0.74, "hbm": 0.80, "link": 0.60,
        "source": "reference/validation.md, all 12 rows (calibration.calibrate)",
    },
    "trn1": {
        "matmul": 0.47, "hbm": 0.80, "link": 0.60, "microbatch_s": 0.020,
        "source": "reference/validation_trn.md, its 3 rows (calibration.calibrate_trn): matmul and "
                  "microbatch_s; link carried over from the a100 fit, hbm fixed",
    },
}
