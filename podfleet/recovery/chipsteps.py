"""What the recovery flows do to a chip itself: isolate it (and schedule the twin's
technician), or fence an uncorrectable ECC error's partition and bring it back
degraded. On the shared ``RecoveryContext``; the fabric is changed only through
``Fabric.set_chip_state`` (and ``FaultInjection.repair_chip`` where the fabric has it).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from podfleet.fabric.base import ChipState, FaultInjection
from podfleet.recovery.context import RecoveryContext
from podfleet.recovery.model import Recovery


class ChipSteps:
    """The chip steps of a recovery orchestrator's flows."""

    def __init__(self, ctx: RecoveryContext) -> None:
        self.ctx = ctx

    def isolate(self, chip: int, cause: str) -> None:
        ctx = self.ctx
        if ctx.chip_state(chip) != ChipState.ISOLATED:
            ctx.fab.set_chip_state(chip, ChipState.ISOLATED, f"isolated by recovery: {cause}")
        # A firmware fault clears with a reset (the Neuron runtime's action); the rest
        # need a technician.
        self.schedule_repair(chip, ctx.timings.reset_s if cause == "firmware-fault" else None)

    def schedule_repair(self, chip: int, after_s: float | None = None) -> None:
        """The twin's technician (a fabric that can repair a chip on demand,
        ``FaultInjection``): elsewhere a chip comes back through the operator's repair."""
        ctx = self.ctx
        fab = ctx.fab
        after_s = after_s if after_s is not None else ctx.timings.repair_s
        if after_s is None or not isinstance(fab, FaultInjection):
            return

        def repair() -> None:
            if ctx.chip_state(chip) == ChipState.ISOLATED:
                ctx.fenced.pop(chip, None)
                fab.repair_chip(chip, "replaced by a technician")

        ctx.tl.call_at(after_s, repair)

    def fence(self, rec: Recovery, chip: int, cause: str) -> Generator[simpy.Event, Any, bool]:
        """Fence the bad partition; the chip returns degraded. True if the rank still fits."""
        ctx = self.ctx
        tm = ctx.timings
        part = "HBM stack" if cause == "hbm-uncorrectable" else "SRAM bank (its NeuronCore)"
        ctx.step(rec, "fence", f"retire the {part} that had the uncorrectable error", chip=chip)
        yield ctx.cost(tm.fence_s)
        ctx.fenced[chip] = ctx.fenced.get(chip, 0.0) + tm.hbm_fence_ratio
        left = 1.0 - ctx.fenced[chip]
        if ctx.chip_state(chip) == ChipState.ISOLATED:
            ctx.fab.set_chip_state(chip, ChipState.HEALTHY, "fenced partition; back in service")
        if ctx.chip_state(chip) == ChipState.HEALTHY:
            ctx.fab.set_chip_state(chip, ChipState.DEGRADED, f"degraded: {left:.0%} of HBM usable after fencing")
        assert rec.job_id is not None
        need = ctx.policies[rec.job_id].hbm_need_ratio
        # SRAM: the fenced core leaves the rank short of compute: it always moves.
        fits = cause == "hbm-uncorrectable" and need <= left
        ctx.step(rec, "degrade", f"chip {chip} degraded, {left:.0%} HBM left; the rank needs {need:.0%}: "
                 + ("stays" if fits else "migrates"), chip=chip, hbm_left_ratio=round(left, 3))
        if not fits:
            ctx.fab.set_chip_state(chip, ChipState.ISOLATED, "fenced chip too small for its rank")
            self.schedule_repair(chip)
        return fits
