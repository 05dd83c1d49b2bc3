"""The fault kinds of a chip or link: one vocabulary for the twin, the control plane,
the API and the CLI.

Their rates and effects are the twin's (``podfleet.fabric.sim.faults``); real fabrics
report the kinds they observe (e.g. ``hbm-corrected-burst`` from neuron-monitor).
"""

from __future__ import annotations

from enum import StrEnum

from podfleet.errors import UnknownNameError


class FaultKind(StrEnum):
    CHIP_FAILURE = "chip-failure"
    HBM_CORRECTED_BURST = "hbm-corrected-burst"
    HBM_UNCORRECTABLE = "hbm-uncorrectable"
    SRAM_UNCORRECTABLE = "sram-uncorrectable"
    LINK_DOWN = "link-down"
    LINK_FLAP = "link-flap"
    THERMAL_RUNAWAY = "thermal-runaway"
    FIRMWARE_FAULT = "firmware-fault"


FAULT_KINDS: tuple[str, ...] = tuple(k.value for k in FaultKind)
# Faults of a link (injected at a link); every other kind strikes a chip.
LINK_FAULTS = frozenset({FaultKind.LINK_DOWN, FaultKind.LINK_FLAP})
CHIP_FAULTS = frozenset(set(FaultKind) - LINK_FAULTS)


def parse_fault_kind(kind: str | FaultKind) -> FaultKind:
    try:
        return FaultKind(kind)
    except ValueError:
        raise UnknownNameError("fault kind", kind, FAULT_KINDS, field="kind") from None
