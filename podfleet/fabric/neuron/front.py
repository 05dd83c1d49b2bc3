"""What a neuron fabric answers itself and what it passes to the runner that owns its
workers: ``NeuronFront``, the base of ``NeuronFabric`` (one host, a ``LocalFabric`` runner)
and ``NeuronHostsFabric`` (hosts as Ray nodes, a ``RayFabric`` runner).

A neuron fabric holds the Neuron tools' view (link states and metrics from neuron-ls,
chip metrics and fault events from neuron-monitor: ``events``); chip states, jobs, kills,
logs, worker placement and host commands are the runner's (``WorkerRunner``)."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from podfleet.fabric.base import (
    ChipState,
    CommandResult,
    FabricEvent,
    LinkState,
    RunStatus,
    WorkerGroupSpec,
)
from podfleet.fabric.neuron.faults import ERROR_KINDS
from podfleet.fabric.neuron.metrics import CHIP_METRICS

log = logging.getLogger("podfleet.fabric.neuron")

MEASURED = frozenset(m.name for m in CHIP_METRICS if m.source)


class WorkerRunner(Protocol):
    """The process fabric a neuron fabric runs its jobs on."""

    def attach(self, timeline: Any) -> None: ...
    def chip_states(self) -> list[ChipState]: ...
    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None: ...
    def launch(self, group: WorkerGroupSpec) -> None: ...
    def stop(self, job_id: str) -> None: ...
    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None: ...
    def run_status(self, job_id: str) -> RunStatus | None: ...
    def run_logs(self, job_id: str) -> list[str]: ...
    def kill_worker(self, job_id: str, rank: int) -> int | None: ...
    def check_chip_health(self, chip: int) -> str | None: ...
    def chip_hosts(self) -> list[str]: ...
    def chip_workers(self) -> dict[int, dict[str, Any]]: ...
    def host_command(self, chip: int, argv: Sequence[str], *, env: Mapping[str, str],
                     timeout_s: float) -> Callable[[], CommandResult]: ...
    def hardware_errors(self) -> list[FabricEvent]: ...
    def close(self) -> None: ...


class NeuronFront:
    """Subclasses set ``_runner``, ``_link_states`` and ``_link_metrics`` and publish
    their own events with ``_publish`` (kept in ``events``, the fault log's source)."""

    _runner: WorkerRunner
    _link_states: list[LinkState]
    _link_metrics: Mapping[str, np.ndarray]

    def __init__(self, keep_events: int) -> None:
        self._subs: list[Callable[[FabricEvent], None]] = []
        self.events: deque[FabricEvent] = deque(maxlen=keep_events)
        self._timeline: Any = None

    # --- Fabric protocol --------------------------------------------------------------
    def attach(self, timeline: Any) -> None:
        self._timeline = timeline
        self._runner.attach(timeline)

    def chip_states(self) -> list[ChipState]:
        return self._runner.chip_states()

    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None:
        self._runner.set_chip_state(chip, state, reason)

    def link_states(self) -> list[LinkState]:
        return list(self._link_states)

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        return dict(self._link_metrics)

    def launch(self, group: WorkerGroupSpec) -> None:
        self._runner.launch(group)

    def stop(self, job_id: str) -> None:
        self._runner.stop(job_id)

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None:
        self._subs.append(callback)
        self._runner.subscribe(callback)  # job and chip-state events come from the runner

    # --- capabilities: Introspection, WorkerKill, ChipCheck, WorkerPlacement, HostCommands,
    # TelemetrySource, HardwareErrors ------------------------------------------------------
    def run_status(self, job_id: str) -> RunStatus | None:
        return self._runner.run_status(job_id)

    def run_logs(self, job_id: str) -> list[str]:
        return self._runner.run_logs(job_id)

    def kill_worker(self, job_id: str, rank: int) -> int | None:
        return self._runner.kill_worker(job_id, rank)

    def check_chip_health(self, chip: int) -> str | None:
        """The device's worker slot (the runner's: on one host its slot, on Ray its node)."""
        return self._runner.check_chip_health(chip)

    def chip_hosts(self) -> list[str]:
        return self._runner.chip_hosts()

    def chip_workers(self) -> dict[int, dict[str, Any]]:
        return self._runner.chip_workers()

    def host_command(self, chip: int, argv: Sequence[str], *, env: Mapping[str, str],
                     timeout_s: float) -> Callable[[], CommandResult]:
        """HostCommands: on the Trainium host the chip's workers run on (the runner's)."""
        return self._runner.host_command(chip, argv, env=env, timeout_s=timeout_s)

    def hardware_errors(self) -> list[FabricEvent]:
        """``HardwareErrors``: what neuron-monitor's reports showed (uncorrectable SRAM / HBM
        errors, corrected bursts, runtime hardware errors: ``chip-failed`` / ``chip-degraded``
        with their counts), the links neuron-ls does not report (``link-down``), and the
        worker faults of its runner (hangs, outside kills, OOM kills, lost nodes), oldest first."""
        mine = [ev for ev in self.events if ev.kind in ERROR_KINDS]
        return sorted([*mine, *self._runner.hardware_errors()], key=lambda ev: ev.t)

    def telemetry_metrics(self) -> frozenset[str]:
        """The chip metrics the Neuron tools measure. Those they do not expose (temperature,
        power, clock, HBM bandwidth, per-chip link traffic) are present as NaN but not named
        here, so a consumer that needs them (the load balancer) knows not to rely on them."""
        return MEASURED

    def close(self) -> None:
        self._runner.close()

    def __enter__(self) -> NeuronFront:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- for subclasses -------------------------------------------------------------------
    def _now(self) -> float:
        return float(self._timeline.now) if self._timeline is not None else time.time()

    def _publish(self, ev: FabricEvent) -> None:
        self.events.append(ev)
        for cb in list(self._subs):
            try:
                cb(ev)
            except Exception:  # a subscriber's bug must not stop event delivery
                log.exception("fabric event subscriber failed on %s", ev.kind)
