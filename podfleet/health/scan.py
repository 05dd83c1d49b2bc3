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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from podfleet.health.alerts import Alert, AlertBook
from podfleet.health.baseline import DeviationRule, DeviationTracker

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
    job_stall_s: float = 120.0
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


class _MaskRule:
    """Open/close alerts for one rule from a boolean mask over targets."""

    def __init__(self, name: str, severity: str, prefix: str, n: int) -> None:
        self.name, self.severity, self.prefix = name, severity, prefix
        self.active = np.zeros(n, dtype=bool)
        self.changed = True

    def apply(self, book: AlertBook, cluster_id: str, mask: np.ndarray, now: float, res: ScanResult,
              message: Any, values: np.ndarray | None = None, names: Sequence[str] | None = None) -> None:
        if np.array_equal(mask, self.active):
            return  # the common case: nothing opened or closed
        self.changed = True
        new = mask & ~self.active
        gone = self.active & ~mask
        for i in np.flatnonzero(new).tolist():
            target = f"{self.prefix}:{names[i] if names is not None else i}"
            v = None if values is None else float(values[i])
            alert, is_new = book.fire(cluster_id=cluster_id, target=target, rule=self.name,
                                      severity=self.severity, message=message(i, v), now=now, value=v)
            if is_new:
                res.fired.append(alert)
        for i in np.flatnonzero(gone).tolist():
            target = f"{self.prefix}:{names[i] if names is not None else i}"
            a = book.clear(cluster_id, target, self.name, now)
            if a is not None:
                res.resolved.append(a)
        self.active = mask.copy()


