"""Health reports of a cluster over a period (``podfleet report``), and their archive.

What a report holds, each read from the control plane's own records:

* ``availability``: chip-time in service over the period, from the cluster's event log
  (``fabric: chip-failed`` / ``chip-isolated`` open a chip's outage, ``chip-healthy``
  closes it; a chip down now is down to the period's end);
* ``faults``: the hardware errors the fabric reported in the period, by kind
  (``HardwareErrors``); ``recoveries``: the recovery journals that started in it;
* ``alerts``: those seen in the period, by rule and severity;
* ``chips`` / ``links``: those whose latest sample is off the pod's baseline (more than
  ``OUTLIER_MADS`` robust deviations from the pod's median), with the diagnosis findings
  at the end of the period;
* ``jobs``: each job's state, steps and ETTR (steps x planned step time / time running).

Charts are drawn with matplotlib (SVG, embedded in the HTML). Reports are archived in
the store (``StoredReports``: table ``health_reports``, migration 0005, on SQLite and
PostgreSQL alike), JSON and HTML as generated, and pruned after ``retention_days`` each
time one is saved; the API lists them (``ListHealthReports``) and serves either form
(``GetHealthReport``). ``podfleet up`` generates every active cluster's 24 h report once
a day of timeline (``schedule_daily``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import io
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from podfleet.advisor.diagnose import diagnose
from podfleet.control.lifecycle import ClusterState
from podfleet.control.plane import ControlPlane
from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.fabric.base import HardwareErrors
from podfleet.store.protocol import ReportStore
from podfleet.store.records import ReportRecord

OUTLIER_MADS = 5.0
RETENTION_DAYS = 30.0


class AlertsPort(Protocol):
    """What reports read of the health service."""

    def list_alerts(self, ref: str, state: str | None = None) -> list[dict[str, Any]]: ...


class RecoveriesPort(Protocol):
    """What reports read of the recovery service."""

    def recoveries(self, ref: str) -> list[dict[str, Any]]: ...


PERIODS = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 86400.0, "7d": 7 * 86400.0}
_DOWN = ("fabric: chip-failed", "fabric: chip-isolated")
_UP = "fabric: chip-healthy"


def parse_period(text: str) -> float:
    if text not in PERIODS:
        raise InvalidInputError(f"unknown period {text!r}; valid: {', '.join(PERIODS)}", field="period",
                                allowed=list(PERIODS))
    return PERIODS[text]


def _unix(rfc: str) -> float:
    return dt.datetime.fromisoformat(rfc.replace("Z", "+00:00")).timestamp()


def availability(lines: Sequence[Mapping[str, Any]], n_chips: int, down_now: set[int], start: float,
                 end: float) -> dict[str, Any]:
    """Chip-time in service over [start, end] (unix seconds) from the event log."""
    since: dict[int, float] = {}
    lost: dict[int, float] = {}
    for ln in lines:
        chip = ln.get("chip")
        if chip is None:
            continue
        t = _unix(str(ln["time"]))
        if t > end:
            break
        if ln["message"] in _DOWN:
            since.setdefault(int(chip), t)
        elif ln["message"] == _UP and int(chip) in since:
            t0 = since.pop(int(chip))
            lost[int(chip)] = lost.get(int(chip), 0.0) + max(0.0, t - max(t0, start))
    for chip in down_now:
        t0 = since.get(chip, start)
        lost[chip] = lost.get(chip, 0.0) + max(0.0, end - max(t0, start))
    span = max(end - start, 1e-9)
    total = sum(lost.values())
    return {"chip_availability": round(1.0 - total / (n_chips * span), 6), "chip_hours_lost": round(total / 3600, 4),
            "chips_with_outages": sorted(lost)}


def _outliers(values: np.ndarray, name: str) -> list[dict[str, Any]]:
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or v.size < 3:
        return []
    med = float(np.median(v))
    mad = float(np.median(np.abs(v - med))) or 1e-9
    idx = np.nonzero(np.abs(v - med) > OUTLIER_MADS * 1.4826 * mad)[0]
    return [{"index": int(i), "metric": name, "value": round(float(v[i]), 4), "pod_median": round(med, 4)}
            for i in idx]


def build(plane: ControlPlane, alerts: Sequence[Mapping[str, Any]], recoveries: Sequence[Mapping[str, Any]],
          ref: str, period_s: float) -> dict[str, Any]:
    """One report (engine thread)."""
    rt = plane.resolve(ref)
    now_t, end = plane.tl.now, plane.now()
    start_t, start = now_t - period_s, end - period_s
    fab = rt.fabric
    states = [str(s) for s in fab.chip_states()]
    down_now = {i for i, s in enumerate(states) if s in ("failed", "isolated")}
    errors = [e for e in (fab.hardware_errors() if isinstance(fab, HardwareErrors) else []) if e.t >= start_t]
    recs = [r for r in recoveries if (r.get("t_start") or 0.0) >= start_t]
    durations = [r["t_end"] - (r.get("detected_t") or r["t_start"]) for r in recs if r.get("t_end") is not None]
    seen = [a for a in alerts if float(a.get("last_seen") or 0.0) >= start_t]
    cm, lm = fab.chip_metrics(), fab.link_metrics()
    chips = [o for m in ("temperature_c", "power_w", "clock_mhz") if m in cm for o in _outliers(cm[m], m)]
    links = [o for m in ("errors",) if m in lm for o in _outliers(lm[m], m)]
    jobs = []
    for v in plane.jobs.list(cluster_id=rt.id, max_results=1000)[0]:
        prog, plan = v.get("progress") or {}, v.get("plan") or {}
        started = (v.get("timestamps") or {}).get("RUNNING")
        ettr = None
        if started and plan.get("step_time_s") and prog.get("step") is not None:
            wall = end - _unix(started)
            ettr = round(min(1.0, prog["step"] * plan["step_time_s"] / wall), 4) if wall > 0 else None
        jobs.append({"id": v["id"], "name": v.get("name"), "state": v["state"], "step": prog.get("step"),
                     "ettr": ettr})
    created = dt.datetime.fromtimestamp(end, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rid = "rp-" + hashlib.sha256(f"{rt.id}|{end:.3f}|{period_s}".encode()).hexdigest()[:10]
    return {
        "id": rid, "cluster_id": rt.id, "cluster": rt.rec.name, "created_at": created, "period_s": period_s,
        "availability": availability(rt.logs.since(0, limit=100_000), rt.topology.n_chips, down_now, start, end),
        "faults": {"total": len(errors), "by_kind": dict(sorted(Counter(str(e.detail.get("fault")) for e in errors)
                                                               .items()))},
        "recoveries": {"count": len(recs), "by_kind": dict(sorted(Counter(str(r.get("kind")) for r in recs).items())),
                       "p50_s": round(float(np.median(durations)), 3) if durations else None},
        "alerts": {"total": len(seen), "by_rule": dict(sorted(Counter(str(a["rule"]) for a in seen).items())),
                   "by_severity": dict(sorted(Counter(str(a["severity"]) for a in seen).items()))},
        "chips_off_baseline": chips, "links_off_baseline": links,
        "findings": diagnose(plane, ref, alerts)["findings"],
        "jobs": jobs,
        "chip_temperature_c": [round(float(x), 2) for x in cm.get("temperature_c", [])],
    }


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    return buf.getvalue()


def charts(report: Mapping[str, Any]) -> list[str]:
    """SVG charts: chip temperatures against the pod's median; faults by kind."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    out = []
    temps = report.get("chip_temperature_c") or []
    if temps:
        fig = Figure(figsize=(8, 2.6))
        ax = fig.add_subplot()
        ax.bar(range(len(temps)), temps, color="#4a7bd0")
        ax.axhline(float(np.median(temps)), color="#c33", linewidth=1, label="pod median")
        ax.set_xlabel("chip")
        ax.set_ylabel("temperature (C)")
        ax.legend(loc="upper right")
        out.append(_svg(fig))
    kinds = report["faults"]["by_kind"]
    fig = Figure(figsize=(8, 2.4))
    ax = fig.add_subplot()
    ax.barh(list(kinds) or ["none"], list(kinds.values()) or [0], color="#d08a4a")
    ax.set_xlabel("hardware errors in the period")
    out.append(_svg(fig))
    return out


