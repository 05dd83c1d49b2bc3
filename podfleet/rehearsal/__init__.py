"""Rehearsal: the whole control plane run in virtual time on the digital twin.

Twin-only code lives here, so the control plane (``control/``, ``scheduler/``,
``health/``, ``recovery/``) never imports ``podfleet.fabric.sim``: it knows fabrics only
through the ``Fabric`` protocol. This package is the one place that builds a twin and
drives work over it.

    from podfleet.rehearsal.scenario import load_scenario, parse_scenario, run_scenario
    from podfleet.rehearsal.rehearsal import rehearse
    rehearse(load_scenario("examples/pod-24h.yaml"))     # the whole control plane (podfleet sim)
    run_scenario(load_scenario("examples/pod-24h.yaml"))  # the twin alone (twin benchmarks)

    from podfleet.rehearsal.harness import make_pod, check_invariants
    pod = make_pod(seed, jobs=(64,), spares=8)   # Pod(tl, fab, orch, journal, jobs)

    from podfleet.rehearsal.chaos import ChaosRun
    ChaosRun(seed, faults=100, db_url=...).run() -> figures (recovered, jobs_lost, ...)

    from podfleet.rehearsal.evaluate import run_seed, fit_model, score
    score([run_seed(s, model=fit_model([run_seed(1)]))]) -> recall, false alarms, lead

Modules: ``scenario`` (YAML scenarios, validated; the twin-alone run), ``rehearsal``
(a scenario through the control plane's commands; ``podfleet sim``), ``report`` (its
report: recoveries, alerts, predictions, ETTR, chip-hours lost by cause),
``harness`` (a twin pod with managed jobs and the recovery orchestrator, and the
invariants), ``chaos`` (faults of every kind with invariants checked after every event
and a control-plane restart), ``evaluate`` (failure prediction trained and measured on
twin seeds, out of sample).
"""
