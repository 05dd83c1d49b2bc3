"""One chaos run (see bench/chaos.py): faults injected round-robin over every kind into
a twin with jobs, invariants checked after every timeline event, the recovery journal
and checkpoints written to a real store, and one orchestrator restart mid-recovery."""

from __future__ import annotations

from typing import Any

import numpy as np

from podfleet.fabric.base import ChipState, FabricEvent
from podfleet.hardware.faults import LINK_FAULTS, FaultKind
from podfleet.recovery.model import JobPolicy, Recovery, Timings
from podfleet.recovery.orchestrator import RecoveryOrchestrator
from podfleet.store.db import Store
from podfleet.store.records import CheckpointRecord, ClusterRecord, JobRecord
from podfleet.twin.harness import check_invariants, make_pod

SETTLE_S = 600.0
GAP_S = 120.0


class StoreJournal:
    """Listener that persists each recovery's journal in its job's status (the store)."""

    def __init__(self, store: Store, cluster_id: str) -> None:
        self.store, self.cluster_id = store, cluster_id
        self.acked: dict[str, int] = {}  # job id -> steps acknowledged in the stored journal

    def recovery_changed(self, rec: Recovery) -> None:
        if rec.job_id is None:
            return
        self.store.save_job(JobRecord(rec.job_id, self.cluster_id, "RECOVERING", {},
                                      {"recovery": rec.to_dict()}))
        self.acked[rec.job_id] = len(rec.steps)  # save_job returned: durable

    def job_recovered(self, job_id: str, chips: tuple[int, ...], rec: Recovery) -> None:
        self.recovery_changed(rec)

    def link_changed(self, link: int, state: str, rec: Recovery) -> None:
        pass


class ChaosRun:
    def __init__(self, seed: int, *, faults: int = 100, db_url: str = "sqlite://") -> None:
        self.seed, self.n_faults = seed, faults
        self.store = Store(db_url)
        self.pod = make_pod(seed, jobs=(32, 16, 8), timings=Timings(repair_s=1800.0))
        self.pod.orch.policies["job-1"] = JobPolicy(on_no_spare="wait")
        self.store.save_cluster(ClusterRecord("cl-chaos", f"chaos-{seed}", "active", {}))
        for j in self.pod.jobs:
            self.store.save_job(JobRecord(j, "cl-chaos", "RUNNING", {}, {}))
        self.journal = StoreJournal(self.store, "cl-chaos")
        self.pod.orch.listener = self.journal
        self.acked_ckpt: list[tuple[str, int]] = []
        self.violations: list[str] = []
        self.double = 0
        self.restarts = 0
        self.flows: list[Any] = []  # finished recovery flows of orchestrators replaced by restarts
        self.pod.fab.subscribe(self._on_event)

    def _on_event(self, ev: FabricEvent) -> None:
        if ev.kind == "checkpoint" and ev.job_id:
            step = int(ev.detail["step"])
            self.store.add_checkpoint(CheckpointRecord(f"ck-{ev.job_id}-{step}-{len(self.acked_ckpt)}",
                                                       ev.job_id, step, "twin://", ev.t))
            self.acked_ckpt.append((ev.job_id, step))

    def _check(self) -> None:
        for v in check_invariants(self.pod):
            if "paused with no recovery" in v:
                continue  # transient between a fault and its handling; checked at the end
            self.double += "is in jobs" in v
            self.violations.append(f"t={self.pod.tl.now:.3f} {v}")

    def _restart(self) -> None:
        """The control plane dies mid-recovery; a new orchestrator adopts the journal."""
        old = self.pod.orch
        journals = {j: self.store.get_job(j).status.get("recovery") for j in list(old.active)}  # type: ignore[union-attr]
        old.close()
        self.flows += old.done
        new = RecoveryOrchestrator(self.pod.fab, self.pod.tl, timings=old.timings, listener=self.journal,
                                  spares=self.pod.fab.spares)
        for j, pol in old.policies.items():
            if j not in journals:
                new.manage(j, pol)
        new.fenced = dict(old.fenced)
        for j, jr in journals.items():
            if jr is not None:
                new.adopt(jr, old.policies.get(j))
        self.pod.orch = new
        self.restarts += 1

    def run(self) -> dict[str, Any]:
        pod, tl, fab = self.pod, self.pod.tl, self.pod.fab
        rng = np.random.default_rng(self.seed + 7)
        kinds = list(FaultKind)
        recovered = 0
        by_kind = {k.value: 0 for k in kinds}
        env = tl.env
        restart_at = self.n_faults // 2

        def advance(until: float) -> None:
            seq = len(tl.log)
            while env.peek() <= until:
                env.step()
                if len(tl.log) != seq:
                    seq = len(tl.log)
                    self._check()
            env.run(until=until) if env.now < until else None

        advance(300.0)
        pending: list[tuple[float, set[str]]] = []
        for i in range(self.n_faults):
            kind = kinds[i % len(kinds)]
            touched: set[str] = set()
            if kind in LINK_FAULTS:
                up = np.flatnonzero(fab.link_metrics()["state"] == 0)
                fab.inject_fault(kind, link=int(up[rng.integers(up.size)]))
            else:
                cands = [c for c, j in pod.orch.owner.items()
                         if fab.chip_state(c) in (ChipState.HEALTHY, ChipState.DEGRADED)]
                chip = int(cands[rng.integers(len(cands))]) if cands else None
                if chip is None:
                    usable = np.flatnonzero(fab.usable_mask())
                    chip = int(usable[rng.integers(usable.size)])
                touched = {pod.orch.owner[chip]} if chip in pod.orch.owner else set()
                fab.inject_fault(kind, chip=chip)
            by_kind[kind.value] += 1
            pending.append((tl.now + SETTLE_S, touched))
            if i == restart_at:
                advance(tl.now + 0.005)  # inside the recovery's first steps
                self._restart()
            advance(tl.now + GAP_S)
            recovered += self._settle(pending, tl.now)
        advance(tl.now + SETTLE_S)
        recovered += self._settle(pending, float("inf"))
        final = check_invariants(pod)
        lost = [j for j in pod.jobs if str(fab.jobs[j].state) == "stopped" and j not in pod.orch.active]
        lost_writes = sum(1 for j, s in self.acked_ckpt if s not in {c.step for c in self.store.list_checkpoints(j)})
        for j, n in self.journal.acked.items():
            stored = self.store.get_job(j)
            lost_writes += int(stored is None or len(stored.status.get("recovery", {}).get("steps", [])) < n)
        self.store.close()
        flows = self.flows + pod.orch.done
        return {"recovery_flows": len(flows),
                "recovery_flows_failed": sum(f.state.value != "done" for f in flows),
                "recovery_flows_open": len(pod.orch.active),"faults": self.n_faults, "recovered": recovered, "jobs_lost": len(lost),
                "double_allocations": self.double, "acked_writes_lost": lost_writes,
                "invariant_violations": len(self.violations) + len(final),
                "first_violation": (self.violations + final)[:1], "restarts": self.restarts, "by_kind": by_kind}

    def _settle(self, pending: list[tuple[float, set[str]]], now: float) -> int:
        ok = 0
        while pending and pending[0][0] <= now:
            _, touched = pending.pop(0)
            fab = self.pod.fab
            if all(str(fab.jobs[j].state) in ("running", "finished") for j in touched):
                ok += 1
            elif all(j in self.pod.orch.active and self.pod.orch.active[j].state.value == "waiting" for j in touched):
                ok += 1  # parked by its own policy (wait for a chip): not a failed recovery
        return ok
