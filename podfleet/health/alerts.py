"""Alerts with a lifecycle (firing -> acknowledged -> resolved), de-duplicated by key.

An alert's key is (cluster, target, rule): while one is open (firing or acknowledged)
the same condition updates it (``count``, ``last_seen``, ``value``) instead of opening a
new one. Resolved alerts are kept (bounded) so operators can see history.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from podfleet.errors import NotFoundError
from podfleet.states import check_transition, transitions


class AlertState(StrEnum):
    FIRING = "firing"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"


ALERT_TRANSITIONS = transitions(AlertState, {
    AlertState.FIRING: {AlertState.ACKNOWLEDGED, AlertState.RESOLVED},
    AlertState.ACKNOWLEDGED: {AlertState.RESOLVED},
})


@dataclass
class Alert:
    id: str
    cluster_id: str
    target: str  # "chip:12", "link:3-7", "job:job-..."
    rule: str  # e.g. "deviation:temperature_c", "ecc-rate", "link-errors"
    severity: str  # "warning" | "critical"
    message: str
    state: AlertState = AlertState.FIRING
    first_seen: float = 0.0
    last_seen: float = 0.0
    count: int = 1
    value: float | None = None
    acknowledged_by: str | None = None
    resolved_at: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)  # the jobs on the target while it fired

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.cluster_id, self.target, self.rule)

    def to_dict(self, epoch: float | None = None, *, wall: Callable[[float], float] | None = None) -> dict[str, Any]:
        """The alert as JSON. With ``wall`` (timeline seconds -> unix seconds: the plane's
        ``Timeline.wall_at``) or ``epoch`` (unix time of timeline 0), as the API shows it:
        every ``*_at`` is RFC 3339 on the wall clock like every other time the API shows
        (``first_seen_at``, ``last_seen_at``, ``resolved_at``), beside the timeline seconds
        (``first_seen``, ``last_seen``, ``resolved_t``). Without, the timeline seconds alone
        (rehearsals)."""
        d = asdict(self)
        d["state"] = self.state.value
        if wall is None and epoch is not None:
            e = epoch
            wall = lambda t: e + t  # noqa: E731
        if wall is not None:
            d["first_seen_at"] = _rfc3339(wall(self.first_seen))
            d["last_seen_at"] = _rfc3339(wall(self.last_seen))
            d["resolved_t"] = self.resolved_at
            d["resolved_at"] = _rfc3339(wall(self.resolved_at)) if self.resolved_at is not None else None
        return d


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Which jobs an alert's target touches: (cluster id, target) -> job ids.
AffectedJobs = Callable[[str, str], list[str]]


class AlertBook:
    def __init__(self, keep_resolved: int = 10_000, affected: AffectedJobs | None = None) -> None:
        # Names the jobs an alert affects, so an operator sees what a chip or link
        # warning means for the work on it.
        self.affected = affected
        self._open: dict[tuple[str, str, str], Alert] = {}
        self._all: OrderedDict[str, Alert] = OrderedDict()
        self._keep_resolved = keep_resolved
        self._seq = 0

    def fire(
        self,
        *,
        cluster_id: str,
        target: str,
        rule: str,
        severity: str,
        message: str,
        now: float,
        value: float | None = None,
        detail: dict[str, Any] | None = None,
    ) -> tuple[Alert, bool]:
        """Open an alert or refresh the open one with this key. Returns (alert, is_new)."""
        key = (cluster_id, target, rule)
        alert = self._open.get(key)
        if alert is not None:
            alert.last_seen = now
            alert.count += 1
            alert.value = value
            alert.message = message
            self._name_jobs(alert)
            return alert, False
        self._seq += 1
        alert = Alert(
            id=f"al-{self._seq:06d}",
            cluster_id=cluster_id,
            target=target,
            rule=rule,
            severity=severity,
            message=message,
            first_seen=now,
            last_seen=now,
            value=value,
            detail=dict(detail or {}),
        )
        self._name_jobs(alert)
        self._open[key] = alert
        self._all[alert.id] = alert
        self._trim()
        return alert, True

    def _name_jobs(self, alert: Alert) -> None:
        if self.affected is not None:
            for j in self.affected(alert.cluster_id, alert.target):
                if j not in alert.jobs:
                    alert.jobs.append(j)

    def clear(self, cluster_id: str, target: str, rule: str, now: float) -> Alert | None:
        """Resolve the open alert with this key, if any (the condition went away)."""
        alert = self._open.pop((cluster_id, target, rule), None)
        if alert is not None:
            check_transition("alert", ALERT_TRANSITIONS, alert.state, AlertState.RESOLVED)
            alert.state = AlertState.RESOLVED
            alert.resolved_at = now
        return alert

    def acknowledge(self, alert_id: str, who: str) -> Alert:
        alert = self.get(alert_id)
        check_transition("alert", ALERT_TRANSITIONS, alert.state, AlertState.ACKNOWLEDGED)
        alert.state = AlertState.ACKNOWLEDGED
        alert.acknowledged_by = who
        return alert

    def get(self, alert_id: str) -> Alert:
        try:
            return self._all[alert_id]
        except KeyError:
            raise NotFoundError(f"alert {alert_id!r} does not exist", field="alert_id") from None

    def is_open(self, cluster_id: str, target: str, rule: str) -> bool:
        return (cluster_id, target, rule) in self._open

    def open_alerts(self, cluster_id: str | None = None) -> list[Alert]:
        return [a for a in self._open.values() if cluster_id in (None, a.cluster_id)]

    def all(self, cluster_id: str | None = None) -> list[Alert]:
        return [a for a in self._all.values() if cluster_id in (None, a.cluster_id)]

    def _trim(self) -> None:
        resolved = [k for k, a in self._all.items() if a.state == AlertState.RESOLVED]
        for k in resolved[: max(0, len(resolved) - self._keep_resolved)]:
            del self._all[k]
