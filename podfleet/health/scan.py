"""Vectorized health scans over a cluster's chips, links, storage mounts and jobs.

One ``HealthScanner.scan`` call evaluates every rule over whole arrays; Python loops
run only over the chips whose alert state *changed* (fire or clear), which is a handful
per scan. Two kinds of rule:

* deviation rules (``baseline.DeviationTracker``): a metric more than 10% off the chip's
  own rolling median for ``hold_s``. Baselines are per operating point: when a chip's
  load changes (a job starts or stops) its baselines restart, so a job start is not an
  anomaly. Thermal resistance ``(T - ambient) / P`` does not depend on load at all.
* threshold rules: uncorrectable ECC, a corrected-ECC rate, throttling, chip and link
  state, link error bursts, a full or failed storage mount, a stalled job.

Health per chip and link is the worst open alert (ok < warning < critical), joined
with the fabric state; ``DescribeClusterHardware`` shows it.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from podfleet.health.alerts import Alert, AlertBook
from podfleet.health.baseline import DeviationBank, DeviationRule
from podfleet.scheduler.samples import same_frozen, util_ratio

SEVERITY = {"ok": 0, "warning": 1, "critical": 2}
HEALTH_NAMES = ("ok", "warning", "critical")
# Fabric chip state codes (podfleet.fabric.base.ChipState order).
_CHIP_STATES = ("healthy", "degraded", "failed", "isolated", "updating")
_LINK_STATES = ("up", "degraded", "down")


@dataclass(frozen=True)
class HealthConfig:
    interval_s: float = 2.0
    hold_s: float = 30.0
    rel: float = 0.10
    window: int = 60  # samples in a baseline
    refresh_every: int = 5  # recompute medians every N scans
    ambient_c: float = 35.0  # inlet temperature (a sensor on real racks; the twin's default)
    ecc_rate_warn_per_min: float = 5.0
    link_error_burst: int = 10  # new link errors within one scan
    mount_full_ratio: float = 0.90
    job_stall_s: float = 120.0  # at least; a job's bar is also STALL_STEPS of its own steps
    # job-slow's hysteresis: a real job's tokens/s is noisy around any bar (a local worker
    # shares its cores), so one sample under it must not open the alert nor one over it
    # close it. Open after this many scans in a row more than ``rel`` under the median;
    # close after this many in a row within ``rel / 2`` of it (the higher bar).
    job_slow_open_scans: int = 3
    job_slow_close_scans: int = 3
    load_change: float = 0.2  # utilization change that starts a new operating point
    settle_s: float = 180.0  # after a new operating point: ~6 thermal time constants
    deviation_metrics: tuple[tuple[str, str, float], ...] = (
        # metric, direction, floor (below which absolute noise dominates)
        ("temperature_c", "up", 1.0),
        ("power_w", "both", 10.0),
        ("clock_mhz", "down", 1.0),
        ("thermal_resistance", "up", 0.01),
    )


@dataclass
class ScanResult:
    t: float
    fired: list[Alert] = field(default_factory=list)
    resolved: list[Alert] = field(default_factory=list)
    chip_health: np.ndarray | None = None  # int8 severity per chip
    link_health: np.ndarray | None = None

    def opened(self, fired: tuple[Alert, bool]) -> None:
        """What ``AlertBook.fire`` answered: kept when it opened the alert (not when it only
        refreshed one already open)."""
        alert, new = fired
        if new:
            self.fired.append(alert)

    def closed(self, alert: Alert | None) -> None:
        """What ``AlertBook.clear`` answered: the alert it resolved, if one was open."""
        if alert is not None:
            self.resolved.append(alert)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal contents of two arrays of one dtype and shape (bytes: far cheaper than a
    numpy comparison for the small arrays of a pod, and no worse for a fleet's)."""
    return a.tobytes() == b.tobytes()


