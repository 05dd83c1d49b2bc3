"""Diagnosis (``DiagnoseCluster``, ``podfleet diagnose``): the faulty chips and links,
each with its root cause, the documented repair and its runbook.

What a finding rests on, strongest first:

1. a hardware error the fabric reported (``HardwareErrors``), still current: its chip is
   out of service or degraded, its link is not up, or (corrected-ECC bursts, link flaps)
   it came within ``RECENT_S``. A chip with several errors gets one finding, rooted in
   its most severe kind (an uncorrectable error outranks the corrected burst before it).
2. a chip out of service with no error reported (drained on a prediction, cordoned):
   a low-confidence finding that says so.
3. an open health alert of a hardware rule (``ecc-uncorrected``, ``ecc-corrected-rate``)
   on a chip with no error reported.

Telemetry is evidence, never a finding on its own: a chip that is hot because it works
hard, a link that is busy, a utilization dip when a job stops are what a healthy pod
does. Evidence: the error events, the chip's or link's latest metric samples, the ids
of the alerts open on it, and its lines in the cluster's event log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from podfleet.advisor.runbooks import UNEXPLAINED, Runbook, runbook
from podfleet.control.plane import ControlPlane
from podfleet.control.runtime import ClusterRuntime
from podfleet.fabric.base import ChipState, FabricEvent, HardwareErrors, LinkState
from podfleet.hardware.faults import FaultKind

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
                           FaultKind.FIRMWARE_FAULT.value})


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


def _event(ev: FabricEvent) -> dict[str, Any]:
    return {"kind": ev.kind, "t": round(ev.t, 3), "fault": ev.detail.get("fault"), "job_id": ev.job_id}


class Diagnoser:
    """One diagnosis of one cluster (engine thread): build, then ``findings()``."""

    def __init__(self, rt: ClusterRuntime, alerts: Sequence[Mapping[str, Any]], now: float) -> None:
        self.rt, self.now = rt, now
        fab = rt.fabric
        self.chips = [ChipState(s) for s in fab.chip_states()]
        self.links = [LinkState(s) for s in fab.link_states()]
        self.cm = fab.chip_metrics()
        self.lm = fab.link_metrics()
        self.errors = fab.hardware_errors() if isinstance(fab, HardwareErrors) else []
        self.open_alerts = [a for a in alerts if a.get("state") != "resolved"]
        self.names = [f"{min(lk.src, lk.dst)}-{max(lk.src, lk.dst)}" for lk in rt.topology.links]
        self.log = rt.logs.since(0, limit=100_000)

    # --- is an error still the state of its target? ---------------------------------------
    def _current(self, ev: FabricEvent) -> bool:
        kind = str(ev.detail.get("fault"))
        recent = self.now - ev.t <= RECENT_S
        if ev.chip is not None:
            st = self.chips[ev.chip]
            return st != ChipState.HEALTHY or (kind in _RECENT_KINDS and recent)
        if ev.link is not None:
            return self.links[ev.link] != LinkState.UP or (kind in _RECENT_KINDS and recent)
        return False

    def _alerts_on(self, target: str) -> list[str]:
        return [str(a["id"]) for a in self.open_alerts if a.get("target") == target]

    def _log_on(self, key: str, value: int) -> list[str]:
        return [f"{ln['time']} {ln['message']}" for ln in self.log if ln.get(key) == value][-5:]

    def _chip_finding(self, chip: int, rb: Runbook, events: list[FabricEvent], confidence: float) -> Finding:
        t = events[-1].t if events else 0.0
        evidence = {"state": self.chips[chip].value, "events": [_event(e) for e in events[-5:]],
                    "metrics": _sample(self.cm, CHIP_METRICS, chip), "alerts": self._alerts_on(f"chip:{chip}"),
                    "log": self._log_on("chip", chip)}
        return Finding(_fid(self.rt.id, rb.kind, f"chip:{chip}", t), rb.kind, (chip,), (), rb.root_cause,
                       confidence, rb.action.value, rb.repair_steps, rb.topic, evidence)

    def _link_finding(self, link: int, rb: Runbook, events: list[FabricEvent], confidence: float) -> Finding:
        name = self.names[link]
        lk = self.rt.topology.links[link]
        evidence = {"state": self.links[link].value, "events": [_event(e) for e in events[-5:]],
                    "metrics": _sample(self.lm, LINK_METRICS, link), "alerts": self._alerts_on(f"link:{name}"),
                    "log": self._log_on("link", link)}
        return Finding(_fid(self.rt.id, rb.kind, f"link:{name}", events[-1].t), rb.kind, (lk.src, lk.dst), (name,),
                       rb.root_cause, confidence, rb.action.value, rb.repair_steps, rb.topic, evidence)

    def findings(self) -> list[Finding]:
        by_chip: dict[int, list[FabricEvent]] = {}
        by_link: dict[int, list[FabricEvent]] = {}
        for ev in self.errors:
            if ev.chip is not None and 0 <= ev.chip < len(self.chips):
                by_chip.setdefault(ev.chip, []).append(ev)
            elif ev.link is not None and 0 <= ev.link < len(self.links):
                by_link.setdefault(ev.link, []).append(ev)
        out: list[Finding] = []
        explained: set[int] = set()
        for chip, evs in sorted(by_chip.items()):
            cur = [e for e in evs if self._current(e)]
            if not cur:
                continue
            rb = max((runbook(str(e.detail.get("fault"))) for e in cur), key=lambda r: r.severity)
            # Still in the state the error put it in (out of service, degraded), or back
            # in service after a burst or a reset: history, a little less certain.
            out.append(self._chip_finding(chip, rb, cur, 0.97 if self.chips[chip] != ChipState.HEALTHY else 0.9))
            explained.add(chip)
        for link, evs in sorted(by_link.items()):
            cur = [e for e in evs if self._current(e)]
            if not cur:
                continue
            rb = max((runbook(str(e.detail.get("fault"))) for e in cur), key=lambda r: r.severity)
            agrees = (self.links[link] == LinkState.DOWN) == (rb.kind == FaultKind.LINK_DOWN.value)
            out.append(self._link_finding(link, rb, cur, 0.97 if agrees else 0.85))
        for chip, st in enumerate(self.chips):
            if chip in explained:
                continue
            if st in (ChipState.FAILED, ChipState.ISOLATED):
                out.append(self._chip_finding(chip, UNEXPLAINED, [], 0.5))
                explained.add(chip)
        for a in self.open_alerts:
            kind = HW_ALERT_RULES.get(str(a.get("rule")))
            target = str(a.get("target", ""))
            if kind is None or not target.startswith("chip:"):
                continue
            chip = int(target.removeprefix("chip:"))
            if chip in explained or not 0 <= chip < len(self.chips):
                continue
            explained.add(chip)
            f = self._chip_finding(chip, runbook(kind), [], 0.6)
            out.append(f)
        return out


def diagnose(plane: ControlPlane, ref: str, alerts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``DiagnoseCluster``'s answer (engine thread): the findings, most severe first."""
    rt = plane.resolve(ref)
    d = Diagnoser(rt, alerts, plane.tl.now)
    found = sorted(d.findings(), key=lambda f: (-runbook(f.kind).severity, f.chips))
    return {"cluster_id": rt.id, "healthy": not found, "findings": [f.to_dict() for f in found],
            "hardware_errors_seen": len(d.errors)}
