"""What a neuron-monitor fault does to a chip: one rule for the single-host fabric
(``fabric.py``) and a cluster of hosts (``hosts.py``).

``NeuronTelemetry.update`` finds the faults in a report (device indices of that host);
``apply_faults`` turns each into a chip-state change and the event the control plane
sees: an uncorrectable error fails a chip not already failed or isolated, a corrected
burst or runtime hardware errors degrade a healthy one; a fault on a chip already there
changes nothing (the metrics carry the count)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from podfleet.fabric.base import ChipState, FabricEvent
from podfleet.fabric.neuron.ls import NeuronInventory

FAULT_TEXT = {
    "sram-uncorrectable": "uncorrectable SRAM ECC error",
    "hbm-uncorrectable": "uncorrectable HBM ECC error",
    "hbm-corrected-burst": "burst of corrected HBM ECC errors",
    "runtime-hardware-error": "runtime hardware errors",
}
# The events of a neuron fabric's own that are its fault log (``hardware_errors``).
ERROR_KINDS = frozenset({"chip-failed", "chip-degraded", "link-down"})


def apply_faults(found: Iterable[FabricEvent], inventory: NeuronInventory, t: float, *,
                 state_of: Callable[[int], ChipState], set_state: Callable[[int, ChipState, str], None],
                 offset: int = 0, host: str = "") -> list[FabricEvent]:
    """Apply one host's telemetry faults (``found``, device indices of ``inventory``) to the
    chips ``offset + device``; returns the events to publish. ``host`` names the host in
    reasons (a cluster of several)."""
    out = []
    for ev in found:
        device = ev.chip
        if device is None:
            continue
        chip = offset + device
        fault = str(ev.detail.get("fault", ev.kind))
        dev = inventory.devices[device] if device < inventory.n_devices else None
        where = f"Neuron device {device}" + (f" (bdf {dev.bdf})" if dev is not None and dev.bdf else "")
        if host:
            where += f" of {host}"
        reason = f"{FAULT_TEXT.get(fault, fault)} on {where}"
        state = state_of(chip)
        if ev.kind == "chip-failed":
            if state in (ChipState.FAILED, ChipState.ISOLATED):
                continue
            set_state(chip, ChipState.FAILED, reason)
        elif ev.kind == "chip-degraded":
            if state is not ChipState.HEALTHY:
                continue
            set_state(chip, ChipState.DEGRADED, reason)
        out.append(FabricEvent(ev.kind, t, chip=chip, detail={
            **ev.detail, "cause": fault, "reason": reason, "device": where}))
    return out
