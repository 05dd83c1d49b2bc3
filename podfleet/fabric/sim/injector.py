"""Fault arrivals, precursors, injection and repair for ``SimFabric``.

Arrivals: the superposition of every kind's Poisson process over all chips is one
Poisson process with rate ``sum(rates) * chips``; one SimPy process draws its
exponential inter-arrival times from ``tl.rng``, then picks the kind (by share of the
rate) and a chip (or link) uniformly. A pick that cannot fault (a failed or isolated
chip, a link already down) is dropped: thinning keeps each kind's rate per *exposed*
chip-hour equal to the configured one.

Precursors: a share of HBM uncorrectable errors (``PrecursorParams.hbm_share``) first
raise the chip's corrected-ECC count for a lead time, and a share of chip failures its
thermal resistance (so its temperature); the failure lands at the end of the lead time
unless the chip was isolated or repaired first (then it is logged as averted). Each
precursor has a shape (ramp, step or intermittent bursts) and magnitudes drawn per fault
(``draw_precursor``). Ground truth goes to the timeline log only (``fault``,
``precursor-start`` with the shape), never to subscribers: the control plane has to
infer it from telemetry, as on real hardware.

Random streams: whether a fault has a precursor and its lead time come from the
timeline's generator, as they always did; shapes, magnitudes and the precursor's own
telemetry come from a second generator seeded from the timeline's seed, so changing the
shapes leaves every fault arrival of a seed where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from podfleet.errors import ConflictError, InvalidInputError
from podfleet.fabric.base import ChipState, FabricEvent, LinkState
from podfleet.fabric.sim.board import Board
from podfleet.fabric.sim.context import SimContext
from podfleet.fabric.sim.faults import ACTIONS, PRECURSOR_SHAPES, FaultRates, PrecursorParams
from podfleet.fabric.sim.telemetry import ThermalParams
from podfleet.hardware.faults import CHIP_FAULTS, LINK_FAULTS, FaultKind, parse_fault_kind

_KINDS = tuple(FaultKind)


@dataclass(frozen=True)
class PrecursorShape:
    """One precursor's drawn shape. ``magnitude``: for HBM, the ramp's growth factor, the
    step's corrected errors per second, or the mean corrected errors of a burst; for a
    chip failure, the rise of the thermal resistance (share) at the ramp's end, the
    step's level or a burst's level."""

    shape: str
    magnitude: float
    burst_per_s: float = 0.0


def draw_precursor(kind: FaultKind, params: PrecursorParams, rng: np.random.Generator,
                   shape: str | None = None) -> PrecursorShape:
    """Draw a precursor's shape (uniformly among ``params.shapes``, unless given) and its
    magnitude and burst rate, uniformly within ``params``' ranges."""
    shape = str(rng.choice(list(params.shapes))) if shape is None else shape
    if shape not in PRECURSOR_SHAPES:
        raise InvalidInputError(f"precursor shape must be one of {', '.join(PRECURSOR_SHAPES)}, got {shape}",
                                field="shape")
    if kind == FaultKind.HBM_UNCORRECTABLE:
        rng_of = {"ramp": params.hbm_growth_range, "step": params.hbm_step_rate_per_s,
                  "bursts": params.hbm_burst_errors}[shape]
    else:
        rng_of = params.chip_thermal_r_rise_range
    magnitude = float(rng.uniform(*rng_of))
    burst = float(rng.uniform(*params.burst_per_hour)) / 3600.0 if shape == "bursts" else 0.0
    return PrecursorShape(shape, magnitude, burst)


@dataclass(frozen=True)
class Precursor:
    kind: FaultKind
    chip: int
    start_t: float
    end_t: float
    token: int
    shape: PrecursorShape = PrecursorShape("ramp", 0.0)


