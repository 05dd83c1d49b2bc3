"""A cluster's hardware snapshot, kept as columns and turned into chip and link objects
only for the chips a reader asks for.

A render used to build one dict per chip and per link: for a 65,536-chip fleet with
196,608 links, about two seconds of the engine's time each telemetry tick while anyone
read the hardware, though a reader usually wants a page of 256 chips or a per-pod
summary. The render now keeps what it read from the fabric (states, metrics, health,
owners, modes: all as of the render), and ``chips``/``links``/``as_dict`` build the
objects from it; the whole-cluster dict is built once per snapshot, on first use.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from podfleet.control.chipmodes import ChipMode, shown_mode
from podfleet.wire import JsonObject


@dataclass(frozen=True, eq=False)
class HardwareSnapshot:
    """The hardware as of one render (engine thread); read-only afterwards, from any thread."""

    head: JsonObject  # cluster_id, name, state, type, dims, time
    coords: Sequence[list[int]]
    states: Sequence[str]
    spare: np.ndarray  # bool per chip
    modes: Mapping[int, ChipMode]  # chips whose mode is not the default
    owners: Mapping[int, str]  # chip -> job holding it
    metrics: Mapping[str, np.ndarray]  # metric -> value per chip (floats rounded; NaN is null)
    chip_health: Sequence[str] | None
    link_defs: Sequence[Mapping[str, Any]]  # static fields of each link, by index
    link_src: np.ndarray  # src chip of each link, ascending
    link_by_src: np.ndarray  # the link indices in that order
    link_states: Sequence[object]  # as the fabric gave them (a state or its name)
    link_metrics: Mapping[str, np.ndarray]
    link_health: Sequence[str] | None
    hosts: Sequence[str] = ()  # where each chip's worker lives (real fabrics)
    workers: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    placed: bool = False  # the fabric says where workers are: chips carry host and worker

    @property
    def n_chips(self) -> int:
        return len(self.states)

    def chip(self, i: int) -> JsonObject:
        out = self.chip_base(i)
        out["metrics"] = {k: _item(v, i) for k, v in self.metrics.items()}
        return out

    def chips_at(self, chips: Sequence[int]) -> list[JsonObject]:
        """Chips ``chips`` (ascending): metric columns converted per range, not per value,
        when the chips lie close together (a page)."""
        if not chips:
            return []
        lo, hi = chips[0], chips[-1] + 1
        if hi - lo > 4 * len(chips):  # scattered (a job's chips across the fleet): one by one
            return [self.chip(i) for i in chips]
        cols = {k: _column(v[lo:hi]) for k, v in self.metrics.items()}
        out = []
        for i in chips:
            c = self.chip_base(i)
            c["metrics"] = {k: v[i - lo] for k, v in cols.items()}
            out.append(c)
        return out

    def chip_base(self, i: int) -> JsonObject:
        """Chip ``i`` without its metrics (placed last, as the API has always listed them)."""
        state = self.states[i]
        out: JsonObject = {
            "index": i,
            "coords": self.coords[i],
            "state": state,
            "spare": bool(self.spare[i]),
            "mode": shown_mode(self.modes.get(i, ChipMode.SCHEDULABLE), state),
            "health": self.chip_health[i] if self.chip_health else None,
            "job": self.owners.get(i),
            "metrics": None,
        }
        if self.placed:
            out["host"] = self.hosts[i] if i < len(self.hosts) else ""
            out["worker"] = dict(self.workers[i]) if i in self.workers else None
        return out

    def link(self, j: int) -> JsonObject:
        lk, n = self.link_defs[j], len(self.link_states)
        return {**lk, "state": str(self.link_states[j]) if j < n else "up",
                "health": self.link_health[j] if self.link_health and j < len(self.link_health) else None,
                "metrics": {k: _item(v, j) for k, v in self.link_metrics.items() if j < len(v)}}

    def links_from(self, lo: int, hi: int) -> list[JsonObject]:
        """The links whose source chip is in [lo, hi)."""
        a, b = np.searchsorted(self.link_src, [lo, hi])
        return [self.link(int(j)) for j in np.sort(self.link_by_src[a:b])]

    def as_dict(self) -> JsonObject:
        """The whole snapshot as DescribeClusterHardware returns it (built once)."""
        return self._whole

    @functools.cached_property
    def _whole(self) -> JsonObject:
        if not self.head:
            return {}
        # Whole columns converted at once (not element by element as a page does).
        metrics = {k: _column(v) for k, v in self.metrics.items()}
        link_metrics = {k: _column(v) for k, v in self.link_metrics.items()}
        chips = []
        for i in range(self.n_chips):
            c = self.chip_base(i)
            c["metrics"] = {k: v[i] for k, v in metrics.items()}
            chips.append(c)
        links = []
        n, health = len(self.link_states), self.link_health
        for j, lk in enumerate(self.link_defs):
            links.append({**lk, "state": str(self.link_states[j]) if j < n else "up",
                          "health": health[j] if health and j < len(health) else None,
                          "metrics": {k: v[j] for k, v in link_metrics.items() if j < len(v)}})
        return {**self.head, "chips": chips, "links": links}

    def busy(self) -> np.ndarray:
        """bool per chip: held by a job."""
        out = np.zeros(self.n_chips, dtype=bool)
        if self.owners:
            out[np.fromiter(self.owners.keys(), dtype=np.int64, count=len(self.owners))] = True
        return out

    def healthy(self) -> np.ndarray:
        return np.fromiter((s == "healthy" for s in self.states), dtype=bool, count=self.n_chips)


def metric_column(arr: np.ndarray) -> np.ndarray:
    """A metric as the snapshot keeps it: floats as float64 rounded to 3 decimals (a
    rounded float32 still prints 17 digits)."""
    a = np.asarray(arr)
    if a.dtype.kind == "f":
        return np.round(a.astype(np.float64), 3)
    return a.copy()  # the fabric's own array moves on with the next tick


def _item(a: np.ndarray, i: int) -> object:
    if a.ndim > 1:  # a value per NeuronCore (or per port): the chip's row, as a list
        return _column(a[i])
    v = a.item(i)
    return None if isinstance(v, float) and not math.isfinite(v) else v  # JSON has no NaN/inf


def _column(a: np.ndarray) -> list[object]:
    if a.dtype.kind == "f":
        finite = np.isfinite(a)
        if not finite.all():  # JSON has no NaN/inf: send null
            b = a.astype(object)
            b[~finite] = None
            out: list[object] = b.tolist()
            return out
    return list(a.tolist())


def link_index(link_defs: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(src chips ascending, link indices in that order) for ``HardwareSnapshot``: static per
    cluster, made once."""
    src = np.fromiter((int(lk["src"]) for lk in link_defs), dtype=np.int64, count=len(link_defs))
    order = np.argsort(src, kind="stable")
    return src[order], order


_NONE = np.zeros(0, dtype=np.int64)
EMPTY = HardwareSnapshot({}, (), (), np.zeros(0, dtype=bool), {}, {}, {}, None, (), _NONE, _NONE, (), {}, None)
