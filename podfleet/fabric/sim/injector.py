"""Fault arrivals, precursors, injection and repair for ``SimFabric``.

Arrivals: the superposition of every kind's Poisson process over all chips is one
Poisson process with rate ``sum(rates) * chips``; one SimPy process draws its
exponential inter-arrival times from ``tl.rng``, then picks the kind (by share of the
rate) and a chip (or link) uniformly. A pick that cannot fault (a failed or isolated
chip, a link already down) is dropped: thinning keeps each kind's rate per *exposed*
chip-hour equal to the configured one.

Precursors: a share of HBM uncorrectable errors (``PrecursorParams.hbm_share``) first
run a corrected-ECC ramp for a lead time, and a share of chip failures a rising
temperature trend; the failure lands at the end of the lead time unless the chip was
isolated or repaired first (then it is logged as averted). Ground truth goes to the
timeline log only (``fault``, ``precursor-start``), never to subscribers: the control
plane has to infer it from telemetry, as on real hardware.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from podfleet.errors import ConflictError, InvalidInputError
from podfleet.fabric.base import ChipState, FabricEvent, LinkState
from podfleet.fabric.sim.faults import (
    ACTIONS,
    CHIP_KINDS,
    LINK_KINDS,
    FaultKind,
    FaultRates,
    parse_kind,
)

if TYPE_CHECKING:
    from podfleet.fabric.sim.fabric import SimFabric

_KINDS = tuple(FaultKind)


@dataclass(frozen=True)
class Precursor:
    kind: FaultKind
    chip: int
    start_t: float
    end_t: float
    token: int


class FaultsMixin:
    def _init_faults(self: SimFabric) -> None:
        self._fault_proc: simpy.Process | None = None
        self._precursors: dict[int, Precursor] = {}
        self._runaway: set[int] = set()
        self._token = 0

    def _start_fault_process(self: SimFabric) -> None:
        assert self.tl is not None
        self._fault_proc = self.tl.process(self._fault_loop())

    def set_fault_rates(self: SimFabric, rates: FaultRates) -> None:
        """Change the arrival rates now (memoryless: the next arrival is redrawn)."""
        self.fault_rates = rates
        if self._fault_proc is not None and self._fault_proc.is_alive:
            self._fault_proc.interrupt("rates changed")

    def _fault_loop(self: SimFabric):  # type: ignore[no-untyped-def]
        assert self.tl is not None
        env, rng = self.tl.env, self.tl.rng
        while True:
            rates = np.array([self.fault_rates.per_chip_hour(k) for k in _KINDS])
            if self.links.n == 0:
                rates[[_KINDS.index(k) for k in LINK_KINDS]] = 0.0
            total_per_s = float(rates.sum()) * self.n_chips / 3600.0
            try:
                if total_per_s <= 0:
                    yield env.event()  # nothing can fault until the rates change
                else:
                    yield env.timeout(float(rng.exponential(1.0 / total_per_s)))
            except simpy.Interrupt:
                continue
            cum = np.cumsum(rates)
            kind = _KINDS[int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))]
            if kind in LINK_KINDS:
                link = int(rng.integers(self.links.n))
                st = self.link_state(link)
                if st == LinkState.DOWN or (kind == FaultKind.LINK_FLAP and st != LinkState.UP):
                    continue
                self._apply(kind, link=link, injected=False)
            else:
                chip = int(rng.integers(self.n_chips))
                if self.chip_state(chip) in (ChipState.FAILED, ChipState.ISOLATED):
                    continue
                self._arrival(kind, chip, injected=False)

    # --- arrivals and precursors ------------------------------------------------------------
    def _arrival(self: SimFabric, kind: FaultKind, chip: int, *, injected: bool,
                 precursor: bool | None = None, lead_s: float | None = None) -> dict[str, Any]:
        assert self.tl is not None
        rng, pp = self.tl.rng, self.precursors
        if precursor is None:
            share = {FaultKind.HBM_UNCORRECTABLE: pp.hbm_share, FaultKind.CHIP_FAILURE: pp.chip_thermal_share}
            precursor = kind in share and chip not in self._precursors and rng.random() < share[kind]
        if not precursor:
            return self._apply(kind, chip=chip, injected=injected)
        if kind not in (FaultKind.HBM_UNCORRECTABLE, FaultKind.CHIP_FAILURE):
            raise InvalidInputError(
                f"only hbm-uncorrectable and chip-failure have precursors, not {kind.value}", field="precursor"
            )
        lo, hi = pp.hbm_lead_s if kind == FaultKind.HBM_UNCORRECTABLE else pp.chip_thermal_lead_s
        lead = float(rng.uniform(lo, hi)) if lead_s is None else float(lead_s)
        self._token += 1
        token = self._token
        p = Precursor(kind, chip, self.now, self.now + lead, token)
        self._precursors[chip] = p
        signal = "hbm-corrected-ecc-ramp" if kind == FaultKind.HBM_UNCORRECTABLE else "temperature-trend"
        self.tl.emit("precursor-start", chip=chip, fault=kind.value, signal=signal, lead_s=lead, injected=injected)
        self.tl.call_at(lead, lambda: self._precursor_due(chip, token, injected))
        return {"kind": kind.value, "chip": chip, "t": self.now, "precursor": signal, "lead_s": lead}

    def _precursor_due(self: SimFabric, chip: int, token: int, injected: bool) -> None:
        p = self._precursors.get(chip)
        if p is None or p.token != token:
            return  # repaired or replaced in the meantime
        del self._precursors[chip]
        if self.chip_state(chip).value not in ("healthy", "degraded", "updating"):
            assert self.tl is not None
            self.tl.emit("fault", fault=p.kind.value, chip=chip, averted=True, injected=injected)
            return
        self._apply(p.kind, chip=chip, injected=injected, precursor=True)

    def _advance_precursors(self: SimFabric, dt: float) -> None:
        if not self._precursors:
            return
        assert self.tl is not None
        rng, pp, t = self.tl.rng, self.precursors, self.telemetry
        for chip, p in self._precursors.items():
            progress = min(1.0, max(0.0, (self.now - p.start_t) / max(p.end_t - p.start_t, 1e-9)))
            if p.kind == FaultKind.HBM_UNCORRECTABLE:
                rate = pp.hbm_start_rate_per_s * pp.hbm_growth**progress
                t.bump("mem_ecc_corrected", chip, int(rng.poisson(rate * dt)))
            elif chip not in self._runaway:
                t.r_scale[chip] = 1.0 + pp.chip_thermal_r_rise * progress
                t.dirty = True

    # --- applying faults -----------------------------------------------------------------
    def _apply(self: SimFabric, kind: FaultKind, *, chip: int | None = None, link: int | None = None,
               injected: bool, precursor: bool = False) -> dict[str, Any]:
        assert self.tl is not None
        rng, t = self.tl.rng, self.telemetry
        self.faults_by_kind[kind.value] = self.faults_by_kind.get(kind.value, 0) + 1
        where = {"chip": chip} if chip is not None else {"link": link}
        self.tl.emit("fault", fault=kind.value, injected=injected, precursor=precursor, **where)
        # Subscribers see the fault as the hardware reports it (NEURON_HW_ERR, counters),
        # without the ground truth of whether it had a precursor.
        job_id = self._chip_job.get(chip) if chip is not None else None
        detail: dict[str, Any] = {"fault": kind.value, "injected": injected}
        if kind in ACTIONS:
            detail["action"] = ACTIONS[kind]
        self._deliver(FabricEvent("fault", self.now, chip=chip, link=link, job_id=job_id, detail=detail))
        if kind in LINK_KINDS:
            assert link is not None
            self._link_fault(kind, link)
            return {"kind": kind.value, "link": link, "t": self.now}
        assert chip is not None
        if kind == FaultKind.HBM_CORRECTED_BURST:
            t.bump("mem_ecc_corrected", chip, int(rng.integers(20, 200)))
        elif kind == FaultKind.THERMAL_RUNAWAY:
            self._runaway.add(chip)
            t.r_scale[chip] = self.thermal.runaway_r_factor
            t.dirty = True
            if self.chip_state(chip) == ChipState.HEALTHY:
                self._transition(chip, ChipState.DEGRADED, "thermal-runaway: cooling failed", cause=kind.value)
        else:
            if kind == FaultKind.HBM_UNCORRECTABLE:
                t.bump("mem_ecc_uncorrected", chip)
            elif kind == FaultKind.SRAM_UNCORRECTABLE:
                t.bump("sram_ecc_uncorrected", chip)
            else:
                t.bump("execution_errors", chip)
            self._fail(chip, kind.value, action=ACTIONS[kind])
        return {"kind": kind.value, "chip": chip, "t": self.now}

    def _fail(self: SimFabric, chip: int, cause: str, *, action: str, **detail: Any) -> None:
        if self.chip_state(chip) in (ChipState.FAILED, ChipState.ISOLATED):
            return
        self._transition(chip, ChipState.FAILED, cause, cause=cause, action=action, **detail)
        if self.auto_repair_s is not None:
            self._transition(chip, ChipState.ISOLATED, "auto-isolate")
            self.tl.call_at(self.auto_repair_s, lambda: self._auto_repair(chip))  # type: ignore[union-attr]

    def _auto_repair(self: SimFabric, chip: int) -> None:
        if self.chip_state(chip) == ChipState.ISOLATED:
            self._transition(chip, ChipState.HEALTHY, "auto-repair: replaced")

    def _link_fault(self: SimFabric, kind: FaultKind, link: int) -> None:
        assert self.tl is not None
        rng = self.tl.rng
        burst = int(rng.integers(10, 1000))
        self._bump_link_errors(link, burst)
        if kind == FaultKind.LINK_DOWN:
            self._set_link(link, LinkState.DOWN, "link-down", cause=kind.value)
            if self.auto_repair_s is not None:
                self.tl.call_at(self.auto_repair_s, lambda: self._auto_repair_link(link))
        else:
            self.tl.process(self._flap(link, int(rng.integers(3, 8))))

    def _flap(self: SimFabric, link: int, flaps: int):  # type: ignore[no-untyped-def]
        """Down/up a few times within a minute, then stay up at reduced width (degraded)."""
        assert self.tl is not None
        env, rng = self.tl.env, self.tl.rng
        for i in range(flaps):
            if self.link_state(link) == LinkState.DOWN:
                return  # a hard failure took over
            self._set_link(link, LinkState.DOWN, "link-flap", flap=i + 1)
            yield env.timeout(float(rng.uniform(0.5, 5.0)))
            if self.link_state(link) != LinkState.DOWN:
                return
            self._set_link(link, LinkState.UP if i + 1 < flaps else LinkState.DEGRADED, "link-flap", flap=i + 1)
            yield env.timeout(float(rng.uniform(1.0, 10.0)))
        if self.auto_repair_s is not None:
            self.tl.call_at(self.auto_repair_s, lambda: self._auto_repair_link(link))

    def _auto_repair_link(self: SimFabric, link: int) -> None:
        if self.link_state(link) != LinkState.UP:
            self._set_link(link, LinkState.UP, "auto-repair: reseated")

    def _repaired(self: SimFabric, chip: int) -> None:
        """A chip back from isolation is a repaired or replaced one: no faults pending."""
        self._precursors.pop(chip, None)
        self._runaway.discard(chip)
        self.telemetry.r_scale[chip] = 1.0
        self.telemetry.dirty = True

    # --- public commands --------------------------------------------------------------
    def inject_fault(self: SimFabric, kind: FaultKind | str, chip: int | None = None, link: int | None = None,
                     *, precursor: bool = False, lead_s: float | None = None) -> dict[str, Any]:
        """Inject a fault now (tests, chaos). Without ``chip``/``link`` one is picked at
        random. ``precursor=True`` runs the precursor first (hbm-uncorrectable and
        chip-failure). Returns what was injected."""
        assert self.tl is not None
        k = parse_kind(kind)
        rng = self.tl.rng
        if k in LINK_KINDS:
            if link is None:
                cand = self.links.of_chip(self.check_chip(chip)) if chip is not None else np.arange(self.links.n)
                cand = cand[self._link_state[cand] == 0]
                if cand.size == 0:
                    raise ConflictError("no link is up to inject a link fault into", field="link")
                link = int(cand[int(rng.integers(cand.size))])
            link = self.check_link(link)
            if self.link_state(link) == LinkState.DOWN:
                raise ConflictError(f"link {link} is already down", field="link")
            return self._apply(k, link=link, injected=True)
        if link is not None:
            raise InvalidInputError(f"fault kind {k.value} applies to a chip, not a link", field="link")
        if chip is None:
            usable = np.flatnonzero(self.usable_mask())
            if usable.size == 0:
                raise ConflictError("no usable chip to inject a fault into", field="chip")
            chip = int(usable[int(rng.integers(usable.size))])
        chip = self.check_chip(chip)
        st = self.chip_state(chip)
        if st in (ChipState.FAILED, ChipState.ISOLATED):
            raise ConflictError(f"chip {chip} is {st.value}; a fault needs a healthy, degraded or updating chip",
                                field="chip")
        assert k in CHIP_KINDS
        return self._arrival(k, chip, injected=True, precursor=precursor, lead_s=lead_s)

    def repair_chip(self: SimFabric, chip: int, reason: str = "repaired") -> None:
        """Failed or isolated -> healthy (through isolated, as the state machine requires)."""
        chip = self.check_chip(chip)
        if self.chip_state(chip) == ChipState.FAILED:
            self._transition(chip, ChipState.ISOLATED, reason)
        self._transition(chip, ChipState.HEALTHY, reason)

    def repair_link(self: SimFabric, link: int, reason: str = "repaired") -> None:
        link = self.check_link(link)
        if self.link_state(link) != LinkState.UP:
            self._set_link(link, LinkState.UP, reason)

    def update_firmware(self: SimFabric, chip: int, version: str, *, duration_s: float = 60.0,
                        failure_p: float = 0.0) -> None:
        """Take the chip to ``updating``; after ``duration_s`` it runs ``version`` and is
        healthy again, or failed with probability ``failure_p``."""
        assert self.tl is not None
        chip = self.check_chip(chip)
        self._transition(chip, ChipState.UPDATING, f"firmware update to {version}")

        def done() -> None:
            assert self.tl is not None
            if self.chip_state(chip) != ChipState.UPDATING:
                return
            if failure_p > 0 and self.tl.rng.random() < failure_p:
                self._transition(chip, ChipState.FAILED, "firmware-update-failed", cause="firmware-fault",
                                 action="reset", version=version)
                return
            self.telemetry.put("firmware_version", chip, version)
            self._transition(chip, ChipState.HEALTHY, f"firmware {version} installed", version=version)

        self.tl.call_at(duration_s, done)
