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

Usage over time (``series``, GetUsage ``?bucket=``) reads the job's spans: each closed
interval in an accounted state as [start, end, chips], runs of equal chips merged (a
checkpoint changes the kind, not the chips held), so a job keeps a few spans, not one per
checkpoint. Busy + reserved + lost is exactly chips held times time, so the spans' sum
is the job's chip-seconds; the split by kind is not kept over time. Jobs recorded before
spans existed count in the totals but not in the series.
"""

from __future__ import annotations

import csv
import io
import math
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
# GetUsage's ``bucket`` choices, in seconds; a series holds at most the newest MAX_BUCKETS.
BUCKETS = {"1m": 60, "5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "1d": 86400}
MAX_BUCKETS = 1000


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


def add_span(spans: list[list[float]], state: JobState, start: float, end: float, chips: int) -> None:
    """File the closed interval [start, end) in ``state`` holding ``chips`` as a span,
    extending the last one where it ends at ``start`` with as many chips."""
    if state not in KIND_OF_STATE or chips <= 0 or end <= start:
        return
    if spans and spans[-1][2] == chips and spans[-1][1] == start:
        spans[-1][1] = end
        return
    spans.append([start, end, float(chips)])


def job_spans(job: Job, now: float) -> list[list[float]]:
    """The job's spans so far: the closed ones plus the interval still open."""
    st = job.status
    spans = [list(sp) for sp in st.usage_spans]
    if st.usage_from is not None and not job.ended:
        add_span(spans, job.state, st.usage_from, now, len(job.chips))
    return spans


def series(items: Iterable[tuple[str, list[list[float]]]], now: float, bucket_s: int,
           since: float | None = None) -> JsonObject:
    """Chip-hours per group in buckets of ``bucket_s`` (aligned to the epoch) from
    ``since`` (None: the first span) to ``now``, the newest MAX_BUCKETS at most; a span
    across a bucket edge is split by time."""
    per: dict[str, list[list[float]]] = {}
    for name, spans in items:
        per.setdefault(name, []).extend(spans)
    starts = [sp[0] for spans in per.values() for sp in spans]
    begin = since if since is not None else min(starts, default=None)
    if begin is None or begin > now:
        return {"bucket_s": bucket_s, "t": [], "groups": [{"name": n, "chip_hours": []} for n in sorted(per)]}
    first = math.floor(begin / bucket_s) * bucket_s
    n = max(1, math.ceil((now - first) / bucket_s))
    if n > MAX_BUCKETS:
        first += (n - MAX_BUCKETS) * bucket_s
        n = MAX_BUCKETS
    last = first + n * bucket_s
    groups = []
    for name in sorted(per):
        acc = [0.0] * n
        for a, b, chips in per[name]:
            a, b = max(a, first), min(b, last)
            i = int((a - first) // bucket_s)
            while a < b and i < n:
                edge = min(b, first + (i + 1) * bucket_s)
                acc[i] += chips * (edge - a)
                a, i = edge, i + 1
        groups.append({"name": name, "chip_hours": [round(x / 3600.0, 4) for x in acc]})
    return {"bucket_s": bucket_s, "t": [first + i * bucket_s for i in range(n)], "groups": groups}


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
           cluster_id: str | None = None, bucket: str | None = None) -> JsonObject:
    """GetUsage: chip-seconds per user, queue or team, of the jobs submitted at or after
    ``since`` (unix s; None: all), on one cluster or all; with ``bucket`` (a BUCKETS key)
    also their chip-hours over time (``series``)."""
    picked = [j for j in jobs if (since is None or j.created_at >= since)
              and (cluster_id is None or j.cluster_id == cluster_id)]
    keys = [key_of(j.spec, j.status.submitted_by) for j in picked]
    rows = summarize(((k, job_usage(j, now)) for k, j in zip(keys, picked, strict=True)), by)
    total = {k: round(sum(r[k] for r in rows), 3) for k in KINDS}
    out: JsonObject = {"by": by, "since": since, "cluster_id": cluster_id, "rows": rows, "total": total,
                       "jobs": len(picked)}
    if bucket is not None:
        if bucket not in BUCKETS:
            raise UnknownNameError("usage bucket", bucket, tuple(BUCKETS), field="bucket")
        out["series"] = series(((k[by], job_spans(j, now)) for k, j in zip(keys, picked, strict=True)),
                               now, BUCKETS[bucket], since)
    return out


def counters(views: Iterable[JsonObject]) -> dict[tuple[str, str, str], float]:
    """``podfleet_chip_seconds_total`` by (queue, team, kind): closed intervals only, so
    every series only grows (job views are replaced whole, safe to read on any thread)."""
    out: dict[tuple[str, str, str], float] = {}
    for v in views:
        q, t = v.get("queue") or "default", v.get("team") or "default"
        for k, secs in (v.get("usage") or {}).items():
            out[(q, t, k)] = out.get((q, t, k), 0.0) + float(secs)
    return out