class FaultProcess:
    """Fault arrivals, precursors, injection, repair and firmware updates on a ``Board``."""

    def __init__(self, ctx: SimContext, board: Board, *, rates: FaultRates, precursors: PrecursorParams,
                 thermal: ThermalParams, auto_repair_s: float | None) -> None:
        self.ctx, self.board = ctx, board
        self.rates, self.params, self.thermal = rates, precursors, thermal
        self.auto_repair_s = auto_repair_s
        self.faults_by_kind: dict[str, int] = {}
        self.precursors: dict[int, Precursor] = {}
        self.runaway: set[int] = set()
        self._token = 0
        # The precursors' own draws (see the module docstring: arrivals keep their stream).
        self.precursor_rng = np.random.default_rng([ctx.tl.seed, 0x50524543])
        self._burst_until: dict[int, float] = {}
        self._proc: simpy.Process = ctx.tl.process(self._fault_loop())

    def set_fault_rates(self, rates: FaultRates) -> None:
        """Change the arrival rates now (memoryless: the next arrival is redrawn)."""
        self.rates = rates
        if self._proc.is_alive:
            self._proc.interrupt("rates changed")

    def _fault_loop(self):  # type: ignore[no-untyped-def]
        env, rng = self.ctx.tl.env, self.ctx.tl.rng
        while True:
            rates = np.array([self.rates.per_chip_hour(k) for k in _KINDS])
            if self.ctx.links.n == 0:
                rates[[_KINDS.index(k) for k in LINK_FAULTS]] = 0.0
            total_per_s = float(rates.sum()) * self.ctx.n_chips / 3600.0
            try:
                if total_per_s <= 0:
                    yield env.event()  # nothing can fault until the rates change
                else:
                    yield env.timeout(float(rng.exponential(1.0 / total_per_s)))
            except simpy.Interrupt:
                continue
            cum = np.cumsum(rates)
            kind = _KINDS[int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))]
            if kind in LINK_FAULTS:
                link = int(rng.integers(self.ctx.links.n))
                st = self.board.link_state_of(link)
                if st == LinkState.DOWN or (kind == FaultKind.LINK_FLAP and st != LinkState.UP):
                    continue
                self._apply(kind, link=link, injected=False)
            else:
                chip = int(rng.integers(self.ctx.n_chips))
                if self.board.chip_state(chip) in (ChipState.FAILED, ChipState.ISOLATED):
                    continue
                self._arrival(kind, chip, injected=False)

    # --- arrivals and precursors ------------------------------------------------------------
    def _arrival(self, kind: FaultKind, chip: int, *, injected: bool, precursor: bool | None = None,
                 lead_s: float | None = None, shape: str | None = None) -> dict[str, Any]:
        rng, pp = self.ctx.tl.rng, self.params
        if precursor is None:
            share = {FaultKind.HBM_UNCORRECTABLE: pp.hbm_share, FaultKind.CHIP_FAILURE: pp.chip_thermal_share}
            precursor = kind in share and chip not in self.precursors and rng.random() < share[kind]
        if not precursor:
            return self._apply(kind, chip=chip, injected=injected)
        if kind not in (FaultKind.HBM_UNCORRECTABLE, FaultKind.CHIP_FAILURE):
            raise InvalidInputError(
                f"only hbm-uncorrectable and chip-failure have precursors, not {kind.value}", field="precursor"
            )
        lo, hi = pp.hbm_lead_s if kind == FaultKind.HBM_UNCORRECTABLE else pp.chip_thermal_lead_s
        lead = float(rng.uniform(lo, hi)) if lead_s is None else float(lead_s)
        if injected and shape in (None, "ramp"):
            # Injected (tests, chaos): the fixed ramp, unless another shape is asked for.
            mag = pp.hbm_growth if kind == FaultKind.HBM_UNCORRECTABLE else pp.chip_thermal_r_rise
            drawn = PrecursorShape("ramp", mag)
        else:
            drawn = draw_precursor(kind, pp, self.precursor_rng, shape)
        self._token += 1
        token = self._token
        p = Precursor(kind, chip, self.ctx.now, self.ctx.now + lead, token, drawn)
        self.precursors[chip] = p
        self._burst_until.pop(chip, None)
        signal = "hbm-corrected-ecc" if kind == FaultKind.HBM_UNCORRECTABLE else "temperature"
        self.ctx.tl.emit("precursor-start", chip=chip, fault=kind.value, signal=f"{signal}-{drawn.shape}",
                         shape=drawn.shape, magnitude=round(drawn.magnitude, 6),
                         burst_per_hour=round(drawn.burst_per_s * 3600.0, 3), lead_s=lead, injected=injected)
        self.ctx.tl.call_at(lead, lambda: self._precursor_due(chip, token, injected))
        return {"kind": kind.value, "chip": chip, "t": self.ctx.now, "precursor": f"{signal}-{drawn.shape}",
                "lead_s": lead}

    def _precursor_due(self, chip: int, token: int, injected: bool) -> None:
        p = self.precursors.get(chip)
        if p is None or p.token != token:
            return  # repaired or replaced in the meantime
        del self.precursors[chip]
        self._burst_until.pop(chip, None)
        if self.board.chip_state(chip).value not in ("healthy", "degraded", "updating"):
            self.ctx.tl.emit("fault", fault=p.kind.value, chip=chip, averted=True, injected=injected)
            return
        self._apply(p.kind, chip=chip, injected=injected, precursor=True)

    def advance_precursors(self, dt: float) -> None:
        if not self.precursors:
            return
        rng, pp, t, prng = self.ctx.tl.rng, self.params, self.ctx.telemetry, self.precursor_rng
        now = self.ctx.now
        for chip, p in self.precursors.items():
            progress = min(1.0, max(0.0, (now - p.start_t) / max(p.end_t - p.start_t, 1e-9)))
            s = p.shape
            if p.kind == FaultKind.HBM_UNCORRECTABLE:
                # The draw the ramp made here before shapes existed, kept (its value unused)
                # so that the timeline's stream, and so every later fault arrival, is unchanged.
                rng.poisson(pp.hbm_start_rate_per_s * pp.hbm_growth**progress * dt)
                if s.shape == "ramp":
                    count = int(prng.poisson(pp.hbm_start_rate_per_s * s.magnitude**progress * dt))
                elif s.shape == "step":
                    count = int(prng.poisson(s.magnitude * dt))
                else:
                    bursts = int(prng.poisson(s.burst_per_s * dt))
                    count = int(bursts + prng.poisson(max(s.magnitude - 1.0, 0.0) * bursts)) if bursts else 0
                if count:
                    t.bump("mem_ecc_corrected", chip, count)
            elif chip not in self.runaway:
                if s.shape == "ramp":
                    scale = 1.0 + s.magnitude * progress
                elif s.shape == "step":
                    scale = 1.0 + s.magnitude
                else:
                    until = self._burst_until.get(chip, -1.0)
                    if now >= until and prng.poisson(s.burst_per_s * dt):
                        until = now + float(prng.uniform(*pp.thermal_burst_s))
                        self._burst_until[chip] = until
                    scale = 1.0 + s.magnitude if now < until else 1.0
                if t.r_scale[chip] != scale:
                    t.r_scale[chip] = scale
                    t.dirty = True

    # --- applying faults -----------------------------------------------------------------
    def _apply(self, kind: FaultKind, *, chip: int | None = None, link: int | None = None,
               injected: bool, precursor: bool = False) -> dict[str, Any]:
        rng, t = self.ctx.tl.rng, self.ctx.telemetry
        self.faults_by_kind[kind.value] = self.faults_by_kind.get(kind.value, 0) + 1
        where = {"chip": chip} if chip is not None else {"link": link}
        self.ctx.tl.emit("fault", fault=kind.value, injected=injected, precursor=precursor, **where)
        # Subscribers see the fault as the hardware reports it (NEURON_HW_ERR, counters),
        # without the ground truth of whether it had a precursor.
        job_id = self.board.job_on(chip) if chip is not None else None
        detail: dict[str, Any] = {"fault": kind.value, "injected": injected}
        if kind in ACTIONS:
            detail["action"] = ACTIONS[kind]
        self.ctx.bus.deliver(FabricEvent("fault", self.ctx.now, chip=chip, link=link, job_id=job_id, detail=detail))
        if kind in LINK_FAULTS:
            assert link is not None
            self._link_fault(kind, link)
            return {"kind": kind.value, "link": link, "t": self.ctx.now}
        assert chip is not None
        if kind == FaultKind.HBM_CORRECTED_BURST:
            t.bump("mem_ecc_corrected", chip, int(rng.integers(20, 200)))
        elif kind == FaultKind.THERMAL_RUNAWAY:
            self.runaway.add(chip)
            t.r_scale[chip] = self.thermal.runaway_r_factor
            t.dirty = True
            if self.board.chip_state(chip) == ChipState.HEALTHY:
                self.board.transition(chip, ChipState.DEGRADED, "thermal-runaway: cooling failed", cause=kind.value)
        else:
            if kind == FaultKind.HBM_UNCORRECTABLE:
                t.bump("mem_ecc_uncorrected", chip)
            elif kind == FaultKind.SRAM_UNCORRECTABLE:
                t.bump("sram_ecc_uncorrected", chip)
            else:
                t.bump("execution_errors", chip)
            self.fail(chip, kind.value, action=ACTIONS[kind])
        return {"kind": kind.value, "chip": chip, "t": self.ctx.now}

    def fail(self, chip: int, cause: str, *, action: str, **detail: Any) -> None:
        if self.board.chip_state(chip) in (ChipState.FAILED, ChipState.ISOLATED):
            return
        self.board.transition(chip, ChipState.FAILED, cause, cause=cause, action=action, **detail)
        if self.auto_repair_s is not None:
            self.board.transition(chip, ChipState.ISOLATED, "auto-isolate")
            self.ctx.tl.call_at(self.auto_repair_s, lambda: self._auto_repair(chip))

    def _auto_repair(self, chip: int) -> None:
        if self.board.chip_state(chip) == ChipState.ISOLATED:
            self.board.transition(chip, ChipState.HEALTHY, "auto-repair: replaced")

    def _link_fault(self, kind: FaultKind, link: int) -> None:
        rng = self.ctx.tl.rng
        burst = int(rng.integers(10, 1000))
        self.board.bump_link_errors(link, burst)
        if kind == FaultKind.LINK_DOWN:
            self.board.set_link(link, LinkState.DOWN, "link-down", cause=kind.value)
            if self.auto_repair_s is not None:
                self.ctx.tl.call_at(self.auto_repair_s, lambda: self._auto_repair_link(link))
        else:
            self.ctx.tl.process(self._flap(link, int(rng.integers(3, 8))))

    def _flap(self, link: int, flaps: int):  # type: ignore[no-untyped-def]
        """Down/up a few times within a minute, then stay up at reduced width (degraded)."""
        env, rng = self.ctx.tl.env, self.ctx.tl.rng
        for i in range(flaps):
            if self.board.link_state_of(link) == LinkState.DOWN:
                return  # a hard failure took over
            self.board.set_link(link, LinkState.DOWN, "link-flap", flap=i + 1)
            yield env.timeout(float(rng.uniform(0.5, 5.0)))
            if self.board.link_state_of(link) != LinkState.DOWN:
                return
            self.board.set_link(link, LinkState.UP if i + 1 < flaps else LinkState.DEGRADED, "link-flap", flap=i + 1)
            yield env.timeout(float(rng.uniform(1.0, 10.0)))
        if self.auto_repair_s is not None:
            self.ctx.tl.call_at(self.auto_repair_s, lambda: self._auto_repair_link(link))

    def _auto_repair_link(self, link: int) -> None:
        if self.board.link_state_of(link) != LinkState.UP:
            self.board.set_link(link, LinkState.UP, "auto-repair: reseated")

    def repaired(self, chip: int) -> None:
        """A chip back from isolation is a repaired or replaced one: no faults pending."""
        self.precursors.pop(chip, None)
        self._burst_until.pop(chip, None)
        self.runaway.discard(chip)
        self.ctx.telemetry.r_scale[chip] = 1.0
        self.ctx.telemetry.dirty = True

    # --- public commands --------------------------------------------------------------
    def inject_fault(self, kind: FaultKind | str, chip: int | None = None, link: int | None = None,
                     *, precursor: bool = False, lead_s: float | None = None,
                     shape: str | None = None) -> dict[str, Any]:
        """Inject a fault now (tests, chaos). Without ``chip``/``link`` one is picked at
        random. ``precursor=True`` runs the precursor first (hbm-uncorrectable and
        chip-failure): the fixed ramp, or ``shape`` (``ramp``, ``step``, ``bursts``) with
        drawn magnitudes. Returns what was injected."""
        k = parse_fault_kind(kind)
        rng = self.ctx.tl.rng
        if k in LINK_FAULTS:
            if link is None:
                lt = self.ctx.links
                cand = lt.of_chip(self.board.check_chip(chip)) if chip is not None else np.arange(lt.n)
                cand = cand[self.board.link_state[cand] == 0]
                if cand.size == 0:
                    raise ConflictError("no link is up to inject a link fault into", field="link")
                link = int(cand[int(rng.integers(cand.size))])
            link = self.board.check_link(link)
            if self.board.link_state_of(link) == LinkState.DOWN:
                raise ConflictError(f"link {link} is already down", field="link")
            return self._apply(k, link=link, injected=True)
        if link is not None:
            raise InvalidInputError(f"fault kind {k.value} applies to a chip, not a link", field="link")
        if chip is None:
            usable = np.flatnonzero(self.board.usable_mask())
            if usable.size == 0:
                raise ConflictError("no usable chip to inject a fault into", field="chip")
            chip = int(usable[int(rng.integers(usable.size))])
        chip = self.board.check_chip(chip)
        st = self.board.chip_state(chip)
        if st in (ChipState.FAILED, ChipState.ISOLATED):
            raise ConflictError(f"chip {chip} is {st.value}; a fault needs a healthy, degraded or updating chip",
                                field="chip")
        assert k in CHIP_FAULTS
        return self._arrival(k, chip, injected=True, precursor=precursor, lead_s=lead_s, shape=shape)

    def repair_chip(self, chip: int, reason: str = "repaired") -> None:
        """Failed or isolated -> healthy (through isolated, as the state machine requires)."""
        chip = self.board.check_chip(chip)
        if self.board.chip_state(chip) == ChipState.FAILED:
            self.board.transition(chip, ChipState.ISOLATED, reason)
        self.board.transition(chip, ChipState.HEALTHY, reason)

    def repair_link(self, link: int, reason: str = "repaired") -> None:
        link = self.board.check_link(link)
        if self.board.link_state_of(link) != LinkState.UP:
            self.board.set_link(link, LinkState.UP, reason)

    def update_firmware(self, chip: int, version: str, *, duration_s: float = 60.0,
                        failure_p: float = 0.0) -> None:
        """Take the chip to ``updating``; after ``duration_s`` it runs ``version`` and is
        healthy again, or failed with probability ``failure_p``."""
        chip = self.board.check_chip(chip)
        self.board.transition(chip, ChipState.UPDATING, f"firmware update to {version}")

        def done() -> None:
            if self.board.chip_state(chip) != ChipState.UPDATING:
                return
            if failure_p > 0 and self.ctx.tl.rng.random() < failure_p:
                self.board.transition(chip, ChipState.FAILED, "firmware-update-failed",
                                      cause="firmware-fault", action="reset", version=version)
                return
            self.ctx.telemetry.put("firmware_version", chip, version)
            self.board.transition(chip, ChipState.HEALTHY, f"firmware {version} installed", version=version)

        self.ctx.tl.call_at(duration_s, done)
