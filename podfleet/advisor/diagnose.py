"""Diagnosis (``DiagnoseCluster``, ``podfleet diagnose``): the faulty chips, links and
worker slots, each with its root cause, the documented repair and its runbook.

The diagnoser works from evidence: chip and link states, the counters and telemetry the
fabric reports, the fault log (``HardwareErrors``) and the cluster's event log. A fault
log entry says *that* something went wrong *where* and *when*, and what was observed
(a signal, a heartbeat age, a count); the diagnoser never reads a label that names the
fault (the twin's ``detail["fault"]``, ``action`` or ``cause``: ``_observed`` drops them
before anything else sees an entry), so what it concludes is what the evidence says:

* a chip with an error logged: uncorrectable SRAM / HBM counters -> those kinds;
  execution errors and still out of service -> ``chip-failure``, back in service after
  failing (a reset cleared it) -> ``firmware-fault``; a thermal resistance (temperature
  rise over ambient per watt) well over the pod's median, or throttling ->
  ``thermal-runaway``; corrected HBM errors -> ``hbm-corrected-burst``; out of service
  with none of these -> ``chip-failure``. Several at once: the most severe wins.
* a link with an error logged: down and gone down once -> ``link-down``; gone down more
  than once, or back up (degraded) -> ``link-flap`` (from the event log).
* a worker slot's fault log entry (local, Ray): ``hang`` -> ``worker-hung``, ``oom-kill``
  -> ``worker-oom-killed``, ``signal`` -> ``worker-killed``; and from telemetry, a rank
  whose measured samples/s is under ``SLOW_RANK_RATIO`` of its gang's median ->
  ``worker-slow`` (ranks of one gang on the same work: a job's load does not explain it).

A finding must still be current: its chip is out of service or degraded, its link is not
up, or (bursts, flaps, firmware resets, worker faults) it came within ``RECENT_S``. Then
chips out of service with no error (drained on a prediction, cordoned: low confidence),
and open alerts of hardware rules (``ecc-uncorrected``, ``ecc-corrected-rate``).

Telemetry alone is never a finding otherwise: a chip that is hot because it works hard,
a link that is busy, a utilization dip when a job stops are what a healthy pod does.
Evidence: the observed fault-log entries, the latest metric samples, the ids of the
alerts open on the target, and its lines in the cluster's event log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from podfleet.advisor.runbooks import (
    UNEXPLAINED,
    WORKER_HUNG,
    WORKER_KILLED,
    WORKER_OOM_KILLED,
    WORKER_SLOW,
    Runbook,
    runbook,
)
from podfleet.control.plane import ControlPlane
from podfleet.control.runtime import ClusterRuntime
from podfleet.fabric.base import ChipState, FabricEvent, HardwareErrors, LinkState
from podfleet.hardware.faults import FaultKind
from podfleet.health.scan import HealthConfig

RECENT_S = 3600.0  # a corrected burst or a flap older than this, on a chip or link now fine, is history
CHIP_METRICS = ("temperature_c", "power_w", "clock_mhz", "throttle", "mem_ecc_corrected", "mem_ecc_uncorrected",
                "sram_ecc_uncorrected", "execution_errors", "link_errors", "firmware_version")
LINK_METRICS = ("utilization", "errors", "bandwidth_bytes_per_s")
HW_ALERT_RULES = {"ecc-uncorrected": FaultKind.HBM_UNCORRECTABLE.value,
                  "ecc-corrected-rate": FaultKind.HBM_CORRECTED_BURST.value}
# Kinds that stay findings for ``RECENT_S`` though their chip or link is back: a burst or a
# flap leaves it in service, and a firmware fault is reset by recovery within a minute
# (the runbook's next step, the firmware check, still applies).
_RECENT_KINDS = frozenset({FaultKind.HBM_CORRECTED_BURST.value, FaultKind.LINK_FLAP.value,
                           FaultKind.FIRMWARE_FAULT.value, WORKER_HUNG, WORKER_KILLED, WORKER_OOM_KILLED})
# What a fault-log entry may tell the diagnoser: where, when and what was observed. Labels
# that name a fault (an injector's ``fault``, ``action``, ``cause``, ``injected``) never pass.
OBSERVED_KEYS = ("observed", "signal", "exit_code", "heartbeat_age_s", "rss_bytes", "rank", "attempt", "count",
                 "source", "device", "started")
WORKER_FAULT = "worker-fault"  # the kind of a worker fabric's fault-log entries (fabric/local/faultlog.py)
_WORKER_KIND = {"hang": WORKER_HUNG, "oom-kill": WORKER_OOM_KILLED, "signal": WORKER_KILLED}
# Thermal resistance over the pod's median above which a chip's cooling has failed: a
# healthy chip's resistance varies by a few percent (the twin: +-5%); a failed cold plate
# multiplies it (the twin's runaway: x3). A parameter, as the scan's 10% deviation is.
THERMAL_R_RATIO = 1.5
CORRECTED_BURST_MIN = 10  # corrected HBM errors on a chip with a logged error that make it a burst
# The cluster log's lines of a fabric's error events (control/events.py ``event_line``).
_ERROR_LINES = frozenset({"fabric: fault", "fabric: chip-failed", "fabric: chip-degraded"})
SLOW_RANK_RATIO = 0.7  # a rank at under this share of its gang's median samples/s is slow


@dataclass(frozen=True)
class Finding:
    id: str
    kind: str
    chips: tuple[int, ...]
    links: tuple[str, ...]
    root_cause: str
    confidence: float
    action: str
    repair_steps: tuple[str, ...]
    runbook: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["chips"], d["links"], d["repair_steps"] = list(self.chips), list(self.links), list(self.repair_steps)
        return d


def _fid(cluster_id: str, kind: str, target: str, t: float) -> str:
    return "fd-" + hashlib.sha256(f"{cluster_id}|{kind}|{target}|{t:.3f}".encode()).hexdigest()[:10]


def _sample(metrics: Mapping[str, np.ndarray], names: Sequence[str], i: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in names:
        arr = metrics.get(n)
        if arr is None or i >= len(arr):
            continue
        v = arr[i]
        out[n] = v.item() if hasattr(v, "item") else v
        if isinstance(out[n], float):
            out[n] = round(out[n], 4)
    return out


@dataclass(frozen=True)
class Observed:
    """One fault-log entry as the diagnoser may see it: no label naming the fault."""

    kind: str
    t: float
    chip: int | None
    link: int | None
    job_id: str | None
    detail: Mapping[str, Any]


def _observed(ev: FabricEvent) -> Observed:
    return Observed(ev.kind, float(ev.t), ev.chip, ev.link, ev.job_id,
                    {k: ev.detail[k] for k in OBSERVED_KEYS if k in ev.detail})


def _event(ev: Observed) -> dict[str, Any]:
    return {"kind": ev.kind, "t": round(ev.t, 3), "job_id": ev.job_id, **ev.detail}


class Diagnoser:
    """One diagnosis of one cluster (engine thread): build, then ``findings()``."""

    def __init__(self, rt: ClusterRuntime, alerts: Sequence[Mapping[str, Any]], now: float) -> None:
        self.rt, self.now = rt, now
        fab = rt.fabric
        self.chips = [ChipState(s) for s in fab.chip_states()]
        self.links = [LinkState(s) for s in fab.link_states()]
        self.cm = fab.chip_metrics()
        self.lm = fab.link_metrics()
        self.errors = [_observed(e) for e in fab.hardware_errors()] if isinstance(fab, HardwareErrors) else []
        self.open_alerts = [a for a in alerts if a.get("state") != "resolved"]
        self.names = [f"{min(lk.src, lk.dst)}-{max(lk.src, lk.dst)}" for lk in rt.topology.links]
        self.log = rt.logs.since(0, limit=100_000)
        self.jobs = {j: tuple(c) for j, c in rt.owners.jobs().items()}
        self.thermal_r = self._thermal_resistance()

    # --- what the evidence says ------------------------------------------------------------
    def _metric(self, name: str, chip: int) -> float:
        arr = self.cm.get(name)
        if arr is None or chip >= len(arr):
            return float("nan")
        try:
            return float(np.asarray(arr[chip], dtype=np.float64).mean())
        except (TypeError, ValueError):
            return float("nan")

    def _thermal_resistance(self) -> np.ndarray:
        """(temperature - ambient) / power per chip, over the pod's median (NaN where not measured)."""
        n = len(self.chips)
        try:
            temp = np.asarray(self.cm["temperature_c"], np.float64)[:n]
            power = np.maximum(np.asarray(self.cm["power_w"], np.float64)[:n], 1.0)
        except (KeyError, TypeError, ValueError):
            return np.full(n, np.nan)
        r = (temp - HealthConfig().ambient_c) / power
        if not np.isfinite(r).any():
            return np.full(n, np.nan)
        med = float(np.nanmedian(r))
        out: np.ndarray = r / med if med > 0 else np.full(n, np.nan)
        return out

    def _chip_kinds(self, chip: int, evs: list[Observed]) -> list[str]:
        """The kinds the chip's evidence supports (a chip with an error logged)."""
        st = self.chips[chip]
        out: list[str] = []
        worker = {_WORKER_KIND[str(e.detail.get("observed"))] for e in evs
                  if e.kind == WORKER_FAULT and str(e.detail.get("observed")) in _WORKER_KIND}
        out += sorted(worker)
        if all(e.kind == WORKER_FAULT for e in evs):
            return out  # a worker's fault: the slot itself reported nothing
        if self._metric("sram_ecc_uncorrected", chip) > 0:
            out.append(FaultKind.SRAM_UNCORRECTABLE.value)
        if self._metric("mem_ecc_uncorrected", chip) > 0:
            out.append(FaultKind.HBM_UNCORRECTABLE.value)
        out_of_service = st in (ChipState.FAILED, ChipState.ISOLATED)
        if self._metric("execution_errors", chip) > 0 or self._metric("execution_errors_hardware", chip) > 0:
            # Back in service after the error: a reset cleared it, a firmware fault's
            # signature; still out of service: the device itself.
            out.append(FaultKind.CHIP_FAILURE.value if out_of_service else FaultKind.FIRMWARE_FAULT.value)
        r = float(self.thermal_r[chip]) if chip < len(self.thermal_r) else float("nan")
        if (np.isfinite(r) and r > THERMAL_R_RATIO) or self._metric("throttle", chip) > 0:
            out.append(FaultKind.THERMAL_RUNAWAY.value)
        if self._metric("mem_ecc_corrected", chip) >= CORRECTED_BURST_MIN:
            out.append(FaultKind.HBM_CORRECTED_BURST.value)
        if not out and out_of_service:
            out.append(FaultKind.CHIP_FAILURE.value)
        return out

    def _repaired_since_error(self, chip: int) -> bool:
        lines = [str(ln["message"]) for ln in self.log if ln.get("chip") == chip]
        errors = [i for i, m in enumerate(lines) if m in _ERROR_LINES]
        return bool(errors) and any(": repaired (" in m for m in lines[errors[-1] + 1:])

    def _link_kind(self, link: int) -> str:
        downs = sum(1 for ln in self._log_on("link", link, 1000) if ln.endswith("link-down"))
        if self.links[link] == LinkState.DOWN and downs <= 1:
            return FaultKind.LINK_DOWN.value
        return FaultKind.LINK_FLAP.value

    def _slow_ranks(self) -> list[tuple[int, str, float]]:
        """(chip, job, speed over its gang's median) of ranks measured well under their gang."""
        sps = self.cm.get("samples_per_s")
        if sps is None:
            return []
        s = np.nan_to_num(np.asarray(sps, np.float64))
        out = []
        for job, chips in sorted(self.jobs.items()):
            idx = [c for c in chips if 0 <= c < len(s)]
            v = s[idx]
            if len(idx) < 2 or (v <= 0).any():
                continue  # not measured yet
            med = float(np.median(v))
            for c, x in zip(idx, v, strict=True):
                if x < SLOW_RANK_RATIO * med:
                    out.append((int(c), job, float(x / med)))
        return out

    # --- is an error still the state of its target? ---------------------------------------
    def _current(self, ev: Observed, kind: str) -> bool:
        recent = self.now - ev.t <= RECENT_S
        if ev.chip is not None:
            st = self.chips[ev.chip]
            return st != ChipState.HEALTHY or (kind in _RECENT_KINDS and recent)
        if ev.link is not None:
            return self.links[ev.link] != LinkState.UP or (kind in _RECENT_KINDS and recent)
        return False

    def _alerts_on(self, target: str) -> list[str]:
        return [str(a["id"]) for a in self.open_alerts if a.get("target") == target]

    def _log_on(self, key: str, value: int, last: int = 5) -> list[str]:
        return [f"{ln['time']} {ln['message']}" for ln in self.log if ln.get(key) == value][-last:]

    def _chip_finding(self, chip: int, rb: Runbook, events: list[Observed], confidence: float,
                      extra: Mapping[str, Any] | None = None) -> Finding:
        t = events[-1].t if events else 0.0
        evidence = {"state": self.chips[chip].value, "events": [_event(e) for e in events[-5:]],
                    "metrics": _sample(self.cm, CHIP_METRICS, chip), "alerts": self._alerts_on(f"chip:{chip}"),
                    "log": self._log_on("chip", chip), **(extra or {})}
        return Finding(_fid(self.rt.id, rb.kind, f"chip:{chip}", t), rb.kind, (chip,), (), rb.root_cause,
                       confidence, rb.action.value, rb.repair_steps, rb.topic, evidence)

    def _link_finding(self, link: int, rb: Runbook, events: list[Observed], confidence: float) -> Finding:
        name = self.names[link]
        lk = self.rt.topology.links[link]
        evidence = {"state": self.links[link].value, "events": [_event(e) for e in events[-5:]],
                    "metrics": _sample(self.lm, LINK_METRICS, link), "alerts": self._alerts_on(f"link:{name}"),
                    "log": self._log_on("link", link)}
        return Finding(_fid(self.rt.id, rb.kind, f"link:{name}", events[-1].t), rb.kind, (lk.src, lk.dst), (name,),
                       rb.root_cause, confidence, rb.action.value, rb.repair_steps, rb.topic, evidence)

    def findings(self) -> list[Finding]:
        by_chip: dict[int, list[Observed]] = {}
        by_link: dict[int, list[Observed]] = {}
        for ev in self.errors:
            if ev.chip is not None and 0 <= ev.chip < len(self.chips):
                by_chip.setdefault(ev.chip, []).append(ev)
            elif ev.link is not None and 0 <= ev.link < len(self.links):
                by_link.setdefault(ev.link, []).append(ev)
        out: list[Finding] = []
        explained: set[int] = set()
        for chip, evs in sorted(by_chip.items()):
            if self._repaired_since_error(chip):
                continue  # an operator repaired (or replaced) it after its last error: history
            kinds = [k for k in self._chip_kinds(chip, evs) if any(self._current(e, k) for e in evs)]
            if not kinds:
                continue
            rb = max((runbook(k) for k in kinds), key=lambda r: r.severity)
            # Still in the state the error put it in (out of service, degraded), or back
            # in service after a burst or a reset: history, a little less certain.
            out.append(self._chip_finding(chip, rb, evs, 0.97 if self.chips[chip] != ChipState.HEALTHY else 0.9))
            explained.add(chip)
        for link, evs in sorted(by_link.items()):
            kind = self._link_kind(link)
            if not any(self._current(e, kind) for e in evs):
                continue
            rb = runbook(kind)
            out.append(self._link_finding(link, rb, evs, 0.97 if self.links[link] != LinkState.UP else 0.85))
        for chip, job, ratio in self._slow_ranks():
            if chip in explained:
                continue
            explained.add(chip)
            out.append(self._chip_finding(chip, runbook(WORKER_SLOW), [], 0.8,
                                          {"job_id": job, "speed_over_gang_median": round(ratio, 3)}))
        for chip, st in enumerate(self.chips):
            if chip in explained:
                continue
            if st in (ChipState.FAILED, ChipState.ISOLATED):
                out.append(self._chip_finding(chip, UNEXPLAINED, [], 0.5))
                explained.add(chip)
        for a in self.open_alerts:
            alert_kind = HW_ALERT_RULES.get(str(a.get("rule")))
            target = str(a.get("target", ""))
            if alert_kind is None or not target.startswith("chip:"):
                continue
            chip = int(target.removeprefix("chip:"))
            if chip in explained or not 0 <= chip < len(self.chips):
                continue
            explained.add(chip)
            f = self._chip_finding(chip, runbook(alert_kind), [], 0.6)
            out.append(f)
        return out


def diagnose(plane: ControlPlane, ref: str, alerts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``DiagnoseCluster``'s answer (engine thread): the findings, most severe first."""
    rt = plane.resolve(ref)
    d = Diagnoser(rt, alerts, plane.tl.now)
    found = sorted(d.findings(), key=lambda f: (-runbook(f.kind).severity, f.chips))
    return {"cluster_id": rt.id, "healthy": not found, "findings": [f.to_dict() for f in found],
            "hardware_errors_seen": len(d.errors)}
