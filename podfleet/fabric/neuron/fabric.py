"""``NeuronFabric``: the Neuron devices of one real Trainium host.

    fab = NeuronFabric(timeline, neuron_ls="neuron-ls --json-output", neuron_monitor="neuron-monitor")
    fab.topology                 # from neuron-ls: device count and connected_to (trn2.48xlarge: 4x4 torus)
    fab.chip_metrics()           # per device, from the neuron-monitor stream (the twin's names)
    fab.health_reason()          # None, or why telemetry is degraded (monitor exited, garbage, silent)
    fab.launch(group)            # worker processes, rank r with NEURON_RT_VISIBLE_CORES of chips[r]

neuron-ls runs once, here, at construction: a command that cannot run or prints
something that is not a ``neuron-ls -j`` document is a one-line error naming the
command. neuron-monitor runs for the fabric's life under a ``MonitorSupervisor``
(restarted with backoff; a fault of the monitor is a ``fabric-degraded`` event, never
an exception). Jobs run through a composed ``LocalFabric`` (the process runner), which
also holds the chip states; every state change and event is applied on the engine's
thread through the runner's ``deliver``.

Faults in a report (``NeuronTelemetry.update``): an uncorrectable SRAM / HBM ECC error
fails the device (``chip-failed``, ``cause`` sram-uncorrectable / hbm-uncorrectable); a
burst of corrected HBM errors or runtime hardware errors degrades it
(``chip-degraded``). The chip metrics carry the counters, so the health scan raises
``ecc-uncorrected`` on ``chip:N`` (N = the Neuron device index) as it does on the twin.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.fabric.base import (
    DEFAULT_HANG_RESTARTS,
    FabricEvent,
)
from podfleet.fabric.commands import DEFAULT_NEURON_LS, DEFAULT_NEURON_MONITOR, split_command
from podfleet.fabric.local import LocalFabric
from podfleet.fabric.neuron.command import MonitorSupervisor, run_neuron_ls
from podfleet.fabric.neuron.faults import apply_faults
from podfleet.fabric.neuron.front import NeuronFront
from podfleet.fabric.neuron.ls import NeuronInventory
from podfleet.fabric.neuron.metrics import cores_per_chip
from podfleet.fabric.neuron.monitor import MonitorReport
from podfleet.fabric.neuron.telemetry import NeuronTelemetry

log = logging.getLogger("podfleet.fabric.neuron")



def chip_type_of_instance(inventory: NeuronInventory) -> str:
    return "trn1" if inventory.instance_type.startswith("trn1") else "trn2"


def visible_cores(cores: list[int]) -> str:
    """``NEURON_RT_VISIBLE_CORES`` for a set of cores: ``4-7`` when contiguous, else ``1,3``."""
    cores = sorted(cores)
    if cores and cores == list(range(cores[0], cores[-1] + 1)) and len(cores) > 1:
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


class NeuronFabric(NeuronFront):
    kind = "neuron"

    def __init__(
        self,
        timeline: Any = None,
        *,
        neuron_ls: str = DEFAULT_NEURON_LS,
        neuron_monitor: str = DEFAULT_NEURON_MONITOR,
        spares: tuple[int, ...] = (),
        workdir: str | Path | None = None,
        hang_timeout_s: float = 3.0,
        max_hang_restarts: int = DEFAULT_HANG_RESTARTS,
        ls_timeout_s: float = 30.0,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        stale_after_s: float = 60.0,
        max_bad_in_row: int = 3,
        keep_events: int = 1000,
    ) -> None:
        split_command(neuron_monitor, "neuron-monitor")  # refuse a bad command before running anything
        self.neuron_ls_command, self.neuron_monitor_command = neuron_ls, neuron_monitor
        self.inventory = inventory = run_neuron_ls(neuron_ls, ls_timeout_s)
        try:
            self.telemetry = NeuronTelemetry(inventory, chip_type=chip_type_of_instance(inventory))
        except InvalidInputError as exc:
            raise InvalidInputError(f"neuron-ls command {neuron_ls!r}: {exc.message}", field="neuron_ls") from None
        self.topology = self.telemetry.topology
        n = self.topology.n_chips
        bad = [c for c in spares if not 0 <= c < n]
        if bad:
            raise InfeasibleError(f"spare chips {bad} do not exist: neuron-ls reports {n} devices (0-{n - 1})",
                                  field="spares")
        super().__init__(keep_events)
        self._link_metrics = self.telemetry.link_metrics()
        self._link_states = self.telemetry.link_states()
        self._degraded: str | None = None  # why telemetry is not trustworthy now
        self._reports = 0
        self._runner: LocalFabric = LocalFabric(n, None, spares=spares, workdir=workdir, hang_timeout_s=hang_timeout_s,
                                   max_hang_restarts=max_hang_restarts, chip_env=self._neuron_env)
        self.workdir = self._runner.workdir
        self._monitor = MonitorSupervisor(
            neuron_monitor, on_report=lambda r: self._runner.deliver(self._apply, r),
            on_trouble=lambda why: self._runner.deliver(self._trouble, why),
            backoff_initial_s=backoff_initial_s, backoff_max_s=backoff_max_s,
            stale_after_s=stale_after_s, max_bad_in_row=max_bad_in_row)
        if timeline is not None:
            self.attach(timeline)
        for ev in self.telemetry.initial_events(self._now()):
            self._runner.deliver(self._publish, ev)
        self._monitor.start()

    # --- Fabric protocol: the rest is NeuronFront's (the runner's) ------------------------
    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        # Arrays are replaced, never written, on each report: a shallow copy is a snapshot.
        return dict(self.telemetry.chip_metrics())

    def close(self) -> None:
        self._monitor.close()
        self._runner.close()

    # --- beyond the protocol -----------------------------------------------------------
    def health_reason(self) -> str | None:
        """Why this fabric's telemetry is degraded now (the monitor exited, printed garbage,
        fell silent, is restarting), or None when the stream is healthy."""
        return self._degraded

    def monitor_status(self) -> dict[str, Any]:
        m = self._monitor
        return {"state": "degraded" if self._degraded else ("ok" if self._reports else "starting"),
                "reason": self._degraded, "command": self.neuron_monitor_command, "pid": m.pid,
                "runs": m.runs, "restarts": m.restarts, "reports": self._reports, "malformed": m.malformed,
                "stderr_tail": list(m.stderr_tail)}

    def device_cores(self, chip: int) -> list[int]:
        """The NeuronCores (runtime numbering) of device ``chip``."""
        per, _lnc = cores_per_chip(self.telemetry.report, self.inventory)
        return sorted(c for c, d in self.inventory.core_to_device(per or None).items() if d == chip)

    # --- private ----------------------------------------------------------------------------
    def _neuron_env(self, chip: int) -> dict[str, str]:
        cores = self.device_cores(chip)
        env = {"PODFLEET_NEURON_DEVICE": str(chip)}
        if cores:
            env["NEURON_RT_VISIBLE_CORES"] = visible_cores(cores)
        return env

    def _trouble(self, reason: str) -> None:
        """Engine thread: the monitor is broken (exited, garbage, silent, restarting)."""
        first = self._degraded is None
        self._degraded = reason
        # One event when telemetry goes bad and one per restart, not one per bad line.
        if first or "restarting in" in reason:
            self._publish(FabricEvent("fabric-degraded", self._now(), detail={
                "reason": reason, "source": "neuron-monitor", "restarts": self._monitor.restarts}))

    def _apply(self, report: MonitorReport) -> None:
        """Engine thread: fold one report into the metrics; fault events for what it shows."""
        t = self._now()
        self._reports += 1
        if self._degraded is not None:
            was, self._degraded = self._degraded, None
            self._publish(FabricEvent("fabric-recovered", t, detail={
                "source": "neuron-monitor", "after": was, "restarts": self._monitor.restarts}))
        for ev in apply_faults(self.telemetry.update(report, t), self.inventory, t,
                               state_of=lambda c: self._runner.chip_states()[c],
                               set_state=self._runner.set_chip_state):
            self._publish(ev)
