"""Alpha-beta costs of collectives on the real topology.

A communicator group is reduced to *levels*, one per dimension it spans, fastest
first: a torus axis (bidirectional ring when the group covers the whole wrapped
axis, otherwise a line that hosts a unidirectional ring), a switch (NVSwitch: a ring
through the switch at the chip's port bandwidth), or the network tier of a fleet
(each chip's share of its node's NICs). Multi-level collectives run level by level
(dimension-by-dimension on a torus, hierarchical across a fleet): reduce-scatter on
level k moves the data left by the levels before it, all-gather mirrors it.

Per level of n chips, bandwidth B per direction, per-step latency alpha:

    reduce-scatter / all-gather   (n-1)*alpha + (n-1)/n * V / B      (line, switch)
                                  (n-1)*alpha + (n-1)/n * V / (2B)   (bidirectional ring)
    all-reduce                    reduce-scatter + all-gather
    all-to-all                    (n-1)*alpha + V*S/(2nB), S = sum_d min(d, n-d) (bidir ring)
                                  (n-1)*alpha + floor(n/2)*ceil(n/2)/n * V / B   (line)
                                  (n-1)*alpha + (n-1)/n * V / B      (switch, network)

A group whose members sit s apart on an axis shares each link with s-1 other groups
(all groups of a kind run at once), so it gets B/s and s hops per step.

Link state: a down link's traffic is rerouted around it through a neighbouring ring,
a detour whose links it shares, so the ring through it runs at ``DETOUR_FACTOR`` of
its bandwidth and each step pays the detour's extra hops: its stretch (detour hops /
direct hops, ``LinkHealth.stretch``; 3 for the square detour of a torus link, the
default) minus one. A degraded link runs at its factor. A ring is as fast as its
slowest link.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from podfleet.hardware.topology import FleetTopology, GridTopology, SwitchedTopology, Topology

DETOUR_FACTOR = 0.5
DETOUR_EXTRA_HOPS = 2


class LevelKind(StrEnum):
    bidir_ring = "bidir_ring"
    line = "line"
    switch = "switch"


@dataclass(frozen=True)
class Level:
    kind: LevelKind
    size: int
    bw_bytes_per_s: float  # per chip, per direction, after sharing and link state
    step_latency_s: float
    # Ranks per member chip (NeuronCores, ``with_core_ranks``): the ring runs over
    # size * core_ranks ranks, while what the next level carries is per chip.
    core_ranks: int = 1
    network: bool = False  # the network tier of a fleet (NICs), not chip-to-chip links


@dataclass(frozen=True)
class LinkHealth:
    """Links that are down, and degraded links with their bandwidth factor (0-1].

    ``stretch``: per down link, the hops of its detour over its direct hops (a router's
    ``detour(link).hops``); a down link not named uses ``1 + DETOUR_EXTRA_HOPS``.
    """

    down: frozenset[int] = frozenset()
    degraded: Mapping[int, float] = field(default_factory=dict, hash=False, compare=False)
    stretch: Mapping[int, float] = field(default_factory=dict, hash=False, compare=False)
    _key: tuple[object, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "down", frozenset(self.down))
        for link, s in dict(self.stretch).items():
            if not s >= 1.0:
                raise ValueError(f"stretch of link {link} must be >= 1, got {s}")
        key = (tuple(sorted(self.down)), tuple(sorted(dict(self.degraded).items())),
               tuple(sorted((k, float(v)) for k, v in dict(self.stretch).items() if k in self.down)))
        object.__setattr__(self, "_key", key)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LinkHealth) and self._key == other._key

    @property
    def empty(self) -> bool:
        return not self.down and not self.degraded

    def factor(self, link: int) -> float:
        if link in self.down:
            return DETOUR_FACTOR
        return float(self.degraded.get(link, 1.0))

    def extra_hops(self, link: int) -> float:
        """Hops a step over ``link`` pays beyond the direct one (its detour's, when down)."""
        if link not in self.down:
            return 0.0
        return float(self.stretch.get(link, 1.0 + DETOUR_EXTRA_HOPS)) - 1.0

    def shifted(self, offset: int, count: int) -> LinkHealth:
        """The health of links [offset, offset+count) renumbered from 0 (one fleet group)."""
        down = frozenset(i - offset for i in self.down if offset <= i < offset + count)
        deg = {i - offset: f for i, f in self.degraded.items() if offset <= i < offset + count}
        st = {i - offset: f for i, f in self.stretch.items() if offset <= i < offset + count}
        return LinkHealth(down, deg, st)


HEALTHY = LinkHealth()


# --- cost of one level --------------------------------------------------------------
def _rs_level(lv: Level, nbytes: float, link_eff: float = 1.0) -> float:
    if lv.size <= 1:
        return 0.0
    n = lv.size * lv.core_ranks
    bw = lv.bw_bytes_per_s * link_eff * (2.0 if lv.kind == LevelKind.bidir_ring else 1.0)
    return (n - 1) * lv.step_latency_s + (n - 1) / n * nbytes / bw


def _a2a_level(lv: Level, nbytes: float) -> float:
    n = lv.size
    if n <= 1:
        return 0.0
    alpha = (n - 1) * lv.step_latency_s
    if lv.kind == LevelKind.bidir_ring:
        s = sum(min(d, n - d) for d in range(1, n))
        return alpha + nbytes * s / (2 * n * lv.bw_bytes_per_s)
    if lv.kind == LevelKind.line:
        return alpha + (n // 2) * ((n + 1) // 2) / n * nbytes / lv.bw_bytes_per_s
    return alpha + (n - 1) / n * nbytes / lv.bw_bytes_per_s


def reduce_scatter_s(levels: Sequence[Level], nbytes: float, link_eff: float = 1.0) -> float:
    """Reduce-scatter of ``nbytes`` per chip (input size), level by level."""
    t, v = 0.0, float(nbytes)
    for lv in levels:
        t += _rs_level(lv, v, link_eff)
        v /= lv.size
    return t


def all_gather_s(levels: Sequence[Level], nbytes: float, link_eff: float = 1.0) -> float:
    """All-gather to ``nbytes`` per chip (output size): the mirror of reduce-scatter."""
    return reduce_scatter_s(levels, nbytes, link_eff)


def all_reduce_s(levels: Sequence[Level], nbytes: float, link_eff: float = 1.0) -> float:
    return reduce_scatter_s(levels, nbytes, link_eff) + all_gather_s(levels, nbytes, link_eff)


def all_to_all_s(levels: Sequence[Level], nbytes: float, link_eff: float = 1.0) -> float:
    return sum(
        _a2a_level(replace(lv, bw_bytes_per_s=lv.bw_bytes_per_s * link_eff), nbytes)
        for lv in levels
    )


def ring_all_reduce_s(n: int, nbytes: float, bw_bytes_per_s: float, alpha_s: float) -> float:
    """Closed form for one unidirectional ring: 2(n-1)*alpha + 2(n-1)/n * S/B."""
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * nbytes / bw_bytes_per_s


# --- group -> levels --------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _grid_link_index(topo: GridTopology) -> dict[tuple[int, int], int]:
    """(chip, axis) -> index of the link from chip to its + neighbour on that axis."""
    return {(lk.src, lk.axis): lk.index for lk in topo.links}


def _grid_levels(topo: GridTopology, chips: tuple[int, ...], health: LinkHealth) -> list[Level]:
    coords = topo.coords_array[list(chips)]
    sets = [sorted({int(v) for v in coords[:, k]}) for k in range(len(topo.dims))]
    if math.prod(len(s) for s in sets) != len(chips):
        return [_fallback_level(topo, chips)]
    levels = []
    for k, vals in enumerate(sets):
        n = len(vals)
        if n < 2:
            continue
        axis = topo.axes[k]
        gaps = [b - a for a, b in itertools.pairwise(vals)]
        stride = max(gaps)
        full_ring = axis.wrap and axis.size > 2 and len(set(gaps)) == 1 and n * stride == axis.size
        kind = LevelKind.bidir_ring if full_ring else LevelKind.line
        span = range(axis.size) if full_ring else range(vals[0], vals[-1])
        factor, extra = (1.0, 0.0) if health.empty else _axis_factor(topo, k, sets, span, health)
        hops = stride + extra
        levels.append(
            Level(kind, n, axis.link_bw_bytes_per_s / stride * factor, axis.hop_latency_s * hops)
        )
    return sorted(levels, key=lambda lv: -lv.bw_bytes_per_s)


def _axis_factor(
    topo: GridTopology, k: int, sets: list[list[int]], span: range, health: LinkHealth
) -> tuple[float, float]:
    """(bandwidth factor of the slowest link, largest extra hops of a step) on axis k."""
    index = _grid_link_index(topo)
    others = [s if j != k else [0] for j, s in enumerate(sets)]
    worst, extra = 1.0, 0.0
    for base in _product(others):
        for x in span:
            c = list(base)
            c[k] = x
            link = index.get((topo.index(c), k))
            if link is not None:
                worst = min(worst, health.factor(link))
                extra = max(extra, health.extra_hops(link))
    return worst, extra


def _product(lists: list[list[int]]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for values in lists:
        out = [(*p, v) for p in out for v in values]
    return out


def _fallback_level(topo: Topology, chips: tuple[int, ...]) -> Level:
    """An irregular group: one ring in rank order over the slowest links it may cross."""
    n = len(chips)
    hops = [max(1, topo.hops(a, b)) for a, b in zip(chips, chips[1:] + chips[:1], strict=True)]
    avg = sum(hops) / n
    if isinstance(topo, GridTopology):
        bw = min(a.link_bw_bytes_per_s for a in topo.axes) / avg
        lat = max(a.hop_latency_s for a in topo.axes) * avg
    else:
        bw, lat = min(lk.bw_bytes_per_s for lk in topo.links), max(lk.latency_s for lk in topo.links)
    return Level(LevelKind.line, n, bw, lat)


def group_levels(topo: Topology, chips: Sequence[int], health: LinkHealth = HEALTHY) -> tuple[Level, ...]:
    """The levels a communicator over ``chips`` (in rank order) runs on, fastest first."""
    return _group_levels(topo, tuple(chips), health)


@functools.lru_cache(maxsize=4096)
def _group_levels(topo: Topology, chips: tuple[int, ...], health: LinkHealth) -> tuple[Level, ...]:
    if len(chips) <= 1:
        return ()
    if isinstance(topo, GridTopology):
        return tuple(_grid_levels(topo, chips, health))
    if isinstance(topo, SwitchedTopology):
        factor = min((health.factor(c) for c in chips), default=1.0) if not health.empty else 1.0
        return (Level(LevelKind.switch, len(chips), topo.per_chip_bw_bytes_per_s * factor, topo.latency_s),)
    if isinstance(topo, FleetTopology):
        return _fleet_levels(topo, chips, health)
    return (_fallback_level(topo, chips),)


def _fleet_levels(topo: FleetTopology, chips: tuple[int, ...], health: LinkHealth) -> tuple[Level, ...]:
    g_size = topo.group.n_chips
    by_group: dict[int, list[int]] = {}
    for c in chips:
        g, in_group = divmod(c, g_size)
        by_group.setdefault(g, []).append(in_group)
    local_sets = {tuple(v) for v in by_group.values()}
    net = Level(LevelKind.switch, len(by_group), topo.net_bw_per_chip_bytes_per_s, topo.net_latency_s,
                network=True)
    if len(local_sets) != 1:
        return (Level(LevelKind.switch, len(chips), net.bw_bytes_per_s, net.step_latency_s, network=True),)
    local = next(iter(local_sets))
    n_links = topo.n_group_links
    worst: list[Level] | None = None
    for g in by_group if not health.empty else [next(iter(by_group))]:
        lv = list(_group_levels(topo.group, local, health.shifted(g * n_links, n_links)))
        worst = lv if worst is None else [
            a if a.bw_bytes_per_s <= b.bw_bytes_per_s else b for a, b in zip(worst, lv, strict=True)
        ]
    levels = list(worst or [])
    if len(by_group) > 1:
        levels.append(net)
    return tuple(levels)


@functools.lru_cache(maxsize=4096)
def p2p_s(topo: Topology, a: int, b: int, nbytes: float, link_eff: float = 1.0,
          net_eff: float | None = None) -> float:
    """Point-to-point transfer time between two chips (pipeline sends); ``net_eff``: the
    network tier's efficiency where it differs from the links' (None: ``link_eff``)."""
    if a == b or nbytes <= 0:
        return 0.0
    if isinstance(topo, FleetTopology):
        ga, la = topo.split(a)
        gb, lb = topo.split(b)
        if ga != gb:
            ne = link_eff if net_eff is None else net_eff
            return topo.net_latency_s + nbytes / (topo.net_bw_per_chip_bytes_per_s * ne)
        return p2p_s(topo.group, la, lb, nbytes, link_eff)
    if isinstance(topo, SwitchedTopology):
        return topo.latency_s + nbytes / (topo.per_chip_bw_bytes_per_s * link_eff)
    if isinstance(topo, GridTopology):
        ca, cb = topo.coords(a), topo.coords(b)
        crossed = [k for k in range(len(topo.dims)) if ca[k] != cb[k]]
        bw = min(topo.axes[k].link_bw_bytes_per_s for k in crossed)
        lat = sum(topo.axis_distance(k, ca[k], cb[k]) * topo.axes[k].hop_latency_s for k in crossed)
        return lat + nbytes / (bw * link_eff)
    return nbytes / (min(lk.bw_bytes_per_s for lk in topo.links) * link_eff)


def with_core_ranks(levels: tuple[Level, ...], core_ranks: int) -> tuple[Level, ...]:
    """The levels of a group whose every chip holds ``core_ranks`` ranks (NeuronCores),
    run as one flat ring: the fastest level's ring has ``core_ranks`` times the ranks (the
    chip's cores sit next to each other on it), so each step moves 1/(t*c) of the data,
    (t*c-1)/(t*c) of it crosses the links instead of (t-1)/t, and there are t*c-1 steps.
    Later levels carry what a chip holds, as before."""
    if core_ranks <= 1 or not levels:
        return levels
    return (replace(levels[0], core_ranks=core_ranks), *levels[1:])


def scale_network(levels: tuple[Level, ...], factor: float) -> tuple[Level, ...]:
    """``levels`` with the network tier's bandwidth times ``factor`` (its efficiency over
    the links' efficiency, where a chip's NICs reach a different fraction than its links)."""
    if factor == 1.0:
        return levels
    return tuple(replace(lv, bw_bytes_per_s=lv.bw_bytes_per_s * factor) if lv.network else lv for lv in levels)