def to_html(report: Mapping[str, Any]) -> str:
    def table(rows: Sequence[Mapping[str, Any]]) -> str:
        if not rows:
            return "<p>none</p>"
        cols = list(rows[0])
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r.get(c)))}</td>" for c in cols) + "</tr>"
                       for r in rows)
        return f"<table><tr>{head}</tr>{body}</table>"

    av = report["availability"]
    e = html.escape
    parts = [
        f"<h1>Health report: {e(report['cluster'])}</h1>",
        f"<p>{e(report['created_at'])}, period {report['period_s'] / 3600:g} h. "
        f"Chip availability {av['chip_availability']:.4%} ({av['chip_hours_lost']} chip-hours lost).</p>",
        "<h2>Faults and recoveries</h2>", table([{"kind": k, "count": v} for k, v in report["faults"]["by_kind"].items()]),
        f"<p>{report['recoveries']['count']} recoveries, median {report['recoveries']['p50_s']} s.</p>",
        "<h2>Alerts</h2>", table([{"rule": k, "count": v} for k, v in report["alerts"]["by_rule"].items()]),
        "<h2>Findings</h2>", table([{"kind": f["kind"], "chips": f["chips"], "links": f["links"],
                                     "action": f["action"], "runbook": f["runbook"]} for f in report["findings"]]),
        "<h2>Chips and links off baseline</h2>", table([*report["chips_off_baseline"], *report["links_off_baseline"]]),
        "<h2>Jobs</h2>", table(report["jobs"]),
        "<h2>Charts</h2>", *charts(report),
    ]
    style = "body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}" \
            "td,th{border:1px solid #ccc;padding:2px 6px}"
    return f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>" \
           + "\n".join(parts) + "</body></html>"


