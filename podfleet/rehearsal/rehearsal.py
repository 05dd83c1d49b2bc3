"""Rehearse a scenario with the whole control plane in virtual time (``podfleet sim``).

``podfleet.compose.build`` gives the plane (scheduler and balancer per cluster, the job
table, the twin driver), health (scans, prediction, alerts, firmware) and recovery, on a
seeded virtual-time timeline and a store (in memory, or a SQLite file). The scenario's
jobs and commands go through the same commands the API calls: ``plane.create_cluster``,
``plane.jobs.submit`` / ``stop``, ``plane.inject_fault``, ``firmware.start_firmware``.

Only what the API cannot express touches the twin directly: the cluster's fabric is
built with the scenario's topology (a fleet of ``pods`` pods is one cluster), telemetry
interval and precursor shares, its fault rates are set once the cluster is active, and a
scripted fault with ``precursor: true`` (ground truth the API does not model) is
injected on the fabric.

Scenario time 0 is the moment the cluster is active (its deployment takes about 30 s
of timeline time); ``at``, ``start_at`` and ``duration`` count from there.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from podfleet.compose import Parts, build
from podfleet.control.lifecycle import ClusterState
from podfleet.control.specs import CLUSTER_TYPES, MAX_SPARES, JobSpec
from podfleet.engine.timeline import Timeline
from podfleet.errors import InvalidInputError, PodfleetError
from podfleet.fabric.base import Fabric
from podfleet.fabric.sim.fabric import SimFabric
from podfleet.fabric.sim.faults import FaultRates, PrecursorParams
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.topology import Topology
from podfleet.health.scan import HealthConfig
from podfleet.rehearsal.report import Tracker, build_report
from podfleet.rehearsal.scenario import Command, FaultCommand, JobConfig, Scenario, ScriptedFault
from podfleet.store.memory import MemoryStore
from podfleet.store.protocol import StoreProtocol

ACTOR = "scenario"
CLUSTER = "pod"
DEPLOY_LIMIT_S = 4 * 3600.0  # a 1,024-pod fleet deploys in about 1,300 s of timeline


def job_body(j: JobConfig, *, field: str) -> dict[str, Any]:
    """The ``SubmitTrainingJob`` body of a scenario job (checked as the API would)."""
    if j.tokens_per_step is not None:
        raise InvalidInputError(f"{field}.tokens_per_step applies to the twin alone; the control plane takes the "
                                "batch from the job's plan", field=f"{field}.tokens_per_step")
    body: dict[str, Any] = {"name": j.id, "model": j.model, "chips": j.n_chips, "steps": j.steps,
                            "checkpoint_interval": j.checkpoint_interval, "priority": j.priority,
                            "parallelism": j.parallelism}
    try:
        JobSpec.parse(dict(body))
    except PodfleetError as exc:
        raise InvalidInputError(f"{field}: {exc.message}", field=f"{field}.{exc.field or 'job'}") from None
    return body


class Rehearsal:
    """One scenario on a fresh control plane; ``run()`` advances it and returns the report."""

    def __init__(self, sc: Scenario, *, store: StoreProtocol | None = None) -> None:
        self.sc = sc
        if sc.pod_type not in CLUSTER_TYPES or sc.pod_type == "custom":
            raise InvalidInputError(f"pod_type {sc.pod_type!r} cannot be a control-plane cluster; use one of "
                                    f"{', '.join(t for t in CLUSTER_TYPES if t != 'custom')}", field="pod_type")
        if sc.spares > MAX_SPARES:
            raise InvalidInputError(f"spares must be 0-{MAX_SPARES} for a control-plane cluster, got {sc.spares}",
                                    field="spares")
        self.topology: Topology = get_topology(sc.topology_name)
        self._check_targets()
        self.bodies = {j.id: job_body(j, field=f"jobs.{i}") for i, j in enumerate(sc.jobs)}
        for i, c in enumerate(sc.commands):
            if c.submit is not None:
                self.bodies[c.submit.id] = job_body(c.submit, field=f"commands.{i}.submit")
        self.tl = Timeline(sc.seed)
        self.fabric: SimFabric | None = None
        health = replace(HealthConfig(), interval_s=sc.telemetry_interval_s)
        self.parts: Parts = build(store or MemoryStore(), self.tl, fabric_factory=self._make_fabric,
                                  telemetry_interval_s=sc.telemetry_interval_s, health_config=health)
        self.plane = self.parts.plane
        self.plane.load()
        view = self.plane.create_cluster({"name": CLUSTER, "type": sc.pod_type, "spares": sc.spares}, actor=ACTOR)
        self.cluster_id: str = view["id"]
        rt = self.plane.clusters[self.cluster_id]
        # The runtime's state, not ``describe_cluster``: a describe asks for a fresh hardware
        # snapshot at the next tick, which for a 65,536-chip fleet costs seconds.
        while rt.state != ClusterState.ACTIVE:
            if self.tl.now > DEPLOY_LIMIT_S:
                raise InvalidInputError(f"cluster did not become active in {DEPLOY_LIMIT_S:g} s", field="scenario")
            self.tl.run(self.tl.now + 1.0)
        self.t0 = self.tl.now
        assert self.fabric is not None
        self.fabric.set_fault_rates(sc.rates())
        self.job_ids: dict[str, str] = {}  # scenario job id -> control-plane job id
        self.command_log: list[dict[str, Any]] = []
        self.tracker: Tracker = Tracker(self.fabric, self.tl)
        self._schedule()

    # --- building --------------------------------------------------------------------------
    def _make_fabric(self, kind: str, topology: Topology, timeline: Timeline, spares: tuple[int, ...], seed: int,
                     *, options: Mapping[str, Any] | None = None) -> Fabric:
        """The cluster's twin: the scenario's topology (a fleet is one cluster), telemetry
        interval and precursor shares; no faults until the cluster is active."""
        sc = self.sc
        self.fabric = SimFabric(self.topology, timeline, fault_rates=FaultRates.none(),
                                telemetry_interval_s=sc.telemetry_interval_s, spares=spares,
                                precursors=PrecursorParams(hbm_share=sc.hbm_precursor_share,
                                                           chip_thermal_share=sc.thermal_precursor_share),
                                progress_every_steps=1)
        return self.fabric

    def _check_targets(self) -> None:
        n, nl = self.topology.n_chips, len(self.topology.links)
        for i, f in enumerate(self.sc.faults):
            for name, idx, limit in (("chip", f.chip, n), ("link", f.link, nl)):
                if idx is not None and idx >= limit:
                    raise InvalidInputError(f"faults.{i}.{name} {idx} does not exist; valid 0-{limit - 1}",
                                            field=f"faults.{i}.{name}")
        for i, c in enumerate(self.sc.commands):
            fc = c.fault
            if fc is None:
                continue
            if fc.chip is not None and fc.chip >= n:
                raise InvalidInputError(f"commands.{i}.fault.chip {fc.chip} does not exist; valid 0-{n - 1}",
                                        field=f"commands.{i}.fault.chip")
            if isinstance(fc.link, int) and fc.link >= nl:
                raise InvalidInputError(f"commands.{i}.fault.link {fc.link} does not exist; valid 0-{nl - 1}",
                                        field=f"commands.{i}.fault.link")
        for i, j in enumerate(self.sc.jobs):
            if j.n_chips > n - self.sc.spares:
                raise InvalidInputError(f"jobs.{i}.chips asks for {j.n_chips} chips, {n - self.sc.spares} are "
                                        "not spares", field=f"jobs.{i}.chips")

    def _schedule(self) -> None:
        at = self.tl.call_at
        for j in self.sc.jobs:
            at(j.start_at, functools.partial(self._guard, "submit", j.id, functools.partial(self.submit, j.id)))
        for f in self.sc.faults:
            at(f.at, functools.partial(self._guard, "fault", f.kind, functools.partial(self._scripted, f)))
        for c in self.sc.commands:
            at(c.at, functools.partial(self._guard, c.name, self._what(c), functools.partial(self.command, c)))

    @staticmethod
    def _what(c: Command) -> str:
        if c.submit is not None:
            return c.submit.id
        if c.stop is not None:
            return c.stop
        if c.fault is not None:
            return c.fault.kind
        assert c.firmware is not None
        return c.firmware.version

    # --- commands (the API's) ---------------------------------------------------------------
    def _guard(self, name: str, what: str, fn: Callable[[], dict[str, Any]]) -> None:
        """Run a command at its time; a refused one is recorded, as the API would answer it."""
        rec: dict[str, Any] = {"t": round(self.tl.now - self.t0, 3), "command": name, "target": what}
        try:
            out = fn()
            rec["result"] = "ok"
            if out.get("id"):
                rec["id"] = out["id"]
        except PodfleetError as exc:
            rec["result"] = f"error: {exc.code}: {exc.message}"
            rec["code"] = exc.code
            self.tl.emit("scenario-command-refused", command=name, target=what, code=exc.code, message=exc.message)
        self.command_log.append(rec)

    def submit(self, job: str) -> dict[str, Any]:
        view = self.plane.jobs.submit(CLUSTER, dict(self.bodies[job]), actor=ACTOR)
        self.job_ids[job] = view["id"]
        self.tracker.job_submitted(view["id"], job)
        return view

    def command(self, c: Command) -> dict[str, Any]:
        if c.submit is not None:
            return self.submit(c.submit.id)
        if c.stop is not None:
            return self.plane.jobs.stop(self.job_ids[c.stop], actor=ACTOR)
        if c.fault is not None:
            return self.fault(c.fault)
        assert c.firmware is not None
        fw = c.firmware
        return self.parts.firmware.start_firmware(CLUSTER, fw.version, unit=fw.unit, chips=fw.chips, actor=ACTOR)

    def fault(self, f: FaultCommand) -> dict[str, Any]:
        chip, link = f.chip, f.link
        if f.job is not None and f.rank is not None:
            chips = (self.plane.jobs.describe(self.job_ids[f.job]).get("allocation") or {}).get("chips") or []
            if f.rank >= len(chips):
                raise InvalidInputError(f"job {f.job} holds {len(chips)} chips now; no rank {f.rank}", field="rank")
            chip = chips[f.rank]
        return self.plane.inject_fault(CLUSTER, f.kind, chip=chip, link=self.link_name(link), actor=ACTOR)

    def link_name(self, link: int | str | None) -> str | None:
        if link is None or isinstance(link, str):
            return link
        lk = self.topology.links[link]
        return f"{min(lk.src, lk.dst)}-{max(lk.src, lk.dst)}"

    def _scripted(self, f: ScriptedFault) -> dict[str, Any]:
        if f.precursor or f.lead is not None:  # ground truth the API does not model: on the twin
            assert self.fabric is not None
            self.fabric.inject_fault(f.kind, f.chip, f.link, precursor=f.precursor, lead_s=f.lead)
            return {}
        return self.fault(FaultCommand(kind=f.kind, chip=f.chip, link=f.link))

    # --- running -----------------------------------------------------------------------------
    def run(self, *, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
        t0 = time.perf_counter()
        end = self.t0 + self.sc.duration
        # What set-up built (a fleet's records, topology and indexes: millions of objects)
        # lives as long as the run: out of the collector's way while the run makes and drops
        # its per-tick objects, back under it afterwards (a full collection walked all of it
        # again and again). Collection itself is unchanged.
        gc.freeze()
        try:
            if progress is None:
                self.tl.run(end)
            else:
                for i in range(1, 101):
                    self.tl.run(self.t0 + self.sc.duration * i / 100)
                    progress(i / 100)
        finally:
            gc.unfreeze()
        wall = time.perf_counter() - t0
        return build_report(self, wall)


def rehearse(sc: Scenario, *, store: StoreProtocol | None = None, events_path: str | Path | None = None,
             progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Run ``sc`` with the whole control plane in the loop and report."""
    r = Rehearsal(sc, store=store)
    report = r.run(progress=progress)
    if events_path is not None:
        r.tl.log.to_jsonl(events_path)
    return report
