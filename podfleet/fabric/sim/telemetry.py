"""Vectorized chip telemetry and the first-order thermal model.

One ``tick`` updates every metric of every chip with whole-array numpy operations; no
Python loop over chips. Metric names follow neuron-monitor where one exists
(``neuroncore_utilization``, ``mem_ecc_corrected``, ``sram_ecc_uncorrected``,
``execution_errors``; reference/trn2.md); the rest carry units in their names.

Thermal model (per chip): temperature relaxes toward ``ambient + power * R`` with time
constant ``tau``: ``T += (T_ss - T) * (1 - exp(-dt / tau))``, exact for power held
constant over the tick. Above ``throttle_c`` the chip throttles (clock x
``throttle_clock``, and power with it) until it cools below ``release_c``
(hysteresis); above ``critical_c`` it shuts down (the fabric fails it). Trn2 thermal
figures are not published; these defaults are assumptions that put a fully loaded
500 W chip at about 80 C, and every one is a parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from podfleet.hardware.specs import ChipSpec

NOISE_BANK = 1 << 18


def ro(a: np.ndarray) -> np.ndarray:
    """Mark ``a`` read-only: metric arrays are immutable snapshots, replaced on change
    (copy-on-write), so readers can keep them without copying."""
    a.setflags(write=False)
    return a

_NONE = np.empty(0, np.int64)
_NONE.setflags(write=False)


@dataclass(frozen=True)
class ThermalParams:
    ambient_c: float = 35.0
    r_c_per_w: float = 0.09
    tau_s: float = 30.0
    throttle_c: float = 95.0
    release_c: float = 90.0
    critical_c: float = 105.0
    throttle_clock: float = 0.6
    idle_power_fraction: float = 0.2
    base_clock_mhz: float = 2400.0  # NeuronCore-v3 tensor engine, 2.4 GHz (reference/trn2.md)
    nominal_voltage_v: float = 0.85
    throttled_voltage_v: float = 0.75
    sensor_noise_c: float = 0.3
    power_noise_w: float = 3.0
    util_noise_pct: float = 2.0
    runaway_r_factor: float = 3.0  # a failed thermal interface triples the resistance


class ChipTelemetry:
    """Per-chip state arrays; ``metrics()`` is what a fabric reports as telemetry."""

    def __init__(self, n: int, spec: ChipSpec, thermal: ThermalParams, rng: np.random.Generator,
                 firmware_version: str) -> None:
        self.n, self.cores, self.spec, self.p = n, spec.cores, spec, thermal
        f64 = np.float64
        # Inputs set by workloads and faults.
        self.load = np.zeros(n, f64)  # compute load 0..1
        self.comm_load = np.zeros(n, f64)  # share of time on chip-to-chip traffic 0..1
        self.hbm_fraction = np.zeros(n, f64)  # share of HBM a job holds
        self.powered = np.ones(n, bool)  # False: failed (no power draw beyond idle)
        self.r_scale = np.ones(n, f64)  # thermal resistance multiplier (faults, precursors)
        # Metrics: read-only arrays, replaced on change (``bump``, ``put``).
        self.hbm_used_bytes = ro(np.zeros(n, f64))
        self.hbm_bw_bytes_per_s = ro(np.zeros(n, f64))
        self.mem_ecc_corrected = ro(np.zeros(n, np.int64))
        self.mem_ecc_uncorrected = ro(np.zeros(n, np.int64))
        self.sram_ecc_corrected = ro(np.zeros(n, np.int64))
        self.sram_ecc_uncorrected = ro(np.zeros(n, np.int64))
        idle_w = spec.tdp_w * thermal.idle_power_fraction
        self._temp_true = thermal.ambient_c + np.full(n, idle_w) * thermal.r_c_per_w
        # Measurement noise (utilization, power, temperature sensor) is applied lazily:
        # the noisy arrays of the latest sample are built only when someone reads them.
        self._off = 0
        self._lazy: dict[str, np.ndarray] = {}
        self._metrics: dict[str, np.ndarray] | None = None  # ``metrics()`` of the latest sample
        self.voltage_v = ro(np.full(n, thermal.nominal_voltage_v))
        self.clock_mhz = ro(np.full(n, thermal.base_clock_mhz))
        self.throttle = ro(np.zeros(n, bool))
        # Link bytes accumulate lazily: total = acc + rate * (tick clock - t0); the rate
        # changes only with the derived arrays, so a tick costs nothing here.
        self._tx_acc = np.zeros(n, f64)
        self._tx_rate = np.zeros(n, f64)
        self._tx_t0 = 0.0
        self._clock_s = 0.0  # sum of tick dts: the time of the latest sample
        self.link_errors = ro(np.zeros(n, np.int64))
        self.execution_errors = ro(np.zeros(n, np.int64))
        self.firmware_version = ro(np.full(n, firmware_version, dtype="<U32"))
        # Noise comes from banks drawn once from the timeline's RNG, pre-scaled; each tick
        # reads them at a random offset (one RNG call per tick, not n*cores normals).
        # Noise is measurement noise: the thermal model runs on the noise-free power.
        size = max(NOISE_BANK, 2 * n * spec.cores)
        self._bank_util = (np.clip(rng.standard_normal(size), -4.5, 4.5) * thermal.util_noise_pct).astype(np.float32)
        self._bank_temp = rng.standard_normal(size) * thermal.sensor_noise_c
        self._bank_power = rng.standard_normal(size) * thermal.power_noise_w
        self._chip_link_bw = spec.link_bw_bytes_per_s
        self._alpha: tuple[float, float] = (-1.0, 0.0)
        self._offsets = np.empty(0, np.int64)
        self._next_off = 0
        self._rng = rng
        self._any_throttled = False
        # An upper bound of the model temperatures' maximum (``tick``): unknown yet.
        self._temp_bound = math.inf
        # Inlet drift of healthy chips (``background.ThermalDrift``), or None: added to what the
        # sensor reads. It moves over hours, the chip's thermal lag is 30 s, so the lagged and
        # the instant offset differ by millidegrees; throttling acts on the model without it
        # (a few degrees at most, only on chips near the throttle point).
        self.inlet_offset_c: np.ndarray | None = None
        self._tss_alpha_max = math.inf
        self._keep = np.ones(n)  # 1 - alpha over chips (``tick``)
        self._derive()
        self.dirty = False  # set when inputs change: recompute the derived arrays on the next tick

    def bump(self, name: str, chips: int | np.ndarray, amount: int | np.ndarray = 1) -> None:
        """Add to a counter metric (copy-on-write: earlier snapshots keep their values)."""
        a = getattr(self, name).copy()
        a[chips] += amount
        setattr(self, name, ro(a))
        self._metrics = None

    def put(self, name: str, chips: int | np.ndarray, value: object) -> None:
        """Set a metric's value on some chips (copy-on-write)."""
        a = getattr(self, name).copy()
        a[chips] = value
        setattr(self, name, ro(a))
        self._metrics = None

    @property
    def any_throttled(self) -> bool:
        """Whether any chip was throttled at the latest sample (a cheap pre-check)."""
        return self._any_throttled

    @property
    def clock_factor(self) -> np.ndarray:
        return self.clock_mhz / self.p.base_clock_mhz

    @property
    def link_tx_bytes(self) -> np.ndarray:
        tx = self._lazy.get("tx")
        if tx is None:
            tx = self._lazy["tx"] = ro(self._tx_acc + self._tx_rate * (self._clock_s - self._tx_t0))
        return tx

    @property
    def link_rx_bytes(self) -> np.ndarray:
        return self.link_tx_bytes  # ring collectives send and receive alike

    def _derive(self) -> None:
        """Arrays that change only when load, power state, throttling or cooling change."""
        p, spec = self.p, self.spec
        busy = self.load * self.powered
        comm = self.comm_load * self.powered
        cf = np.where(self.throttle, p.throttle_clock, 1.0)
        idle = spec.tdp_w * p.idle_power_fraction
        active = busy > 0
        self._busy_pct = (busy * 100.0).astype(np.float32)
        self._active = active.astype(np.float32)  # a float mask multiplies without casting
        # Both repeated over each chip's cores, flat as the noise bank's slice: a contiguous
        # add and multiply over [chips * cores] cost a fifth of the same operations
        # broadcast from [chips, 1] over [chips, cores] (8 values per inner loop; the same
        # float32 values either way).
        self._busy_cores = np.repeat(self._busy_pct, self.cores)
        self._active_cores = np.repeat(self._active, self.cores)
        self._n_active = int(active.sum())
        # Clip only when noise (bounded at +-4.5 sigma) can leave 0-100.
        span = 4.5 * p.util_noise_pct
        lo = float(self._busy_pct[active].min()) if self._n_active else 100.0
        self._util_clip = self._n_active > 0 and (lo < span or float(self._busy_pct.max()) > 100.0 - span)
        self._power_clean = idle * self.powered + (spec.tdp_w - idle) * np.minimum(1.0, 0.85 * busy + 0.15 * comm) * cf
        self._t_ss = p.ambient_c + self._power_clean * (p.r_c_per_w * self.r_scale)
        self.hbm_used_bytes = ro(self.hbm_fraction * spec.hbm_bytes)
        self.hbm_bw_bytes_per_s = ro(busy * 0.55 * spec.hbm_bw_bytes_per_s * cf)
        self._tx_acc = self.link_tx_bytes
        self._lazy.pop("tx", None)
        self._metrics = None
        self._tx_t0 = self._clock_s
        self._tx_rate = comm * self._chip_link_bw * cf
        self._alpha = (-1.0, 0.0)  # recompute the relaxation terms on the next tick
        self.dirty = False

    # --- noisy readings of the latest sample (lazy) -------------------------------------
    @property
    def neuroncore_utilization(self) -> np.ndarray:
        """Percent per NeuronCore [chips, cores]: busy share plus noise, 0-100; idle reads 0."""
        u = self._lazy.get("util")
        if u is None:
            n, c = self.n, self.cores
            if self._n_active == 0:
                u = np.zeros((n, c), np.float32)
            else:
                u = np.add(self._bank_util[self._off : self._off + n * c], self._busy_cores)
                if self._n_active < n:
                    u *= self._active_cores
                if self._util_clip:
                    np.minimum(u, 100.0, out=u)
                    np.maximum(u, 0.0, out=u)
                u = u.reshape(n, c)
            u = self._lazy["util"] = ro(u)
        return u

    @property
    def power_w(self) -> np.ndarray:
        pw = self._lazy.get("power")
        if pw is None:
            noise = self._bank_power[self._off : self._off + self.n]
            pw = self._power_clean + (noise if self._n_active == self.n else noise * self._active)
            self._lazy["power"] = ro(pw)
        return pw

    @property
    def model_temperature_c(self) -> np.ndarray:
        """The thermal model's temperature (no sensor noise); throttling acts on it."""
        return self._temp_true

    @property
    def temperature_c(self) -> np.ndarray:
        """The sensor reading: the model's temperature plus sensor noise."""
        tc = self._lazy.get("temp")
        if tc is None:
            tc = self._temp_true + self._bank_temp[self._off : self._off + self.n]
            if self.inlet_offset_c is not None:
                tc += self.inlet_offset_c
            self._lazy["temp"] = ro(tc)
        return tc

    def _offset(self) -> int:
        if self._next_off >= self._offsets.size:
            self._offsets = self._rng.integers(0, self._bank_util.size - self.n * self.cores, 4096)
            self._next_off = 0
        off = int(self._offsets[self._next_off])
        self._next_off += 1
        return off

    def tick(self, dt: float, rng: np.random.Generator) -> tuple[bool, np.ndarray, np.ndarray]:
        """Advance every chip by ``dt`` seconds. Returns (derived arrays were recomputed,
        chips whose throttle state changed, chips past the critical temperature).

        Throttling and shutdown act on the model temperature (the on-die controller),
        not on the noisy reading."""
        p = self.p
        self._rng = rng
        recomputed = self.dirty
        if recomputed:
            self._derive()
        self._off = self._offset()
        self._lazy.clear()
        self._metrics = None
        self._clock_s += dt
        # T <- T + (T_ss - T) * alpha, as T * (1 - alpha) + T_ss * alpha with T_ss * alpha cached.
        if self._alpha[0] != dt:
            a = 1.0 - math.exp(-dt / p.tau_s)
            self._alpha = (dt, 1.0 - a)
            self._tss_alpha = self._t_ss * a
            self._tss_alpha_max = float(np.maximum.reduce(self._tss_alpha)) if self.n else -math.inf
            self._keep = np.full(self.n, 1.0 - a)  # an array operand costs less than a scalar
        keep = self._alpha[1]
        temp = self._temp_true
        temp *= self._keep
        temp += self._tss_alpha
        # An upper bound of ``temp.max()`` without reading the array: the same two roundings
        # applied to the last bound (rounding is monotonic, so every chip's new temperature
        # is at most this). Only when it reaches the throttle point is the maximum read
        # (and the bound tightened to it); NaN anywhere makes it NaN, and so read too.
        bound = self._temp_bound * keep + self._tss_alpha_max
        if not self._any_throttled and bound <= p.throttle_c:
            self._temp_bound = bound
            return recomputed, _NONE, _NONE
        tmax = self._temp_bound = float(np.maximum.reduce(temp)) if self.n else -math.inf
        if not self._any_throttled and tmax <= p.throttle_c:
            return recomputed, _NONE, _NONE
        was = self.throttle
        now_thr = np.where(was, temp > p.release_c, temp > p.throttle_c)
        changed = _NONE
        if (now_thr != was).any():
            changed = np.flatnonzero(now_thr != was)
            self.throttle = ro(now_thr)
            self._any_throttled = bool(now_thr.any())
            self.clock_mhz = ro(np.where(now_thr, p.base_clock_mhz * p.throttle_clock, p.base_clock_mhz))
            self.voltage_v = ro(np.where(now_thr, p.throttled_voltage_v, p.nominal_voltage_v))
            self.dirty = True
        critical = np.flatnonzero(temp > p.critical_c) if tmax > p.critical_c else _NONE
        return recomputed, changed, critical

    def metrics(self) -> dict[str, np.ndarray]:
        """Every metric of the latest sample: read-only arrays that are never changed in
        place (safe to keep; copy before modifying).

        The health monitor and the balancer both read every sample: the arrays are looked
        up once per sample (and again after any ``bump``/``put``), each caller gets its own
        dict of them."""
        m = self._metrics
        if m is None:
            m = self._metrics = {name: getattr(self, name) for name in METRIC_NAMES}
        return dict(m)


METRIC_NAMES = (
    "neuroncore_utilization", "hbm_used_bytes", "hbm_bw_bytes_per_s", "mem_ecc_corrected",
    "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected", "temperature_c",
    "power_w", "voltage_v", "clock_mhz", "throttle", "link_tx_bytes", "link_rx_bytes",
    "link_errors", "execution_errors", "firmware_version",
)
