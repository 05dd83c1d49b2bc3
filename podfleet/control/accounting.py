"""Accounting: every job's chip-seconds by kind, per user, queue and team (sacct/sreport).

The job table (the one writer of jobs) closes an interval at every transition
(``accrue``): the chips the job held times the time it spent in the state it leaves,
filed by kind:

====================  ===============================================================
``busy``              RUNNING: chips working, less the work redone after a failure
``reserved``          PLACING, CHECKPOINTING: chips held but not training
``lost``              RECOVERING (chips held while a fault is repaired), plus the work
                      since the last checkpoint that a failure threw away
====================  ===============================================================

The totals live in the job's status (persisted with it and kept after it ends); reports
(``usage``) add the interval still open. A checkpoint is a transition, so the work a
failure can throw away lies in the interval it closes: ``busy`` never goes down, and
the Prometheus counters built from closed intervals only (``counters``) are monotonic.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import TYPE_CHECKING

from podfleet.control.lifecycle import JobState
from podfleet.errors import UnknownNameError
from podfleet.wire import JsonObject

if TYPE_CHECKING:
    from podfleet.control.jobstatus import Job
    from podfleet.control.specs import JobSpec

KINDS = ("busy", "reserved", "lost")
KIND_OF_STATE = {JobState.RUNNING: "busy", JobState.PLACING: "reserved", JobState.CHECKPOINTING: "reserved",
                 JobState.RECOVERING: "lost"}
GROUPS = ("user", "queue", "team")


def accrue(usage: dict[str, float], state: JobState, dst: JobState, chips: int, seconds: float,
           redone_s: float = 0.0) -> None:
    """Add ``chips * seconds`` in ``state`` to ``usage``; on a failure (RUNNING ->
    RECOVERING) ``redone_s`` of that interval's work (since the last checkpoint) is lost."""
    kind = KIND_OF_STATE.get(state)
    if kind is None or chips <= 0 or seconds <= 0:
        return
    total = chips * seconds
    if state is JobState.RUNNING and dst is JobState.RECOVERING and redone_s > 0:
        lost = min(total, chips * redone_s)
        usage["lost"] = usage.get("lost", 0.0) + lost
        total -= lost
    usage[kind] = usage.get(kind, 0.0) + total


def key_of(spec: JobSpec, owner: str | None) -> dict[str, str]:
    return {"user": owner or "unknown", "queue": spec.queue or "default", "team": spec.team or "default"}


def summarize(items: Iterable[tuple[dict[str, str], dict[str, float]]], by: str) -> list[JsonObject]:
    """Chip-seconds per ``by`` (user, queue or team), largest busy first."""
    if by not in GROUPS:
        raise UnknownNameError("usage grouping", by, GROUPS, field="by")
    out: dict[str, JsonObject] = {}
    for key, usage in items:
        row = out.setdefault(key[by], {by: key[by], **dict.fromkeys(KINDS, 0.0), "jobs": 0})
        for k in KINDS:
            row[k] += float(usage.get(k, 0.0))
        row["jobs"] += 1
    rows = sorted(out.values(), key=lambda r: (-r["busy"], r[by]))
    for r in rows:
        for k in KINDS:
            r[k] = round(r[k], 3)
        r["chip_hours"] = round((r["busy"] + r["reserved"] + r["lost"]) / 3600.0, 4)
    return rows


def to_csv(rows: list[JsonObject], by: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = [by, *KINDS, "chip_hours", "jobs"]
    w.writerow(cols)
    for r in rows:
        w.writerow([r[c] for c in cols])
    return buf.getvalue()


def job_usage(job: Job, now: float) -> dict[str, float]:
    """The job's chip-seconds so far: its closed intervals plus the one still open."""
    st = job.status
    usage = dict(st.usage)
    if st.usage_from is not None and not job.ended:
        accrue(usage, job.state, job.state, len(job.chips), now - st.usage_from)
    return usage


def report(jobs: Iterable[Job], now: float, *, by: str = "user", since: float | None = None,
           cluster_id: str | None = None) -> JsonObject:
    """GetUsage: chip-seconds per user, queue or team, of the jobs submitted at or after
    ``since`` (unix s; None: all), on one cluster or all."""
    picked = [j for j in jobs if (since is None or j.created_at >= since)
              and (cluster_id is None or j.cluster_id == cluster_id)]
    rows = summarize(((key_of(j.spec, j.status.submitted_by), job_usage(j, now)) for j in picked), by)
    total = {k: round(sum(r[k] for r in rows), 3) for k in KINDS}
    return {"by": by, "since": since, "cluster_id": cluster_id, "rows": rows, "total": total,
            "jobs": len(picked)}


def counters(views: Iterable[JsonObject]) -> dict[tuple[str, str, str], float]:
    """``podfleet_chip_seconds_total`` by (queue, team, kind): closed intervals only, so
    every series only grows (job views are replaced whole, safe to read on any thread)."""
    out: dict[tuple[str, str, str], float] = {}
    for v in views:
        q, t = v.get("queue") or "default", v.get("team") or "default"
        for k, secs in (v.get("usage") or {}).items():
            out[(q, t, k)] = out.get((q, t, k), 0.0) + float(secs)
    return out
