"""Telemetry rollups, in memory (``protocol.RollupStore``): a bucket's figures are kept
as read-only arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from podfleet.store.memory.base import MemoryBase
from podfleet.store.records import RollupRecord


class MemoryRollups(MemoryBase):
    KEPT = {"_rollups": dict}
    _rollups: dict[tuple[str, str, str, float, float], RollupRecord]

    def save_rollups(self, records: Sequence[RollupRecord]) -> None:
        with self._lock:
            self._touch("_rollups")
            for r in records:
                self._rollups[(r.cluster_id, r.scope, r.metric, float(r.resolution_s), float(r.t_start))] = _kept(r)

    def list_rollups(self, cluster_id: str, *, resolution_s: float, since: float = 0.0, scope: str | None = None,
                     metric: str | None = None, limit: int = 100_000) -> list[RollupRecord]:
        with self._lock:
            out = [_copy(r) for (c, sc, m, res, t), r in self._rollups.items()
                   if c == cluster_id and res == float(resolution_s) and t >= since
                   and scope in (None, sc) and metric in (None, m)]
        return sorted(out, key=lambda r: r.t_start)[:limit]

    def prune_rollups(self, *, resolution_s: float, before: float) -> int:
        return self._prune("_rollups", lambda k, _r: k[3] == float(resolution_s) and k[4] < before)


def _frozen(values: Sequence[float]) -> Any:
    """Values as a read-only float64 array, without a copy when they already are one (the
    health monitor's rollups): 8 bytes a value where a list of floats takes 32, and
    isolated from the caller as a copy would be, since nobody can write it."""
    a = np.asarray(values, np.float64)
    if a.flags.writeable:
        a = a.copy() if a is values else a
        a.flags.writeable = False
    return a


def _kept(r: RollupRecord) -> RollupRecord:
    """The stored form of a rollup: its values as read-only arrays."""
    return RollupRecord(r.cluster_id, r.scope, r.metric, r.resolution_s, r.t_start,
                        _frozen(r.avg), _frozen(r.min), _frozen(r.max), r.count)


def _copy(r: RollupRecord) -> RollupRecord:
    """A private copy of a stored rollup, with the record's lists of floats."""
    return RollupRecord(r.cluster_id, r.scope, r.metric, r.resolution_s, r.t_start,
                        np.asarray(r.avg).tolist(), np.asarray(r.min).tolist(), np.asarray(r.max).tolist(), r.count)