class _MaskRule:
    """Open/close alerts for one rule from a boolean mask over targets."""

    def __init__(self, name: str, severity: str, prefix: str, n: int, flag: list[bool] | None = None) -> None:
        self.name, self.severity, self.prefix = name, severity, prefix
        self.active = np.zeros(n, dtype=bool)
        self.on = False  # some target is alerting
        # Raised when a target opens or closes; shared by the rules health is derived
        # from, so one read tells the scan whether any of them changed.
        self.flag = [True] if flag is None else flag
        self.flag[0] = True

    def apply(self, book: AlertBook, cluster_id: str, mask: np.ndarray, now: float, res: ScanResult,
              message: Any, values: np.ndarray | None = None, names: Sequence[str] | None = None) -> None:
        mask = np.asarray(mask, bool)
        if mask.shape == self.active.shape and _same(mask, self.active):
            return  # the common case: nothing opened or closed
        self.flag[0] = True
        new = mask & ~self.active
        gone = self.active & ~mask
        for i in np.flatnonzero(new).tolist():
            target = f"{self.prefix}:{names[i] if names is not None else i}"
            v = None if values is None else float(values[i])
            res.opened(book.fire(cluster_id=cluster_id, target=target, rule=self.name,
                                 severity=self.severity, message=message(i, v), now=now, value=v))
        for i in np.flatnonzero(gone).tolist():
            target = f"{self.prefix}:{names[i] if names is not None else i}"
            res.closed(book.clear(cluster_id, target, self.name, now))
        self.active = mask.copy()
        self.on = bool(mask.any())


def _finite(a: np.ndarray) -> np.ndarray:
    """``np.nan_to_num`` without its cost when there is nothing to replace."""
    return a if np.isfinite(a).all() else np.nan_to_num(a)


