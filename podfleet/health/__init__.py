"""Health: telemetry windows and rollups, robust baselines, alerts, vectorized scans and
failure prediction. Pure numpy over metric arrays; the control plane drives it on the
timeline."""
