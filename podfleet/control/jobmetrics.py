"""Per-job metrics history: the training loop's figures (loss, tokens/s, step time) kept
as rollups, so ``GetJobMetrics`` can draw a loss curve of a run of any length.

Every ``progress`` event of a job folds into the open bucket of each resolution (10 s and
5 min). A closed 5-minute bucket is persisted (``JobMetricStore.save_job_metrics``): a
three-hour run keeps 36 rows, a week-long one about 2,000. The 10-second buckets live in
memory only, the newest ``RECENT_BUCKETS`` per job (the last hour), for a close look at a
run in progress. Step time is the fabric's when it reports one, else measured from the
bucket itself (time between the first and last step it saw, over the steps in between).

Engine thread only for ``record``/``close``; ``query`` may run on API threads (it reads
whole bucket dicts and copies of the deques).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podfleet.control.logbuf import rfc3339
from podfleet.errors import InvalidInputError
from podfleet.store.protocol import JobMetricStore
from podfleet.store.records import JobMetricRecord
from podfleet.wire import JsonObject

FINE_S = 10.0
COARSE_S = 300.0
RESOLUTIONS = (FINE_S, COARSE_S)
RECENT_BUCKETS = 360  # 10-second buckets kept in memory per job: one hour
METRICS = ("loss", "tokens_per_s", "step_time_s")


@dataclass
class Bucket:
    t_start: float
    step_first: int
    step_last: int
    t_first: float
    t_last: float
    count: int = 0
    stats: dict[str, list[float]] = field(default_factory=dict)  # metric -> [sum, min, max, n]

    def add(self, t: float, step: int, values: Mapping[str, float]) -> None:
        self.count += 1
        self.step_last = max(self.step_last, step)
        self.step_first = min(self.step_first, step)
        self.t_last = max(self.t_last, t)
        for k, v in values.items():
            s = self.stats.get(k)
            if s is None:
                self.stats[k] = [v, v, v, 1.0]
            else:
                s[0] += v
                s[1] = min(s[1], v)
                s[2] = max(s[2], v)
                s[3] += 1

    def to_data(self) -> JsonObject:
        out: JsonObject = {"step_first": self.step_first, "step_last": self.step_last, "count": self.count,
                               "t_first": self.t_first, "t_last": self.t_last}
        for k, (total, lo, hi, n) in self.stats.items():
            out[k] = {"avg": total / n, "min": lo, "max": hi}
        steps = self.step_last - self.step_first
        if "step_time_s" not in out and steps > 0 and self.t_last > self.t_first:
            per = (self.t_last - self.t_first) / steps
            out["step_time_s"] = {"avg": per, "min": per, "max": per, "measured": True}
        return out


def point(resolution_s: float, t_start: float, data: Mapping[str, Any]) -> JsonObject:
    """One bucket as ``GetJobMetrics`` serves it (flat: ``loss``, ``loss_min``, ...)."""
    p: JsonObject = {"time": rfc3339(t_start), "t_start": t_start, "resolution_s": resolution_s,
                         "step_first": data.get("step_first"), "step_last": data.get("step_last"),
                         "samples": data.get("count", 0)}
    for k in METRICS:
        v = data.get(k)
        p[k] = v.get("avg") if isinstance(v, Mapping) else None
        p[f"{k}_min"] = v.get("min") if isinstance(v, Mapping) else None
        p[f"{k}_max"] = v.get("max") if isinstance(v, Mapping) else None
    return p


class JobMetrics:
    def __init__(self, store: JobMetricStore) -> None:
        self.store = store
        self.open: dict[tuple[str, float], Bucket] = {}  # (job, resolution) -> open bucket
        self.recent: dict[str, deque[tuple[float, JsonObject]]] = {}  # job -> closed fine buckets
        self.span: dict[str, tuple[float, float]] = {}  # job -> (first, last) report time while it runs

    def record(self, job_id: str, t: float, detail: Mapping[str, Any]) -> None:
        """Fold one progress report (unix time ``t``) into the job's buckets."""
        step = detail.get("step")
        if step is None:
            return
        values = {k: float(v) for k in METRICS if isinstance(v := detail.get(k), int | float)}
        self.span[job_id] = (self.span.get(job_id, (t, t))[0], t)
        for res in RESOLUTIONS:
            start = t - t % res
            key = (job_id, res)
            b = self.open.get(key)
            if b is not None and b.t_start != start:
                self._close(job_id, res, b)
                b = None
            if b is None:
                b = self.open[key] = Bucket(start, int(step), int(step), t, t)
            b.add(t, int(step), values)

    def close(self, job_id: str) -> None:
        """The job ended: persist its open buckets (its history stays queryable)."""
        for res in RESOLUTIONS:
            b = self.open.pop((job_id, res), None)
            if b is not None:
                self._close(job_id, res, b, ended=True)
        self.recent.pop(job_id, None)
        self.span.pop(job_id, None)

    def _close(self, job_id: str, res: float, b: Bucket, *, ended: bool = False) -> None:
        if res == COARSE_S:
            self.store.save_job_metrics([JobMetricRecord(job_id, res, b.t_start, b.to_data())])
        elif not ended:
            self.recent.setdefault(job_id, deque(maxlen=RECENT_BUCKETS)).append((b.t_start, b.to_data()))

    def query(self, job_id: str, *, resolution_s: float | None = None, since: float = 0.0,
              limit: int = 2000) -> JsonObject:
        """The job's history, oldest first: 10-second buckets of the last hour when asked
        (or by default while the job runs and is younger than an hour), else 5-minute ones."""
        if resolution_s is not None and resolution_s not in RESOLUTIONS:
            raise InvalidInputError(f"resolution must be one of {', '.join(f'{r:g}' for r in RESOLUTIONS)} "
                                    f"seconds, got {resolution_s:g}", field="resolution",
                                    allowed=[f"{r:g}" for r in RESOLUTIONS])
        fine = list(self.recent.get(job_id, ()))
        if resolution_s is None:  # fine while the run's fine history covers all of it
            first, last = self.span.get(job_id, (0.0, float("inf")))
            resolution_s = FINE_S if last - first < RECENT_BUCKETS * FINE_S else COARSE_S
        rows: list[tuple[float, JsonObject]]
        if resolution_s == FINE_S:
            rows = fine
        else:
            rows = [(r.t_start, r.data) for r in self.store.list_job_metrics(job_id, resolution_s=COARSE_S,
                                                                               since=since, limit=limit)]
        b = self.open.get((job_id, resolution_s))
        if b is not None:
            rows = [*rows, (b.t_start, b.to_data())]
        points = [point(resolution_s, t, d) for t, d in rows if t >= since][-limit:]
        return {"job_id": job_id, "resolution_s": resolution_s, "points": points}
