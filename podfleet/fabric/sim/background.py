"""The corrected-ECC errors healthy chips show in the field, with no failure coming
(``BackgroundParams``, ``Background``): what a failure predictor must not alarm on.

Field data (Schroeder, Pinheiro, Weber, "DRAM errors in the wild: a large-scale field
study", SIGMETRICS 2009, Google's fleet over 2.5 years): more than 8% of DIMMs see
correctable errors in a year, about a third of machines do, and an affected DIMM logs
thousands a year on average (nearly 4,000), concentrated on few DIMMs (most DIMMs with
errors have few; a small share has most of them). HBM3 field rates are not published;
a Trn2 chip's four HBM stacks are counted as four DIMMs:

* ``affected_share`` = 1 - (1 - 0.082)^4 = 0.29 of chips have a background rate (the
  paper's "a third of machines" agrees);
* an affected chip's rate is drawn once from a lognormal whose mean is the paper's
  ~4,000 a year; its spread ``sigma`` (2.0: the top 1% of affected chips at ~100x the
  median) is an assumption standing for the paper's concentration;
* errors arrive as a Poisson process at that rate, on chips in service.

The draws use their own generator (seeded from the timeline's seed), so a seed's fault
arrivals are the same with or without the background.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from podfleet.errors import InvalidInputError

YEAR_S = 365.0 * 86400.0


@dataclass(frozen=True)
class BackgroundParams:
    """Corrected-ECC errors of healthy chips (sources in the module docstring)."""

    affected_share: float = 1.0 - (1.0 - 0.082) ** 4  # chips with a background rate
    mean_per_year: float = 4000.0  # corrected errors a year on an affected chip (mean)
    sigma: float = 2.0  # lognormal spread of the affected chips' rates (an assumption)

    def __post_init__(self) -> None:
        if not 0.0 <= self.affected_share <= 1.0:
            raise InvalidInputError(f"affected_share must be within 0-1, got {self.affected_share}",
                                    field="affected_share")
        if self.mean_per_year < 0 or self.sigma < 0:
            raise InvalidInputError(f"mean_per_year and sigma must be >= 0, got {self.mean_per_year}, "
                                    f"{self.sigma}", field="mean_per_year")


class Background:
    """Per-chip background rates, drawn once; ``counts(dt, usable)`` the errors of one tick."""

    def __init__(self, n_chips: int, params: BackgroundParams, seed: int) -> None:
        self.params = params
        self.rng = np.random.default_rng([seed, 0x42474E44])
        affected = self.rng.random(n_chips) < params.affected_share
        # A lognormal with mean ``mean_per_year``: its median is the mean / exp(sigma^2 / 2).
        mu = np.log(max(params.mean_per_year, 1e-12)) - params.sigma**2 / 2.0
        per_year = np.exp(mu + params.sigma * self.rng.standard_normal(n_chips))
        self.rate_per_s = np.where(affected, per_year / YEAR_S, 0.0)
        self.chips = np.flatnonzero(self.rate_per_s > 0)

    def counts(self, dt: float, usable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(chips, errors) of one tick of ``dt`` seconds, on chips in service only."""
        chips = self.chips[usable[self.chips]]
        n = self.rng.poisson(self.rate_per_s[chips] * dt)
        hit = n > 0
        return chips[hit], n[hit]


@dataclass(frozen=True)
class ThermalDriftParams:
    """Inlet-air drift healthy chips carry: what a predictor reading ``(T - ambient) / P``
    against a fixed ambient sees as a change of thermal resistance with no fault behind it.

    Sources: a GPU's heat dissipation depends on where it sits in the cooling air (the
    Titan field study, 18,688 GPUs over 6 years: Ostrouchov et al., "GPU Lifetimes on
    Titan Supercomputer", SC 2020), and a large training fleet's throughput swings 1-2%
    over the day with mid-day temperatures (Llama 3: Dubey et al. 2024, section 3.3.4).
    Neither gives the size of the inlet swing, so the amplitudes here are **assumptions**
    (the prediction benchmark reports its figures at half and twice them): a room-wide
    diurnal sinusoid of ``diurnal_c`` (a 3 C peak to peak swing by default, a third of
    ASHRAE's recommended 18-27 C inlet band) plus, per chip, a slow Ornstein-Uhlenbeck
    wander of standard deviation ``chip_sigma_c`` and correlation time ``chip_tau_s``
    (airflow and the neighbours' load)."""

    diurnal_c: float = 1.5  # amplitude of the room's daily swing (an assumption)
    chip_sigma_c: float = 0.5  # per-chip wander, standard deviation (an assumption)
    chip_tau_s: float = 2 * 3600.0  # its correlation time (an assumption)
    period_s: float = 86400.0

    def __post_init__(self) -> None:
        if self.diurnal_c < 0 or self.chip_sigma_c < 0:
            raise InvalidInputError(f"diurnal_c and chip_sigma_c must be >= 0, got {self.diurnal_c}, "
                                    f"{self.chip_sigma_c}", field="diurnal_c")
        if self.chip_tau_s <= 0 or self.period_s <= 0:
            raise InvalidInputError(f"chip_tau_s and period_s must be positive, got {self.chip_tau_s}, "
                                    f"{self.period_s}", field="chip_tau_s")

    def scaled(self, k: float) -> ThermalDriftParams:
        """Both amplitudes times ``k`` (the benchmark's sensitivity runs)."""
        return ThermalDriftParams(self.diurnal_c * k, self.chip_sigma_c * k, self.chip_tau_s, self.period_s)


class ThermalDrift:
    """Per-chip inlet offset over time; ``step(dt)`` returns how much each chip's inlet
    moved in that tick (its own generator, so a seed's faults are the same without it)."""

    def __init__(self, n_chips: int, params: ThermalDriftParams, seed: int) -> None:
        self.params = params
        self.rng = np.random.default_rng([seed, 0x54445246])
        self.phase = float(self.rng.uniform(0.0, 2.0 * np.pi))  # the room's time of day at t = 0
        self.wander = self.rng.standard_normal(n_chips) * params.chip_sigma_c  # stationary start
        self.t = 0.0
        self.offset = self.wander + params.diurnal_c * np.sin(self.phase)

    def step(self, dt: float) -> np.ndarray:
        p = self.params
        self.t += dt
        a = np.exp(-dt / p.chip_tau_s)
        # Exact OU update: stationary standard deviation ``chip_sigma_c`` whatever ``dt``.
        self.wander = self.wander * a + self.rng.standard_normal(self.wander.size) * (p.chip_sigma_c * np.sqrt(1 - a * a))
        new = self.wander + p.diurnal_c * np.sin(self.phase + 2.0 * np.pi * self.t / p.period_s)
        delta = new - self.offset
        self.offset = new
        return delta
