"""Recovery: keep jobs running through chip, memory, link, thermal and firmware faults.

    from podfleet.recovery.orchestrator import RecoveryOrchestrator
    orch = RecoveryOrchestrator(fabric, timeline, owner=ChipOwners() | rt.owners, timings=Timings(),
                                listener=MemoryJournal() | JobListener, subscribe=True, spares=None)
    orch.manage(job_id, JobPolicy(dp=2, peer_replica=True, on_no_spare="shrink" | "wait"))
    orch.handle(FabricEvent)          # chip-failed, chip-degraded (thermal), link-down/degraded/up, ...
    orch.chip_fault(chip, cause) / orch.drain(chip, reason) / orch.link_fault(link, state, reason)
    orch.adopt(journal_dict, policy)  # finish a recovery journaled by a previous control plane
    orch.active / orch.done: Recovery records (kind, target, reason, steps[name, reason, t_start, t_end])

    from podfleet.recovery.firmware import FirmwareRollouts
    fw = FirmwareRollouts(fabric, timeline, orch); fw.start(version, unit="chip" | "node", chips=None)

The fabric is any that declares ``fabric.base.RankMoves`` (the twin does; its moves'
costs are modelled, ``ResumableRuns``). Inside the control plane, the composition root
(``podfleet.compose``) builds one ``recovery.service.RecoveryService`` (an orchestrator
per cluster whose fabric declares it, its journal shown on the jobs through the job
table) and hands it to the job manager.
Benchmarks and tests build a twin pod with ``twin.harness.make_pod`` and run chaos with
``twin.chaos.ChaosRun`` (rehearsal code lives in ``podfleet.rehearsal``).
"""
