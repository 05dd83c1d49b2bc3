"""Recovery: keep jobs running through chip, memory, link, thermal and firmware faults.

    from podfleet.recovery.orchestrator import RecoveryOrchestrator
    orch = RecoveryOrchestrator(fabric, timeline, owner={} | rt.owner, timings=Timings(),  # journal.py: listeners
                                listener=MemoryJournal() | PlaneListener, subscribe=True, spares=None)
    orch.manage(job_id, JobPolicy(dp=2, peer_replica=True, on_no_spare="shrink" | "wait"))
    orch.handle(FabricEvent)          # chip-failed, chip-degraded (thermal), link-down/degraded/up, ...
    orch.chip_fault(chip, cause) / orch.drain(chip, reason) / orch.link_fault(link, state, reason)
    orch.adopt(journal_dict, policy)  # finish a recovery journaled by a previous control plane
    orch.active / orch.done: Recovery records (kind, target, reason, steps[name, reason, t_start, t_end])

    from podfleet.recovery.firmware import FirmwareRollouts
    fw = FirmwareRollouts(fabric, timeline, orch); fw.start(version, unit="chip" | "node", chips=None)

Inside the control plane, ``podfleet.health.service.HealthService.install(plane)`` wires
one orchestrator per cluster (``recovery.plane.PlaneRecovery``) into the JobManager.
Benchmarks and tests use ``recovery.harness.make_pod`` and ``recovery.chaos.ChaosRun``.
"""
