"""The twin's fault model: rates per chip-hour of each kind and their derivation (the
kinds themselves are ``podfleet.hardware.faults.FaultKind``).

Default rates come from the Llama 3 405B pre-training report (Llama 3 paper,
arXiv 2407.21783, table of root causes of unexpected interruptions; summarised in
../shared/reference/trn2.md): 419 unexpected interruptions over 16,384 H100 GPUs x 54
days = 21,233,664 GPU-hours. Each count below is divided by that exposure:

    kind                 count  source row(s) of the table
    chip-failure           148  faulty GPU
    hbm-uncorrectable       72  GPU HBM3 memory
    link-down               35  network switch/cable
    sram-uncorrectable      19  GPU SRAM memory
    firmware-fault          17  GPU system processor (the GSP runs the GPU firmware)
    link-flap               14  NIC (7) + NCCL watchdog timeouts (7): transient network
    thermal-runaway          6  GPU thermal interface + sensor
    hbm-corrected-burst     --  not interrupting, so not in the table: ASSUMED 10x the
                                uncorrectable HBM rate (a parameter)

Rows not modelled (software bugs, host maintenance, SSD, PSU, ...) are not chip or
link faults. Trainium2 failure rates are not published; an H100 rate is the closest
public figure, and every rate is a parameter (``FaultRates``, ``scaled``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from podfleet.errors import InvalidInputError
from podfleet.hardware.faults import FaultKind, parse_fault_kind

LLAMA3_GPU_HOURS = 16_384 * 54 * 24  # 21,233,664
LLAMA3_COUNTS: dict[str, int] = {
    "chip-failure": 148,
    "hbm-uncorrectable": 72,
    "link-down": 35,
    "sram-uncorrectable": 19,
    "firmware-fault": 17,
    "link-flap": 7 + 7,
    "thermal-runaway": 6,
}
CORRECTED_BURST_PER_UNCORRECTABLE = 10.0  # assumption, see module docstring


# What the Neuron runtime recommends for each (neuron-docs nrt-troubleshoot.rst).
ACTIONS: dict[FaultKind, str] = {
    FaultKind.CHIP_FAILURE: "replace",
    FaultKind.HBM_UNCORRECTABLE: "replace",
    FaultKind.SRAM_UNCORRECTABLE: "replace",
    FaultKind.FIRMWARE_FAULT: "reset",
    FaultKind.THERMAL_RUNAWAY: "replace",
}


def _per_chip_hour(kind: str) -> float:
    return LLAMA3_COUNTS[kind] / LLAMA3_GPU_HOURS


@dataclass(frozen=True)
class FaultRates:
    """Arrival rate of each fault kind, per chip-hour (link kinds too: per chip-hour of
    the whole fabric, spread uniformly over its links)."""

    chip_failure: float = _per_chip_hour("chip-failure")
    hbm_corrected_burst: float = CORRECTED_BURST_PER_UNCORRECTABLE * _per_chip_hour("hbm-uncorrectable")
    hbm_uncorrectable: float = _per_chip_hour("hbm-uncorrectable")
    sram_uncorrectable: float = _per_chip_hour("sram-uncorrectable")
    link_down: float = _per_chip_hour("link-down")
    link_flap: float = _per_chip_hour("link-flap")
    thermal_runaway: float = _per_chip_hour("thermal-runaway")
    firmware_fault: float = _per_chip_hour("firmware-fault")

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int | float) or v < 0 or v != v:
                raise InvalidInputError(
                    f"fault rate {f.name.replace('_', '-')} must be a non-negative number, got {v!r}",
                    field=f"fault_rates.{f.name.replace('_', '-')}",
                )

    @classmethod
    def none(cls) -> FaultRates:
        return cls(**{f.name: 0.0 for f in fields(cls)})

    @classmethod
    def from_mapping(cls, rates: Mapping[str, float], *, base: FaultRates | None = None) -> FaultRates:
        """Override some kinds (hyphenated names, per chip-hour) on ``base`` (default: Llama 3)."""
        out = base or cls()
        for name, value in rates.items():
            kind = parse_fault_kind(name)
            out = replace(out, **{kind.value.replace("-", "_"): value})
        return out

    def scaled(self, factor: float) -> FaultRates:
        if factor < 0:
            raise InvalidInputError(f"fault rate scale must be >= 0, got {factor}", field="fault_rate_scale")
        return FaultRates(**{f.name: getattr(self, f.name) * factor for f in fields(self)})

    def per_chip_hour(self, kind: FaultKind | str) -> float:
        return float(getattr(self, parse_fault_kind(kind).value.replace("-", "_")))

    def as_dict(self) -> dict[str, float]:
        return {k.value: self.per_chip_hour(k) for k in FaultKind}

    def total_per_chip_hour(self) -> float:
        return sum(self.as_dict().values())


PRECURSOR_SHAPES: tuple[str, ...] = ("ramp", "step", "bursts")


@dataclass(frozen=True)
class PrecursorParams:
    """Which failures announce themselves, and how (what a predictor can learn).

    Shares and lead times are assumptions (field studies of DRAM, e.g. Sridharan et al.
    SC'13, report corrected errors preceding most uncorrectable ones; the exact share
    for HBM3 is not published), so they are parameters.

    Each precursor draws its shape from ``shapes`` and its parameters (lead time,
    magnitude, burst rate) from the ranges below, per fault, from the fabric's seeded
    precursor generator (``injector.draw_precursor``):

    * ``ramp``: the signal grows over the whole lead time (corrected errors per second
      from ``hbm_start_rate_per_s`` to that times a drawn growth factor; thermal
      resistance from +0 to a drawn rise);
    * ``step``: the signal jumps to a drawn level at the start and stays there (a
      corrected-error rate; a thermal-resistance rise);
    * ``bursts``: intermittent episodes at a drawn rate per hour (a burst of a drawn
      number of corrected errors; a drawn thermal-resistance rise for 1-5 minutes),
      quiet in between.

    An injected precursor (``inject_fault(..., precursor=True)``) is a ramp with the
    fixed ``hbm_growth`` and ``chip_thermal_r_rise`` unless a shape is given.
    """

    # Share of uncorrectable HBM errors preceded by a rising corrected-ECC rate.
    hbm_share: float = 0.7
    hbm_lead_s: tuple[float, float] = (1 * 3600.0, 6 * 3600.0)
    # Corrected errors per second at the start of the ramp, and its growth factor by the end.
    hbm_start_rate_per_s: float = 1.0 / 600.0
    hbm_growth: float = 60.0
    # Share of chip failures preceded by a temperature trend (thermal resistance drifting up).
    chip_thermal_share: float = 0.3
    chip_thermal_lead_s: tuple[float, float] = (1800.0, 7200.0)
    chip_thermal_r_rise: float = 0.3  # thermal resistance +30% by the end of the ramp
    # Shapes drawn per precursor (uniformly among these) and their parameter ranges.
    shapes: tuple[str, ...] = PRECURSOR_SHAPES
    hbm_growth_range: tuple[float, float] = (20.0, 120.0)  # ramp: growth factor by the end
    hbm_step_rate_per_s: tuple[float, float] = (1.0 / 300.0, 1.0 / 30.0)  # step: 0.2-2 errors a minute
    burst_per_hour: tuple[float, float] = (3.0, 12.0)  # bursts: episodes per hour
    hbm_burst_errors: tuple[float, float] = (3.0, 60.0)  # bursts: corrected errors per episode
    thermal_burst_s: tuple[float, float] = (60.0, 300.0)  # bursts: how long an episode lasts
    chip_thermal_r_rise_range: tuple[float, float] = (0.15, 0.45)  # ramp end / step / burst level

    def __post_init__(self) -> None:
        for name in ("hbm_share", "chip_thermal_share"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise InvalidInputError(f"{name} must be within 0-1, got {v}", field=name)
        for name in ("hbm_lead_s", "chip_thermal_lead_s", "hbm_growth_range", "hbm_step_rate_per_s",
                     "burst_per_hour", "hbm_burst_errors", "thermal_burst_s", "chip_thermal_r_rise_range"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise InvalidInputError(f"{name} must be (min, max) with 0 < min <= max, got {(lo, hi)}", field=name)
        bad = [s for s in self.shapes if s not in PRECURSOR_SHAPES]
        if not self.shapes or bad:
            raise InvalidInputError(f"precursor shapes must be some of {', '.join(PRECURSOR_SHAPES)}, got "
                                    f"{', '.join(self.shapes) or 'none'}", field="shapes")