class Archive(Protocol):
    """Where reports are kept (``StoredReports``: the store)."""

    def save(self, report: Mapping[str, Any], *, now: float) -> None: ...

    def list(self, cluster_id: str) -> list[dict[str, Any]]: ...

    def get(self, cluster_id: str, report_id: str, fmt: str = "json") -> str: ...


def _listing(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": r["id"], "created_at": r["created_at"], "period_s": r["period_s"],
            "chip_availability": r["availability"]["chip_availability"], "findings": len(r["findings"])}


class StoredReports:
    """Reports in the store, one row each; rows older than ``retention_days`` are pruned
    whenever a report of the same cluster is saved (``prune``)."""

    def __init__(self, store: ReportStore, retention_days: float = RETENTION_DAYS) -> None:
        if not retention_days > 0:
            raise InvalidInputError(f"retention_days must be > 0, got {retention_days}", field="retention_days")
        self.store = store
        self.retention_s = retention_days * 86400.0

    def save(self, report: Mapping[str, Any], *, now: float) -> None:
        cid = str(report["cluster_id"])
        self.store.save_report(ReportRecord(str(report["id"]), cid, _unix(str(report["created_at"])),
                                            float(report["period_s"]), _listing(report), json.dumps(report),
                                            to_html(report)))
        self.prune(cid, now=now)

    def prune(self, cluster_id: str | None = None, *, now: float) -> int:
        return self.store.prune_reports(before=now - self.retention_s, cluster_id=cluster_id)

    def list(self, cluster_id: str) -> list[dict[str, Any]]:
        return [dict(r.summary) for r in self.store.list_reports(cluster_id)]

    def get(self, cluster_id: str, report_id: str, fmt: str = "json") -> str:
        if fmt not in ("json", "html"):
            raise InvalidInputError(f"format must be json or html, got {fmt!r}", field="format",
                                    allowed=["json", "html"])
        rec = self.store.get_report(report_id)
        if rec is None or rec.cluster_id != cluster_id:
            raise NotFoundError(f"report {report_id!r} not found", field="report")
        return rec.html_text if fmt == "html" else rec.json_text


def generate_all(plane: ControlPlane, health: AlertsPort | None, recovery: RecoveriesPort | None, archive: Archive,
                 period: str = "24h") -> list[str]:
    """A report of every active cluster over ``period``, archived (engine thread); their ids."""
    made = []
    for rt in list(plane.clusters.values()):
        if rt.state != ClusterState.ACTIVE:
            continue
        alerts = health.list_alerts(rt.id) if health is not None else []
        recs = recovery.recoveries(rt.id) if recovery is not None else []
        rep = build(plane, alerts, recs, rt.id, PERIODS[period])
        archive.save(rep, now=plane.now())
        made.append(str(rep["id"]))
    return made


def schedule_daily(plane: ControlPlane, health: AlertsPort | None, recovery: RecoveriesPort | None,
                   archive: Archive, *, interval_s: float = 86400.0) -> None:
    """Generate every active cluster's 24 h report once per ``interval_s`` of timeline."""
    plane.tl.every(interval_s, lambda: generate_all(plane, health, recovery, archive))
