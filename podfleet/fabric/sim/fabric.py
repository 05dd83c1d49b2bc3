"""``SimFabric``: the digital twin, a ``Fabric`` over any topology.

A facade over three collaborators that share one explicit ``SimContext`` (timeline,
hardware, telemetry, event bus): the ``Board`` (chip and link state in numpy arrays,
which job holds which chip), the ``FaultProcess`` (one SimPy process samples fault
arrivals; precursors, injection, repair, firmware updates) and the ``JobRunner`` (one
SimPy process per job). One ``tl.every`` process samples telemetry for the whole
fabric. Every state change is logged on the timeline and delivered to subscribers as a
``FabricEvent``.

Capabilities: ``Introspection``, ``ResumableRuns`` (so ``RankMoves``), ``FaultInjection``,
``FirmwareUpdate``, ``TelemetrySource``, ``Rebalanceable``, ``LinkTraffic``, and for acceptance checks
``ComputeProbe``, ``CollectiveProbe``, ``HardwareErrors`` (``probes``).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.errors import InvalidInputError, UnknownNameError
from podfleet.fabric.base import (
    ChipState,
    CollectiveRow,
    FabricEvent,
    LinkState,
    MatmulRate,
    RunStatus,
    WorkerGroupSpec,
)
from podfleet.fabric.sim import probes
from podfleet.fabric.sim.background import (
    Background,
    BackgroundParams,
    ThermalDrift,
    ThermalDriftParams,
)
from podfleet.fabric.sim.board import CHIP_STATES, LINK_STATES, Board
from podfleet.fabric.sim.congestion import Congestion
from podfleet.fabric.sim.context import EventBus, SimContext
from podfleet.fabric.sim.faults import FaultKind, FaultRates, PrecursorParams
from podfleet.fabric.sim.injector import FaultProcess
from podfleet.fabric.sim.jobs import JobRunner
from podfleet.fabric.sim.links import LinkTable, build_link_table
from podfleet.fabric.sim.telemetry import METRIC_NAMES, ChipTelemetry, ThermalParams
from podfleet.fabric.sim.workload import SIM_RUN_STATES, JobRun, StepTimeFn, default_step_time
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.specs import get_chip
from podfleet.hardware.topology import Topology

__all__ = ["CHIP_STATES", "LINK_STATES", "SimFabric"]
_TELEMETRY_METRICS = frozenset(METRIC_NAMES)


class SimFabric:
    kind = "sim"

    def __init__(
        self,
        topology: Topology | str,
        timeline: Timeline,
        *,
        fault_rates: FaultRates | None = None,
        telemetry_interval_s: float = 2.0,
        spares: int | Sequence[int] = (),
        thermal: ThermalParams | None = None,
        precursors: PrecursorParams | None = None,
        step_time_fn: StepTimeFn | None = None,
        auto_repair_s: float | None = None,
        progress_every_steps: int = 10,
        firmware_version: str = "2.21.0",
        background: BackgroundParams | None = None,
        thermal_drift: ThermalDriftParams | None = None,
    ) -> None:
        self.topology = get_topology(topology) if isinstance(topology, str) else topology
        if telemetry_interval_s <= 0:
            raise InvalidInputError(
                f"telemetry_interval_s must be positive, got {telemetry_interval_s}", field="telemetry_interval_s"
            )
        self.spec = get_chip(self.topology.chip_type)
        self.n_chips = self.topology.n_chips
        self.telemetry_interval_s = float(telemetry_interval_s)
        self.thermal = thermal or ThermalParams()
        self.spares = self._parse_spares(spares)
        self.links: LinkTable = build_link_table(self.topology)
        self.n_links = self.links.n
        self.ticks = 0
        self.tl = timeline
        self.telemetry = ChipTelemetry(self.n_chips, self.spec, self.thermal, timeline.rng, firmware_version)
        self.ctx = SimContext(timeline, self.topology, self.spec, self.links, self.telemetry, EventBus(timeline),
                              self.telemetry_interval_s)
        self.board = Board(self.ctx, timeline.now)
        self.runner = JobRunner(self.ctx, self.board, step_time_fn=step_time_fn or default_step_time,
                                progress_every_steps=max(1, int(progress_every_steps)))
        timeline.every(self.telemetry_interval_s, self._tick)
        self.faults = FaultProcess(self.ctx, self.board, rates=fault_rates or FaultRates.none(),
                                   precursors=precursors or PrecursorParams(), thermal=self.thermal,
                                   auto_repair_s=auto_repair_s)
        self.board.on_repaired = self.faults.repaired
        # Corrected-ECC errors of healthy chips (field data, ``fabric.sim.background``): off
        # unless asked for (the prediction benchmark's twin carries it).
        self.background = Background(self.n_chips, background, timeline.seed) if background is not None else None
        # Inlet-air drift of healthy chips (``fabric.sim.background.ThermalDrift``): off unless asked for.
        self.drift = ThermalDrift(self.n_chips, thermal_drift, timeline.seed) if thermal_drift is not None else None
        if self.drift is not None:
            self.telemetry.inlet_offset_c = self.drift.offset
        self.board.on_chip_lost = self.runner.pause_job
        # The hardware errors reported (HardwareErrors), as a Neuron host's error log keeps them.
        self.errors: deque[FabricEvent] = deque(maxlen=4096)
        self.ctx.bus.subscribe(self._record_error)

    def _parse_spares(self, spares: int | Sequence[int]) -> tuple[int, ...]:
        """An int N marks the last N chips as spares; a sequence names them."""
        if isinstance(spares, int):
            if not 0 <= spares < self.n_chips:
                raise InvalidInputError(
                    f"spares must be 0-{self.n_chips - 1}, got {spares}", field="spares"
                )
            return tuple(range(self.n_chips - spares, self.n_chips))
        for c in spares:
            self.topology.check_chip(int(c))
        return tuple(sorted({int(c) for c in spares}))

    # --- Fabric protocol: attach, events ---------------------------------------------
    def attach(self, timeline: Timeline) -> None:
        """The twin is attached to its timeline when built; a second timeline is an error."""
        if timeline is not self.tl:
            raise InvalidInputError("this SimFabric is already attached to another timeline")

    @property
    def now(self) -> float:
        return self.tl.now

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> Callable[[], None]:
        """Call ``callback(FabricEvent)`` on the engine thread; returns an unsubscribe."""
        return self.ctx.bus.subscribe(callback)

    # --- chips --------------------------------------------------------------------------
    def check_chip(self, chip: int) -> int:
        return self.board.check_chip(chip)

    def chip_state(self, chip: int) -> ChipState:
        return self.board.chip_state(chip)

    def chip_states(self) -> list[ChipState]:
        return self.board.chip_states()

    def chip_state_codes(self) -> np.ndarray:
        """State codes over chips (index into ``CHIP_STATES``); a copy."""
        return self.board.state.copy()

    def usable_mask(self) -> np.ndarray:
        """Chips that can run work (healthy or degraded)."""
        return self.board.usable_mask()

    def set_chip_state(self, chip: int, state: ChipState | str, reason: str) -> None:
        """Move a chip through its state machine (InvalidTransitionError if not allowed)."""
        self.board.transition(self.board.check_chip(chip), ChipState(state), reason)

    def job_on(self, chip: int) -> str | None:
        """The job holding ``chip`` on the twin, if any."""
        return self.board.job_on(self.board.check_chip(chip))

    def busy_chips(self) -> frozenset[int]:
        """Chips some job holds (running or paused)."""
        return self.board.busy_chips()

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        """Latest telemetry: metric name -> array over chips ([chips, cores] for
        ``neuroncore_utilization``). Read-only arrays never changed in place: safe to
        keep without copying; copy before modifying."""
        return self.telemetry.metrics()

    def telemetry_metrics(self) -> frozenset[str]:
        return _TELEMETRY_METRICS

    def chip_info(self, chip: int) -> dict[str, Any]:
        """One chip: state, reason, job, links and its latest metrics (JSON-ready)."""
        chip = self.board.check_chip(chip)
        m = {k: (v[chip].tolist() if hasattr(v[chip], "tolist") else v[chip])
             for k, v in self.telemetry.metrics().items()}
        return {
            "chip": chip,
            "state": self.board.chip_state(chip).value,
            "reason": self.board.reasons.get(chip),
            "job_id": self.board.job_on(chip),
            "spare": chip in self.spares,
            "links": [int(x) for x in self.links.of_chip(chip)],
            "metrics": m,
        }

    # --- links ------------------------------------------------------------------------------
    def check_link(self, link: int) -> int:
        return self.board.check_link(link)

    def link_states(self) -> list[LinkState]:
        return self.board.link_states()

    def link_state(self, link: int) -> LinkState:
        return self.board.link_state_of(link)

    def set_link_state(self, link: int, state: LinkState | str, reason: str) -> None:
        self.board.set_link(self.board.check_link(link), LinkState(state), reason)

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        """Latest link telemetry over links: read-only arrays, safe to keep.
        ``flow_utilization``: the busier direction's share used by running jobs' rings under
        max-min fair sharing (``congestion``), weighted by their communication share."""
        m = self.board.link_metrics()
        m["flow_utilization"] = self.runner.congestion.utilization()
        return m

    @property
    def congestion(self) -> Congestion:
        """Link sharing between running jobs: ``set_routing("dor"|"adaptive")``,
        ``slowdown(job)``, ``utilization()``, ``flows_per_link()``."""
        return self.runner.congestion

    def link_traffic(self) -> np.ndarray:
        """``LinkTraffic``: ring edges of the running jobs on each directed link."""
        return self.runner.congestion.directed_load()

    @property
    def link_utilization(self) -> np.ndarray:
        return self.board.link_utilization

    @property
    def link_errors(self) -> np.ndarray:
        return self.board.link_errors

    @property
    def link_tx_bytes(self) -> np.ndarray:
        return self.board.link_tx_bytes

    def links_among(self, chips: Sequence[int]) -> np.ndarray:
        """Indices of the links with both ends among ``chips``."""
        return self.board.gang(chips)[1]

    def gang_clock_factor(self, chips: Sequence[int]) -> float:
        """The slowest clock factor among ``chips`` (1.0 unthrottled)."""
        return self.board.gang_clock_factor(chips)

    def job_nominal_link_bw(self, chips: Sequence[int]) -> float:
        """``job_link_bw`` as it would be with every link up (the healthy reference)."""
        return self.board.job_nominal_link_bw(chips)

    def job_link_bw(self, chips: Sequence[int]) -> float:
        """Per-direction bandwidth of the slowest live link among ``chips`` (see workload)."""
        return self.board.job_link_bw(chips)

    # --- jobs (Fabric, Introspection, RankMoves / ResumableRuns) --------------------------------------------
    def launch(self, group: WorkerGroupSpec) -> JobRun:
        """Start a job on ``group.chips`` (rank r on chips[r]) from ``options["start_step"]``."""
        return self.runner.launch(group)

    def stop(self, job_id: str) -> None:
        self.runner.stop(job_id)

    @property
    def jobs(self) -> dict[str, JobRun]:
        return self.runner.jobs

    def job(self, job_id: str) -> JobRun:
        return self.runner.job(job_id)

    def run_spec(self, job_id: str) -> WorkerGroupSpec | None:
        run = self.runner.jobs.get(job_id)
        return run.spec if run is not None else None

    def pause(self, job_id: str, reason: str = "paused by command") -> RunStatus:
        self.runner.pause(job_id, reason)
        return self._status(job_id)

    def resume(self, job_id: str, *, from_step: int | None = None) -> RunStatus:
        """Resume a paused job, optionally rolled back to ``from_step`` (a checkpoint)."""
        self.runner.resume(job_id, from_step=from_step)
        return self._status(job_id)

    def move_rank(self, job_id: str, rank: int, new_chip: int) -> RunStatus:
        """Run rank ``rank`` of the job on ``new_chip`` from now on."""
        self.runner.move_rank(job_id, rank, new_chip)
        return self._status(job_id)

    def _status(self, job_id: str) -> RunStatus:
        st = self.runner.run_status(job_id)
        assert st is not None  # the runner raised NotFoundError already
        return st

    def checkpoint_now(self, job_id: str) -> int | None:
        return self.runner.checkpoint_now(job_id)

    # --- Rebalanceable ------------------------------------------------------------------------
    def set_work_split(self, job_id: str, shares: Sequence[int]) -> None:
        self.runner.set_work_split(job_id, shares)

    def set_ring_order(self, job_id: str, ring: Sequence[int]) -> None:
        self.runner.set_ring_order(job_id, ring)

    def run_status(self, job_id: str) -> RunStatus | None:
        return self.runner.run_status(job_id)

    def run_logs(self, job_id: str) -> list[str]:
        return self.runner.run_logs(job_id)

    @property
    def step_time_fn(self) -> StepTimeFn:
        return self.runner.step_time_fn

    @step_time_fn.setter
    def step_time_fn(self, fn: StepTimeFn) -> None:
        self.runner.step_time_fn = fn

    @property
    def progress_every_steps(self) -> int:
        return self.runner.progress_every_steps

    # --- faults (FaultInjection, FirmwareUpdate) -------------------------------------------------
    def inject_fault(self, kind: FaultKind | str, chip: int | None = None, link: int | None = None,
                     *, precursor: bool = False, lead_s: float | None = None) -> dict[str, Any]:
        """Inject a fault now (tests, chaos). Without ``chip``/``link`` one is picked at
        random. ``precursor=True`` runs the precursor first (hbm-uncorrectable and
        chip-failure). Returns what was injected."""
        return self.faults.inject_fault(kind, chip, link, precursor=precursor, lead_s=lead_s)

    def repair_chip(self, chip: int, reason: str = "repaired") -> None:
        """Failed or isolated -> healthy (through isolated, as the state machine requires)."""
        self.faults.repair_chip(chip, reason)

    def repair_link(self, link: int, reason: str = "repaired") -> None:
        self.faults.repair_link(link, reason)

    def update_firmware(self, chip: int, version: str, *, duration_s: float = 60.0,
                        failure_p: float = 0.0) -> None:
        """Take the chip to ``updating``; after ``duration_s`` it runs ``version`` and is
        healthy again, or failed with probability ``failure_p``."""
        self.faults.update_firmware(chip, version, duration_s=duration_s, failure_p=failure_p)

    def set_fault_rates(self, rates: FaultRates) -> None:
        """Change the arrival rates now (memoryless: the next arrival is redrawn)."""
        self.faults.set_fault_rates(rates)

    @property
    def fault_rates(self) -> FaultRates:
        return self.faults.rates

    @property
    def precursors(self) -> PrecursorParams:
        return self.faults.params

    @property
    def auto_repair_s(self) -> float | None:
        return self.faults.auto_repair_s

    @property
    def faults_by_kind(self) -> dict[str, int]:
        return self.faults.faults_by_kind

    # --- probes (ComputeProbe, CollectiveProbe) and the error log (HardwareErrors) -----------------
    def _record_error(self, ev: FabricEvent) -> None:
        if ev.kind == "fault":
            self.errors.append(ev)

    def hardware_errors(self) -> list[FabricEvent]:
        return list(self.errors)

    def matmul_dtypes(self) -> tuple[str, ...]:
        return tuple(d for d in ("bf16", "fp8") if d in self.spec.tflops)

    def matmul_probe(self, chips: Sequence[int], dtype: str) -> Callable[[], list[MatmulRate]]:
        for c in chips:
            self.board.check_chip(c)
        self.spec.peak_flops(dtype)  # an unknown dtype names the valid ones now
        # The clock and states as they are now; the model runs on any thread.
        return functools.partial(probes.matmul_rates, self.spec, self.telemetry.clock_factor.copy(),
                                 self.board.chip_states(), tuple(chips), dtype)

    def collective_groups(self) -> Mapping[str, tuple[int, ...]]:
        return probes.groups(self.topology)

    def collective_probe(self, group: str, ops: Sequence[str],
                         sizes_bytes: Sequence[int]) -> Callable[[], list[CollectiveRow]]:
        named = probes.groups(self.topology)
        if group not in named:
            raise UnknownNameError("collective group", group, named, field="group")
        return functools.partial(probes.collective_rows, self.topology, named[group], group, tuple(ops),
                                 tuple(sizes_bytes), probes.link_health(self.board.link_states()))

    # --- telemetry tick ----------------------------------------------------------------------------
    def _tick(self) -> None:
        dt = self.telemetry_interval_s
        self.ticks += 1
        self.faults.advance_precursors(dt)
        t = self.telemetry
        if self.background is not None:
            chips, errors = self.background.counts(dt, self.board.usable_mask())
            if chips.size:
                t.bump("mem_ecc_corrected", chips, errors)
        if self.drift is not None:
            self.drift.step(dt)
            t.inlet_offset_c = self.drift.offset
        recomputed, changed, critical = t.tick(dt, self.tl.rng)
        self.board.refresh_links(recomputed)
        bus = self.ctx.bus
        for c in changed.tolist():
            bus.event("thermal-throttle", chip=c, on=bool(t.throttle[c]),
                      temperature_c=round(float(t.model_temperature_c[c]), 2))
        for c in critical.tolist():
            if not self.board.is_down(c):
                self.faults.fail(c, "thermal-runaway", action="replace",
                                 temperature_c=round(float(t.model_temperature_c[c]), 2))

    # --- summaries ------------------------------------------------------------------------------
    @property
    def down_chip_s(self) -> float:
        return self.board.down_chip_s

    @property
    def exposed_chip_s(self) -> float:
        """Chip-seconds in which a chip could fault, up to the last state change (see ``account``)."""
        return self.board.exposed_chip_s

    def account(self) -> None:
        """Bring the chip-time accounting up to now."""
        self.board.account()

    def state_counts(self) -> dict[str, int]:
        return self.board.state_counts()

    def summary(self) -> dict[str, Any]:
        """A JSON-ready overview: states, links, thermal and load figures, jobs."""
        t = self.telemetry
        temp = t.temperature_c
        return {
            "kind": self.kind,
            "topology": self.topology.name,
            "chip_type": self.spec.name,
            "chips": self.n_chips,
            "links": self.n_links,
            "spares": list(self.spares),
            "chip_states": self.state_counts(),
            "link_states": self.board.link_state_counts(),
            "throttled_chips": int(t.throttle.sum()),
            "temperature_c": {"min": round(float(temp.min()), 2), "mean": round(float(temp.mean()), 2),
                              "max": round(float(temp.max()), 2)},
            "power_w_total": round(float(t.power_w.sum()), 1),
            "utilization_pct_mean": round(float(t.neuroncore_utilization.mean()), 2),
            "jobs": {s.value: sum(r.state == s for r in self.jobs.values()) for s in SIM_RUN_STATES},
            "faults_by_kind": dict(self.faults_by_kind),
            "chip_hours_lost": round(self.chip_hours_lost(), 4),
            "sim_time_s": self.now,
        }

    def chip_hours_lost(self) -> float:
        self.board.account()
        return self.board.down_chip_s / 3600.0