class _Throughputs:
    """A job's last ``keep`` throughput samples, in order and sorted (the median each scan
    without a sort: the middle value, or the halved sum of the two middle ones, as
    ``np.median`` gives it)."""

    __slots__ = ("_median", "keep", "order", "sorted")

    def __init__(self, keep: int = 60) -> None:
        self.keep = keep
        self.order: deque[float] = deque()
        self.sorted: list[float] = []
        self._median: float | None = None  # of ``sorted`` as it is, once asked

    def __len__(self) -> int:
        return len(self.order)

    def add(self, x: float) -> None:
        order = self.order
        order.append(x)
        if len(order) > self.keep:
            old = order.popleft()
            if old == x:  # a steady job: the same value in and out, the same sorted values
                return
            del self.sorted[bisect.bisect_left(self.sorted, old)]
        bisect.insort(self.sorted, x)
        self._median = None

    def median(self) -> float:
        m = self._median
        if m is None:
            s, k = self.sorted, len(self.sorted)
            m = self._median = float(s[k // 2]) if k % 2 else (s[k // 2 - 1] + s[k // 2]) / 2
        return m


# A running job is stalled after this many of its own step times without a step (and at
# least ``HealthConfig.job_stall_s``).
STALL_STEPS = 3


class _JobWatch:
    """What the scan keeps per job: its alert target, its last step and when the stall
    clock started (the later of that step's first sight and the job's last start or
    resume), its recent throughputs (one object per job: fewer lookups a scan)."""

    __slots__ = ("gap_s", "good_scans", "moved_t", "slow_scans", "step", "target", "tps")

    def __init__(self, job_id: str, step: float, now: float) -> None:
        self.target = f"job:{job_id}"
        self.step = step
        self.moved_t = now
        self.gap_s = 0.0  # how long its last step took, as the scan saw it
        self.tps = _Throughputs(60)
        self.slow_scans = 0  # scans in a row under the open bar (job-slow's hysteresis)
        self.good_scans = 0  # scans in a row over the close bar while job-slow is open


def thermal_inputs(chip: Mapping[str, np.ndarray], ambient_c: float | np.ndarray,
                   floor_w: float | np.ndarray = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(temperature rise over ambient, power floored at 1 W) per chip, float64: the thermal
    resistance is their ratio. The scanner and the failure predictor both read them from
    the same sample: the health monitor computes them once for both (passing ``ambient_c``
    and ``floor_w`` as arrays over chips: the same values, cheaper operands than scalars)."""
    rise = np.subtract(np.asarray(chip["temperature_c"], np.float64), ambient_c)
    return rise, np.maximum(np.asarray(chip["power_w"], np.float64), floor_w)


class HealthScanner:
    def __init__(self, cluster_id: str, n_chips: int, n_links: int, book: AlertBook,
                 config: HealthConfig | None = None) -> None:
        self.cluster_id = cluster_id
        self.n_chips, self.n_links = n_chips, n_links
        self.link_names: list[str] | None = None  # "A-B" per link index; None: indices
        self.book = book
        self.cfg = cfg = config or HealthConfig()
        # Every deviation metric is one row of one bank: one numpy pass per scan for all.
        self.dev_metrics = tuple(m for m, _d, _f in cfg.deviation_metrics)
        self.deviation = DeviationBank(
            [DeviationRule(m, rel=cfg.rel, floor=floor, hold_s=cfg.hold_s, direction=d)
             for m, d, floor in cfg.deviation_metrics],
            n_chips, window=cfg.window, refresh_every=cfg.refresh_every)
        self._values = np.zeros((len(self.dev_metrics), n_chips))
        # Where each row's values come from: a chip metric, or None (thermal resistance).
        self._sources = [(j, None if m == "thermal_resistance" else m) for j, m in enumerate(self.dev_metrics)]
        self._health_flag = [True]  # some rule of ``_all_rules`` changed since ``_health`` last ran
        flag = self._health_flag
        self._dev_rules = {m: _MaskRule(f"deviation:{m}", "warning", "chip", n_chips, flag) for m in self.dev_metrics}
        self._dev_active = np.zeros((len(self.dev_metrics), n_chips), bool)
        c = n_chips
        self._rules = {name: _MaskRule(name, severity, prefix, n, flag) for name, severity, prefix, n in (
            ("ecc-uncorrected", "critical", "chip", c),
            ("ecc-corrected-rate", "warning", "chip", c),
            ("thermal-throttle", "warning", "chip", c),
            ("chip-down", "critical", "chip", c),
            ("chip-degraded", "warning", "chip", c),
            ("link-down", "critical", "link", n_links),
            ("link-degraded", "warning", "link", n_links),
            ("link-errors", "warning", "link", n_links),
        )}
        self._all_rules = (*self._dev_rules.values(), *self._rules.values())
        self._mount_rules: dict[str, _MaskRule] = {}
        self._job_rules: dict[str, _MaskRule] = {}
        self._mounts_key: tuple[Any, ...] | None = None
        self._prev_unc: np.ndarray | None = None
        self._unc_key: tuple[bytes, bytes] | None = None
        self._unc_seen_t = np.full(n_chips, -np.inf)
        self._unc_last = -np.inf  # the latest time any chip's uncorrected count rose
        self._ecc_hist: deque[tuple[float, np.ndarray, bytes]] = deque()
        self._prev_link_err: np.ndarray | None = None
        self._prev_link_raw: bytes | None = None
        # The metric arrays the last scan read (a fabric replaces them on change, read-only).
        self._unc_src: tuple[Any, ...] = ()
        self._corr_src: tuple[Any, ...] = ()
        self._link_src: tuple[Any, ...] = ()
        self._thr_src: tuple[Any, ...] = ()
        self._burst_t = np.full(n_links, -np.inf)
        self._burst_last = -np.inf
        self._prev_util: np.ndarray | None = None
        self._settle_until = np.full(n_chips, -np.inf)
        self._settle_last = -np.inf  # the latest settle end of any chip
        self._was_settling = np.zeros(n_chips, bool)
        self._job_watch: dict[str, _JobWatch] = {}  # job -> its last step, when it moved, throughputs
        self.chip_health = np.zeros(n_chips, np.int8)
        self.link_health = np.zeros(n_links, np.int8)
        self._health_key: tuple[bytes, bytes | None] | None = None
        # Chip and link states of the last scan (their rules only change when they do).
        self._states_key: bytes | None = None
        self._usable = np.zeros(n_chips, bool)
        self._all_usable = False
        self._lstates_key: bytes | None = None
        self._no_chips = np.zeros(n_chips, bool)
        self._no_chips.flags.writeable = False
        self._no_chips_bytes = self._no_chips.tobytes()
        self._du = np.zeros(n_chips)  # utilization change, and whether it moved (per scan)
        self._moved = np.zeros(n_chips, bool)
        # ``load_change`` over chips: an array operand costs less than a Python float.
        self._load_change = np.full(n_chips, cfg.load_change)
        self._no_links = np.zeros(n_links, bool)
        self._no_links.flags.writeable = False
        self.scans = 0

    # --- the scan -------------------------------------------------------------------
    def scan(self, now: float, chip: Mapping[str, np.ndarray], chip_states: np.ndarray,
             link: Mapping[str, np.ndarray] | None = None, link_states: np.ndarray | None = None,
             mounts: Sequence[Mapping[str, Any]] = (), jobs: Mapping[str, Mapping[str, Any]] | None = None,
             util: np.ndarray | None = None, rise: np.ndarray | None = None,
             power_floor: np.ndarray | None = None, pace: float = 1.0) -> ScanResult:
        """``pace``: timeline seconds per wall second (a served plane's speed): a stall
        is measured on the wall clock. ``chip``: the fabric's chip metrics; ``chip_states``: state codes over chips
        (``ChipState`` order); ``link``/``link_states`` likewise; ``mounts``: dicts with
        name, state, used_bytes, capacity_bytes; ``jobs``: job id -> {state, step,
        tokens_per_s}; ``util``: ``util_ratio(chip)`` when the caller has it already;
        ``rise``/``power_floor``: ``thermal_inputs(chip, ambient_c)`` likewise."""
        cfg, book, cid = self.cfg, self.book, self.cluster_id
        res = ScanResult(now)
        self.scans += 1
        states = np.asarray(chip_states)
        skey = states.tobytes()
        states_changed = skey != self._states_key
        if states_changed:
            self._usable = states <= 1
            self._all_usable = bool(self._usable.all())
        usable = self._usable
        if util is None:
            util = util_ratio(chip)
        # A new operating point (load changed, chip not usable): baselines restart once
        # temperatures have settled, so a job start or stop is not an anomaly.
        prev_util = self._prev_util
        if prev_util is None:
            moved = np.ones(self.n_chips, bool)
        else:
            # ``abs(util - prev_util) > load_change`` into the scan's own buffers (no
            # temporaries; ``moved`` is not kept past this scan).
            du, moved = self._du, self._moved
            np.subtract(util, prev_util, out=du)
            np.abs(du, out=du)
            np.greater(du, self._load_change, out=moved)
            if not self._all_usable:
                moved |= ~usable
        if moved.tobytes() != self._no_chips_bytes:  # ``moved.any()`` without a reduction
            self._settle_until[moved] = now + cfg.settle_s
            self._settle_last = now + cfg.settle_s
        if self._settle_last > now:
            settling = self._settle_until > now
        else:  # nobody settles (the common case)
            settling = self._no_chips
        # What a chip learned while settling is forgotten once it has settled (one reset
        # per operating-point change, not one per scan).
        if settling is not self._was_settling:
            ended = self._was_settling & ~settling
            if ended.any():
                self.deviation.reset(ended)
        self._was_settling = settling
        self._prev_util = util
        values = self._values
        for j, m in self._sources:
            if m is None:  # thermal resistance
                if rise is None or power_floor is None:
                    rise, power_floor = thermal_inputs(chip, cfg.ambient_c)
                np.divide(rise, power_floor, out=values[j])
            else:
                values[j] = chip[m]
        alerting, base = self.deviation.observe(values, now)
        if alerting is not self.deviation.quiet:
            alerting = alerting & (usable & ~settling)
        # The bank's shared quiet mask again (the common case) is no change: no byte compare.
        if alerting is not self._dev_active and not _same(alerting, self._dev_active):
            self._dev_active = alerting
            for j, (m, rule) in enumerate(self._dev_rules.items()):
                rule.apply(book, cid, alerting[j], now, res, values=values[j],
                           message=lambda i, v, m=m, b=base[j]: f"{m} {v:.4g} is more than {cfg.rel:.0%} off its "
                           f"baseline {b[i]:.4g} for {cfg.hold_s:.0f} s")
        # ECC: uncorrected errors are critical until the chip is repaired (state change).
        # Counters a fabric has not reported yet are NaN (a real host before its first
        # report): as zero, so the first report that shows an error raises the alert.
        raw_unc = (chip["mem_ecc_uncorrected"], chip["sram_ecc_uncorrected"])
        moved_unc = False  # the very arrays of the last scan, read-only: the same counts
        if not same_frozen(raw_unc, self._unc_src):
            self._unc_src = raw_unc
            mem_unc = np.asarray(raw_unc[0], np.float64)
            sram_unc = np.asarray(raw_unc[1], np.float64)
            ukey = (mem_unc.tobytes(), sram_unc.tobytes())
            moved_unc = ukey != self._unc_key
        if moved_unc:  # the counters moved (else nothing rose)
            self._unc_key = ukey
            unc = _finite(mem_unc) + _finite(sram_unc)
            # Errors a chip already had at the first scan are news too (a real host's
            # counters predate the control plane).
            prev_unc = self._prev_unc
            rose = unc > (0.0 if prev_unc is None else prev_unc)
            if rose.any():
                self._unc_seen_t[rose] = now
                self._unc_last = now
            self._prev_unc = unc
        unc = self._prev_unc
        rule = self._rules["ecc-uncorrected"]
        if now - self._unc_last < 600.0 or rule.on:
            rule.apply(book, cid, (now - self._unc_seen_t < 600.0) & (states != 3), now, res, values=unc,
                       message=lambda i, v: f"uncorrectable ECC error (total {v:.0f})")
        raw_corr = chip["mem_ecc_corrected"]
        hist = self._ecc_hist
        if hist and same_frozen((raw_corr,), self._corr_src):
            _t, corr, cbytes = hist[-1]
        else:
            self._corr_src = (raw_corr,)
            corr = np.asarray(raw_corr, np.float64)
            cbytes = corr.tobytes()
        hist.append((now, corr, cbytes))
        while hist and hist[0][0] < now - 60.0:
            hist.popleft()
        t0, c0, c0bytes = hist[0]
        rule = self._rules["ecc-corrected-rate"]
        if cfg.ecc_rate_warn_per_min >= 0 and cbytes == c0bytes:  # no new error in a minute
            if rule.on:
                rule.apply(book, cid, self._no_chips, now, res, message=None)
        else:
            rate = (corr - c0) / max(now - t0, cfg.interval_s) * 60.0
            rule.apply(book, cid, rate > cfg.ecc_rate_warn_per_min, now, res, values=rate,
                       message=lambda i, v: f"corrected ECC errors at {v:.1f}/min")
        raw_thr = (chip["throttle"],)
        if not same_frozen(raw_thr, self._thr_src):  # the very array of the last scan: no change
            self._thr_src = raw_thr
            # A fabric that cannot see throttling reports NaN: not throttling (NaN as a bool is True).
            throttled = np.nan_to_num(np.asarray(raw_thr[0], np.float64)) > 0
            self._rules["thermal-throttle"].apply(
                book, cid, throttled, now, res, values=np.asarray(chip["temperature_c"], np.float64),
                message=lambda i, v: f"throttling at {v:.1f} C")
        if states_changed:
            self._states_key = skey
            self._rules["chip-down"].apply(
                book, cid, (states == 2) | (states == 3), now, res, values=states,
                message=lambda i, v: f"chip {_CHIP_STATES[int(v)]}")
            self._rules["chip-degraded"].apply(
                book, cid, states == 1, now, res, message=lambda i, v: "chip degraded")
        if link is not None and link_states is not None and self.n_links:
            self._scan_links(now, link, np.asarray(link_states), res)
        if mounts:
            self._scan_mounts(now, mounts, res)
        if jobs is not None:
            self._scan_jobs(now, jobs, res, pace)
        self._health(states, skey, None if link_states is None else np.asarray(link_states))
        res.chip_health, res.link_health = self.chip_health, self.link_health
        return res

    def _scan_links(self, now: float, link: Mapping[str, np.ndarray], st: np.ndarray, res: ScanResult) -> None:
        book, cid = self.book, self.cluster_id
        src = (link["errors"],)
        if same_frozen(src, self._link_src) and self.cfg.link_error_burst > 0:
            rkey = self._prev_link_raw  # the very array of the last scan, read-only
        else:
            self._link_src = src
            raw = np.asarray(src[0], np.float64)
            rkey = raw.tobytes()
        if rkey != self._prev_link_raw or self.cfg.link_error_burst <= 0:
            # A fabric that does not measure link errors reports NaN: no errors seen.
            err = _finite(raw).astype(np.int64)
            if self._prev_link_err is not None:
                burst = (err - self._prev_link_err) >= self.cfg.link_error_burst
                if burst.any():
                    # A burst keeps its alert for a minute of quiet (flaps come in clusters).
                    self._burst_t[burst] = now
                    self._burst_last = now
            self._prev_link_err = err
            self._prev_link_raw = rkey
        names = self.link_names
        rule = self._rules["link-errors"]
        if now - self._burst_last < 60.0 or rule.on:
            rule.apply(book, cid, now - self._burst_t < 60.0, now, res, values=self._prev_link_err, names=names,
                       message=lambda i, v: f"link error burst (total {v:.0f})")
        lkey = st.tobytes()
        if lkey != self._lstates_key:
            self._lstates_key = lkey
            self._rules["link-down"].apply(book, cid, st == 2, now, res, names=names,
                                           message=lambda i, v: "link down")
            self._rules["link-degraded"].apply(book, cid, st == 1, now, res, names=names,
                                               message=lambda i, v: "link degraded (reduced width)")

    def _scan_mounts(self, now: float, mounts: Sequence[Mapping[str, Any]], res: ScanResult) -> None:
        # The same mounts in the same state as the last scan: no alert can open or close.
        seen = tuple((m["name"], m.get("state"), m.get("used_bytes"), m.get("capacity_bytes")) for m in mounts)
        if seen == self._mounts_key:
            return
        self._mounts_key = seen
        names = [str(m["name"]) for m in mounts]
        used = np.array([float(m.get("used_bytes", 0)) for m in mounts])
        cap = np.array([max(float(m.get("capacity_bytes", 1)), 1.0) for m in mounts])
        bad = np.array([str(m.get("state", "ok")) != "ok" for m in mounts])
        ratio = used / cap
        for rule, sev, mask, msg in (
            ("mount-unavailable", "critical", bad, lambda i, v: f"mount {names[i]} is not ok"),
            ("mount-full", "warning", ratio > self.cfg.mount_full_ratio, lambda i, v: f"mount {names[i]} {v:.0%} full"),
        ):
            key = f"{rule}:{','.join(names)}"
            r = self._mount_rules.get(key)
            if r is None:
                r = self._mount_rules[key] = _MaskRule(rule, sev, "mount", len(names))
            r.apply(self.book, self.cluster_id, mask, now, res, values=ratio, names=names, message=msg)

    def _scan_jobs(self, now: float, jobs: Mapping[str, Mapping[str, Any]], res: ScanResult,
                   pace: float = 1.0) -> None:
        """Stalled (running, no step for ``job_stall_s`` wall seconds since its last step or its
        last start or resume, whichever is later: time queued never counts) and slow (tokens/s
        > 10% under its median of the last samples) jobs.

        Wall seconds, not timeline seconds: on a demo at 20x a real local job's 10 s worker
        start is 200 timeline seconds, and it was reported stalled before its first step.
        (A twin job's reported step time is timeline seconds, so at a speed above 1 its bar is
        laxer than three steps: never a false alert.)"""
        book, cid, cfg = self.book, self.cluster_id, self.cfg
        watch = self._job_watch
        is_open, stall_s, keep = book.is_open, cfg.job_stall_s, 1 - cfg.rel  # looked up once a scan
        recovered, open_n, close_n = 1 - cfg.rel / 2, cfg.job_slow_open_scans, cfg.job_slow_close_scans
        for job_id, j in jobs.items():
            step = float(j.get("step", 0))
            w = watch.get(job_id)
            if w is None:
                w = watch[job_id] = _JobWatch(job_id, step, now)
            elif step != w.step:
                if not is_open(cid, w.target, "job-stalled"):  # a stall's end is no step length
                    w.gap_s = now - w.moved_t
                w.step, w.moved_t = step, now
            state = j.get("state", "")
            running = state == "RUNNING" or str(state).lower() == "running"  # no ``lower()`` when upper
            if not running:
                # Queued, placing, recovering, checkpointing: no step is due, so the stall
                # clock starts over when the job (re)starts running, not at its submit.
                w.moved_t = now
            moved_t = w.moved_t
            target = w.target
            # A job whose steps are long (a 70B model's 4-minute step) is not stalled between
            # two of them: the bar is the larger of the setting and three of its own steps
            # (the step time it reports, or the last step the scan saw).
            bar_s = max(stall_s, STALL_STEPS * max(float(j.get("step_time_s") or 0.0), w.gap_s / pace))
            idle_s = (now - moved_t) / pace
            if running and idle_s >= bar_s:
                res.opened(book.fire(cluster_id=cid, target=target, rule="job-stalled", severity="critical",
                                     message=f"no training step for {idle_s:.0f} s", now=now))
            elif is_open(cid, target, "job-stalled"):
                res.closed(book.clear(cid, target, "job-stalled", now))
            tps = float(j.get("tokens_per_s") or 0.0)
            hist = w.tps
            if running and tps > 0:
                base = hist.median() if len(hist.sorted) >= 10 else None  # no ``__len__`` call per job
                slow = base is not None and tps < keep * base
                if not slow:
                    hist.add(tps)
                w.slow_scans = w.slow_scans + 1 if slow else 0
                if is_open(cid, target, "job-slow"):
                    good = base is None or tps >= recovered * base
                    w.good_scans = w.good_scans + 1 if good else 0
                    if w.good_scans >= close_n:
                        res.closed(book.clear(cid, target, "job-slow", now))
                        w.good_scans = 0
                    elif slow:  # still open: the message follows the last slow sample
                        book.fire(cluster_id=cid, target=target, rule="job-slow", severity="warning",
                                  message=f"{tps:.4g} tokens/s is more than {cfg.rel:.0%} under {base:.4g}",
                                  now=now, value=tps)
                elif slow and w.slow_scans >= open_n:
                    w.good_scans = 0
                    res.opened(book.fire(cluster_id=cid, target=target, rule="job-slow", severity="warning",
                                         message=f"{tps:.4g} tokens/s is more than {cfg.rel:.0%} under {base:.4g}",
                                         now=now, value=tps))
        # Every job seen this scan is in ``watch`` now: more entries means some left
        # (no set difference built at every scan).
        for gone in [g for g in watch if g not in jobs] if len(watch) > len(jobs) else ():
            watch.pop(gone, None)
            for rule in ("job-stalled", "job-slow"):
                res.closed(book.clear(cid, f"job:{gone}", rule, now))

    def _health(self, states: np.ndarray, skey: bytes, link_states: np.ndarray | None) -> None:
        rules = self._all_rules
        key = (skey, None if link_states is None else link_states.tobytes())
        if key == self._health_key and not self._health_flag[0]:
            return  # no rule changed (the flag they share), nor any state
        self._health_key = key
        self._health_flag[0] = False
        sev = np.zeros(self.n_chips, np.int8)
        for r in rules:
            if r.prefix == "chip":
                np.maximum(sev, np.where(r.active, SEVERITY[r.severity], 0).astype(np.int8), out=sev)
        np.maximum(sev, np.where((states == 2) | (states == 3), 2, np.where(states == 1, 1, 0)).astype(np.int8), out=sev)
        self.chip_health = sev
        lsev = np.zeros(self.n_links, np.int8)
        for r in self._rules.values():
            if r.prefix == "link":
                np.maximum(lsev, np.where(r.active, SEVERITY[r.severity], 0).astype(np.int8), out=lsev)
        if link_states is not None:
            np.maximum(lsev, np.where(link_states == 2, 2, np.where(link_states == 1, 1, 0)).astype(np.int8), out=lsev)
        self.link_health = lsev

    def chip_health_names(self) -> list[str]:
        return [HEALTH_NAMES[int(s)] for s in self.chip_health]

    def link_health_names(self) -> list[str]:
        return [HEALTH_NAMES[int(s)] for s in self.link_health]
