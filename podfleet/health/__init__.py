"""Health: telemetry windows and rollups, robust baselines, alerts, vectorized scans and
failure prediction. Pure numpy over metric arrays; the control plane drives it on the
timeline.

    parts = podfleet.compose.build(store, timeline)  # plane + HealthService + RecoveryService
    parts.health  # scans every 2 s (fabrics with TelemetrySource), alerts, drains, firmware

    HealthMonitor(cluster_id, fabric, timeline, book=, config=HealthConfig(), drain=, sink=)
    HealthScanner(cluster_id, n_chips, n_links, AlertBook()).scan(now, chip_metrics, states, ...)
    TelemetryHistory(cluster_id, n_chips, n_links, interval_s).query(scope, metric, range, now, target)
    Predictor(n, DEFAULT_MODEL).observe(now, chip_metrics, usable) -> [Alarm]
    podfleet.rehearsal.evaluate.run_seed / fit_model / score: train and measure prediction on twin seeds
"""