class HealthScanner:
    def __init__(self, cluster_id: str, n_chips: int, n_links: int, book: AlertBook,
                 config: HealthConfig | None = None) -> None:
        self.cluster_id = cluster_id
        self.n_chips, self.n_links = n_chips, n_links
        self.link_names: list[str] | None = None  # "A-B" per link index; None: indices
        self.book = book
        self.cfg = cfg = config or HealthConfig()
        self.trackers = {
            m: DeviationTracker(DeviationRule(m, rel=cfg.rel, floor=floor, hold_s=cfg.hold_s, direction=d),
                                n_chips, window=cfg.window, refresh_every=cfg.refresh_every, offset=i)
            for i, (m, d, floor) in enumerate(cfg.deviation_metrics)
        }
        self._dev_rules = {m: _MaskRule(f"deviation:{m}", "warning", "chip", n_chips) for m in self.trackers}
        c = n_chips
        self._rules = {
            "ecc-uncorrected": _MaskRule("ecc-uncorrected", "critical", "chip", c),
            "ecc-corrected-rate": _MaskRule("ecc-corrected-rate", "warning", "chip", c),
            "thermal-throttle": _MaskRule("thermal-throttle", "warning", "chip", c),
            "chip-down": _MaskRule("chip-down", "critical", "chip", c),
            "chip-degraded": _MaskRule("chip-degraded", "warning", "chip", c),
            "link-down": _MaskRule("link-down", "critical", "link", n_links),
            "link-degraded": _MaskRule("link-degraded", "warning", "link", n_links),
            "link-errors": _MaskRule("link-errors", "warning", "link", n_links),
        }
        self._mount_rules: dict[str, _MaskRule] = {}
        self._job_rules: dict[str, _MaskRule] = {}
        self._prev_unc: np.ndarray | None = None
        self._unc_seen_t = np.full(n_chips, -np.inf)
        self._ecc_hist: list[tuple[float, np.ndarray]] = []
        self._prev_link_err: np.ndarray | None = None
        self._burst_t = np.full(n_links, -np.inf)
        self._prev_util: np.ndarray | None = None
        self._settle_until = np.full(n_chips, -np.inf)
        self._was_settling = np.zeros(n_chips, bool)
        self._job_last: dict[str, tuple[float, float]] = {}  # job -> (last step, time it moved)
        self._job_tps: dict[str, list[float]] = {}
        self.chip_health = np.zeros(n_chips, np.int8)
        self.link_health = np.zeros(n_links, np.int8)
        self._health_key: tuple[bytes, bytes | None] | None = None
        self.scans = 0

    # --- the scan -------------------------------------------------------------------
    def scan(self, now: float, chip: Mapping[str, np.ndarray], chip_states: np.ndarray,
             link: Mapping[str, np.ndarray] | None = None, link_states: np.ndarray | None = None,
             mounts: Sequence[Mapping[str, Any]] = (), jobs: Mapping[str, Mapping[str, Any]] | None = None,
             ) -> ScanResult:
        """``chip``: the fabric's chip metrics; ``chip_states``: state codes over chips
        (``ChipState`` order); ``link``/``link_states`` likewise; ``mounts``: dicts with
        name, state, used_bytes, capacity_bytes; ``jobs``: job id -> {state, step,
        tokens_per_s}."""
        cfg, book, cid = self.cfg, self.book, self.cluster_id
        res = ScanResult(now)
        self.scans += 1
        states = np.asarray(chip_states)
        usable = states <= 1
        temp = np.asarray(chip["temperature_c"], np.float64)
        power = np.asarray(chip["power_w"], np.float64)
        util = np.asarray(chip["neuroncore_utilization"], np.float64)
        util = util.mean(axis=1) / 100.0 if util.ndim == 2 else util / 100.0
        # A new operating point (load changed, chip not usable): baselines restart once
        # temperatures have settled, so a job start or stop is not an anomaly.
        moved = ~usable if self._prev_util is None else \
            (np.abs(util - self._prev_util) > cfg.load_change) | ~usable
        if self._prev_util is None:
            moved[:] = True
        self._settle_until[moved] = now + cfg.settle_s
        settling = self._settle_until > now
        # What a chip learned while settling is forgotten once it has settled (one reset
        # per operating-point change, not one per scan).
        ended = self._was_settling & ~settling
        if ended.any():
            for tr in self.trackers.values():
                tr.reset(ended)
        self._was_settling = settling
        self._prev_util = util
        values = {
            "temperature_c": temp, "power_w": power, "clock_mhz": np.asarray(chip["clock_mhz"], np.float64),
            "thermal_resistance": (temp - cfg.ambient_c) / np.maximum(power, 1.0),
        }
        for m, tr in self.trackers.items():
            alerting, base = tr.observe(values[m], now)
            alerting &= usable & ~settling
            self._dev_rules[m].apply(
                book, cid, alerting, now, res, values=values[m],
                message=lambda i, v, m=m, base=base: f"{m} {v:.4g} is more than {cfg.rel:.0%} off its "
                f"baseline {base[i]:.4g} for {cfg.hold_s:.0f} s")
        # ECC: uncorrected errors are critical until the chip is repaired (state change).
        # Counters a fabric has not reported yet are NaN (a real host before its first
        # report): as zero, so the first report that shows an error raises the alert.
        unc = np.nan_to_num(np.asarray(chip["mem_ecc_uncorrected"], np.float64)) + \
            np.nan_to_num(np.asarray(chip["sram_ecc_uncorrected"], np.float64))
        # Errors a chip already had at the first scan are news too (a real host's counters
        # predate the control plane).
        self._unc_seen_t[unc > (0.0 if self._prev_unc is None else self._prev_unc)] = now
        self._prev_unc = unc
        self._rules["ecc-uncorrected"].apply(
            book, cid, (now - self._unc_seen_t < 600.0) & (states != 3), now, res, values=unc,
            message=lambda i, v: f"uncorrectable ECC error (total {v:.0f})")
        corr = np.asarray(chip["mem_ecc_corrected"], np.float64)
        self._ecc_hist.append((now, corr))
        while self._ecc_hist and self._ecc_hist[0][0] < now - 60.0:
            self._ecc_hist.pop(0)
        t0, c0 = self._ecc_hist[0]
        rate = (corr - c0) / max(now - t0, cfg.interval_s) * 60.0
        self._rules["ecc-corrected-rate"].apply(
            book, cid, rate > cfg.ecc_rate_warn_per_min, now, res, values=rate,
            message=lambda i, v: f"corrected ECC errors at {v:.1f}/min")
        self._rules["thermal-throttle"].apply(
            book, cid, np.asarray(chip["throttle"], bool), now, res, values=temp,
            message=lambda i, v: f"throttling at {v:.1f} C")
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
            self._scan_jobs(now, jobs, res)
        self._health(states, None if link_states is None else np.asarray(link_states))
        res.chip_health, res.link_health = self.chip_health, self.link_health
        return res

    def _scan_links(self, now: float, link: Mapping[str, np.ndarray], st: np.ndarray, res: ScanResult) -> None:
        book, cid = self.book, self.cluster_id
        # A fabric that does not measure link errors reports NaN: no errors seen.
        err = np.nan_to_num(np.asarray(link["errors"], np.float64)).astype(np.int64)
        burst = np.zeros(self.n_links, bool) if self._prev_link_err is None else \
            (err - self._prev_link_err) >= self.cfg.link_error_burst
        self._prev_link_err = err
        # A burst keeps its alert for a minute of quiet (flaps come in clusters).
        self._burst_t[burst] = now
        names = self.link_names
        self._rules["link-errors"].apply(book, cid, now - self._burst_t < 60.0, now, res, values=err, names=names,
                                         message=lambda i, v: f"link error burst (total {v:.0f})")
        self._rules["link-down"].apply(book, cid, st == 2, now, res, names=names, message=lambda i, v: "link down")
        self._rules["link-degraded"].apply(book, cid, st == 1, now, res, names=names,
                                           message=lambda i, v: "link degraded (reduced width)")

    def _scan_mounts(self, now: float, mounts: Sequence[Mapping[str, Any]], res: ScanResult) -> None:
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

    def _scan_jobs(self, now: float, jobs: Mapping[str, Mapping[str, Any]], res: ScanResult) -> None:
        """Stalled (running, no step for ``job_stall_s``) and slow (tokens/s > 10% under its
        median of the last samples) jobs."""
        book, cid, cfg = self.book, self.cluster_id, self.cfg
        for job_id, j in jobs.items():
            step = float(j.get("step", 0))
            last = self._job_last.get(job_id)
            if last is None or step != last[0]:
                self._job_last[job_id] = (step, now)
            moved_t = self._job_last[job_id][1]
            running = str(j.get("state", "")).lower() == "running"
            target = f"job:{job_id}"
            if running and now - moved_t >= cfg.job_stall_s:
                a, new = book.fire(cluster_id=cid, target=target, rule="job-stalled", severity="critical",
                                   message=f"no training step for {now - moved_t:.0f} s", now=now)
                if new:
                    res.fired.append(a)
            elif book.is_open(cid, target, "job-stalled"):
                stalled_cleared = book.clear(cid, target, "job-stalled", now)
                if stalled_cleared is not None:
                    res.resolved.append(stalled_cleared)
            tps = float(j.get("tokens_per_s") or 0.0)
            hist = self._job_tps.setdefault(job_id, [])
            if running and tps > 0:
                base = float(np.median(hist)) if len(hist) >= 10 else None
                slow = base is not None and tps < (1 - cfg.rel) * base
                if not slow:
                    hist.append(tps)
                    del hist[:-60]
                if slow:
                    a, new = book.fire(cluster_id=cid, target=target, rule="job-slow", severity="warning",
                                       message=f"{tps:.4g} tokens/s is more than {cfg.rel:.0%} under {base:.4g}",
                                       now=now, value=tps)
                    if new:
                        res.fired.append(a)
                elif book.is_open(cid, target, "job-slow"):
                    slow_cleared = book.clear(cid, target, "job-slow", now)
                    if slow_cleared is not None:
                        res.resolved.append(slow_cleared)
        for gone in set(self._job_last) - set(jobs):
            self._job_last.pop(gone, None)
            self._job_tps.pop(gone, None)
            for rule in ("job-stalled", "job-slow"):
                cleared = book.clear(cid, f"job:{gone}", rule, now)
                if cleared is not None:
                    res.resolved.append(cleared)

    def _health(self, states: np.ndarray, link_states: np.ndarray | None) -> None:
        rules = (*self._dev_rules.values(), *self._rules.values())
        key = (states.tobytes(), None if link_states is None else link_states.tobytes())
        if not any(r.changed for r in rules) and key == self._health_key:
            return
        self._health_key = key
        for r in rules:
            r.changed = False
        sev = np.zeros(self.n_chips, np.int8)
        for r in (*self._dev_rules.values(), *self._rules.values()):
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
