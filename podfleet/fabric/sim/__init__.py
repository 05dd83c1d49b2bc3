"""The digital twin: ``SimFabric``, a ``Fabric`` over any topology (pod or fleet).

Public API (everything runs on the engine thread of its ``Timeline``)::

    from podfleet.fabric.sim import SimFabric, FaultRates, FaultKind

    fab = SimFabric(topology, tl, fault_rates=FaultRates() | None, telemetry_interval_s=2.0,
                    spares=() | N, thermal=ThermalParams(), precursors=PrecursorParams(),
                    step_time_fn=None, auto_repair_s=None)
    fab.chip_states() -> list[ChipState]          fab.chip_state_codes() -> np.ndarray
    fab.set_chip_state(chip, state, reason)       fab.usable_mask() -> np.ndarray[bool]
    fab.chip_metrics() -> {metric: array}         fab.chip_info(chip) -> dict
    fab.link_states() -> list[LinkState]          fab.link_metrics() -> {metric: array}
    fab.set_link_state(link, state, reason)       fab.links (LinkTable: src, dst, bw, ...)
    fab.launch(WorkerGroupSpec) -> JobRun         fab.stop(job_id)
    fab.pause(job_id) / fab.resume(job_id, from_step=None)
    fab.move_rank(job_id, rank, new_chip)         fab.jobs: dict[str, JobRun]  fab.job(job_id)
    fab.checkpoint_now(job_id) -> step | None     fab.run_status(job_id) -> RunStatus | None
    fab.run_logs(job_id) -> list[str]             fab.job_on(chip) / fab.busy_chips()
    fab.inject_fault(kind, chip=None, link=None, precursor=False, lead_s=None) -> dict
    fab.repair_chip(chip) / fab.repair_link(link) / fab.update_firmware(chip, version)
    fab.set_fault_rates(FaultRates)               fab.subscribe(cb) -> unsubscribe
    fab.summary() -> dict   fab.state_counts() / fab.chip_hours_lost() / fab.faults_by_kind
    fab.telemetry_metrics() -> frozenset of chip_metrics keys

Capabilities (``podfleet.fabric.base``): Introspection, ResumableRuns, FaultInjection,
FirmwareUpdate, TelemetrySource. ``SimFabric`` is a facade over a ``Board`` (chip and
link state), a ``FaultProcess`` and a ``JobRunner`` sharing one ``SimContext``.

Metric arrays are read-only and never changed in place (copy-on-write): keep them
without copying; copy before modifying. ``fab.telemetry`` holds the live arrays and the
inputs jobs drive (``load``, ``comm_load``, ``hbm_fraction``, ``r_scale``; set
``fab.telemetry.dirty = True`` after writing them).

Events delivered to subscribers (``FabricEvent.kind``): fault (detail fault, injected,
action), chip-<state> (chip-failed carries job_id, detail cause/action),
link-<state>, thermal-throttle, job-started, progress, checkpoint, job-paused,
job-resumed, job-stopped, job-finished, rank-moved. The timeline log holds the same
records plus ground truth subscribers never see: ``precursor-start``, a ``fault``'s
``precursor`` flag, and averted faults.
"""

from podfleet.fabric.sim.fabric import CHIP_STATES, LINK_STATES, SimFabric
from podfleet.fabric.sim.faults import FaultKind, FaultRates, PrecursorParams
from podfleet.fabric.sim.links import LinkTable
from podfleet.fabric.sim.telemetry import METRIC_NAMES, ThermalParams
from podfleet.fabric.sim.workload import JobRun, default_step_time

__all__ = [
    "CHIP_STATES",
    "LINK_STATES",
    "METRIC_NAMES",
    "FaultKind",
    "FaultRates",
    "JobRun",
    "LinkTable",
    "PrecursorParams",
    "SimFabric",
    "ThermalParams",
    "default_step_time",
]
