"""Where a job's ranks sit: the job's own topology and its communicator groups.

Ranks follow the topology's chip order (torus order, x fastest; in a fleet, group by
group), and Megatron's rank order puts tp fastest, then dp, then pp. So tensor-parallel
groups land on consecutive chips along the fastest axes (on a trn2 UltraServer the
x/y NeuronLinks at 256 GB/s, before the 128 GB/s z links between instances) and
pipeline stages on the slowest dimension.

A job smaller than its topology runs on a block: either the ``block_shape`` given
(a free block from the scheduler) or the most compact block that fills the fastest
axes first.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.topology import Axis, FleetTopology, GridTopology, SwitchedTopology, Topology
from podfleet.perf.collectives import HEALTHY, LinkHealth


@functools.lru_cache(maxsize=256)
def job_topology(topo: Topology, chips: int, block_shape: tuple[int, ...] | None = None) -> Topology:
    """The sub-topology ``chips`` ranks run on (the topology itself when they fill it)."""
    if chips < 1:
        raise InvalidInputError(f"chips must be a positive integer, got {chips}", field="chips")
    if chips > topo.n_chips:
        raise InfeasibleError(
            f"chips ({chips}) > chips in topology {topo.name} ({topo.n_chips})", field="chips"
        )
    if block_shape is not None:
        return _block(topo, tuple(block_shape), chips)
    if chips == topo.n_chips:
        return topo
    if isinstance(topo, GridTopology):
        shapes = topo.shapes(chips)
        if not shapes:
            raise InfeasibleError(
                f"chips ({chips}) cannot form a block of {topo.name} {'x'.join(map(str, topo.dims))}; "
                f"valid counts: {', '.join(map(str, valid_counts(topo)))}",
                field="chips",
            )
        # Fill the fastest axes first: prefer the shape largest on the first axes.
        best = max(shapes, key=lambda s: tuple(s))
        return _block(topo, best, chips)
    if isinstance(topo, SwitchedTopology):
        return SwitchedTopology(f"{topo.name}[{chips}]", topo.chip_type, chips,
                                topo.per_chip_bw_bytes_per_s, topo.latency_s)
    if isinstance(topo, FleetTopology):
        g = topo.group.n_chips
        if chips % g == 0:
            return FleetTopology(f"{topo.group.name}:{chips // g}", topo.group, chips // g,
                                 topo.net_bw_per_chip_bytes_per_s, topo.net_latency_s)
        if chips < g:
            return job_topology(topo.group, chips)
        raise InfeasibleError(
            f"chips ({chips}) must be a multiple of the {topo.group.name} size ({g}) "
            f"or fit in one {topo.group.name}",
            field="chips",
        )
    raise InfeasibleError(f"cannot place {chips} chips on {topo.name}", field="chips")


def valid_counts(topo: Topology) -> list[int]:
    if isinstance(topo, GridTopology):
        return [n for n in range(1, topo.n_chips + 1) if topo.shapes(n)]
    if isinstance(topo, FleetTopology):
        g = topo.group.n_chips
        return [*valid_counts(topo.group), *range(2 * g, topo.n_chips + 1, g)]
    return list(range(1, topo.n_chips + 1))


def _block(topo: Topology, shape: tuple[int, ...], chips: int) -> GridTopology:
    if not isinstance(topo, GridTopology):
        raise InvalidInputError(
            f"block_shape needs a torus/mesh topology, {topo.name} is {topo.kind}", field="block_shape"
        )
    if len(shape) != len(topo.dims) or any(s < 1 or s > d for s, d in zip(shape, topo.dims, strict=True)):
        raise InvalidInputError(
            f"block_shape {list(shape)} does not fit {topo.name} dims {list(topo.dims)}", field="block_shape"
        )
    if math.prod(shape) != chips:
        raise InvalidInputError(
            f"block_shape {'x'.join(map(str, shape))} ({math.prod(shape)} chips) != chips ({chips})",
            field="block_shape",
        )
    # A block axis is a ring only when it spans the whole wrapped axis.
    axes = [
        Axis(a.name, s, a.wrap and s == a.size, a.link_bw_bytes_per_s, a.hop_latency_s)
        for a, s in zip(topo.axes, shape, strict=True)
    ]
    return GridTopology(f"{topo.name}[{'x'.join(map(str, shape))}]", topo.chip_type, axes)


def tp_group(tp: int, rank: int = 0) -> tuple[int, ...]:
    start = rank - rank % tp
    return tuple(range(start, start + tp))


def dp_group(tp: int, dp: int, rank: int = 0) -> tuple[int, ...]:
    t, rest = rank % tp, rank // tp
    p = rest // dp
    return tuple(t + tp * (d + dp * p) for d in range(dp))


def all_tp_groups(tp: int, chips: int) -> list[tuple[int, ...]]:
    return [tp_group(tp, r) for r in range(0, chips, tp)]


def all_dp_groups(tp: int, dp: int, pp: int) -> list[tuple[int, ...]]:
    return [dp_group(tp, dp, t + tp * dp * p) for p in range(pp) for t in range(tp)]


def resolve_topology(topology: str | Topology, chips: int) -> Topology:
    """A topology by name or object; a bare name too small for ``chips`` becomes a fleet
    of enough copies (``trn2-ultraserver`` with 256 chips -> ``trn2-ultraserver:4``)."""
    if not isinstance(topology, str):
        return topology
    topo = get_topology(topology)
    if ":" not in topology and chips > topo.n_chips:
        topo = get_topology(f"{topology}:{-(-chips // topo.n_chips)}")
    return topo


def block_link_map(parent: Topology, job: Topology, offset: tuple[int, ...] | None = None) -> dict[int, int]:
    """Parent link index -> job-topology link index, for a job on a block at ``offset``
    (the origin when None; a block wraps round a torus like the scheduler's blocks)."""
    if parent is job or not isinstance(parent, GridTopology) or not isinstance(job, GridTopology):
        return {}
    if len(parent.dims) != len(job.dims):
        return {}
    off = tuple(offset) if offset is not None else (0,) * len(parent.dims)
    sub = {(lk.src, lk.axis): lk.index for lk in job.links}

    def local(chip: int) -> tuple[int, ...] | None:
        c = tuple((x - o) % d for x, o, d in zip(parent.coords(chip), off, parent.dims, strict=True))
        return c if all(x < s for x, s in zip(c, job.dims, strict=True)) else None

    out = {}
    for lk in parent.links:
        a, b = local(lk.src), local(lk.dst)
        if a is not None and b is not None:
            idx = sub.get((job.index(a), lk.axis))
            if idx is not None:
                out[lk.index] = idx
    return out


def block_health(
    parent: Topology,
    job: Topology,
    offset: tuple[int, ...] | None,
    down: Iterable[int] = (),
    degraded: Mapping[int, float] | None = None,
    stretch: Mapping[int, float] | None = None,
) -> LinkHealth:
    """The health of a job's own topology on a block at ``offset`` of ``parent``, from
    the parent's down links, degraded links (bandwidth factor) and detour stretches.
    Links outside the block are left out: its collectives do not cross them."""
    degraded, stretch = degraded or {}, stretch or {}
    if parent is job:  # the job fills its topology: link indices are its own
        return LinkHealth(frozenset(down), dict(degraded), dict(stretch))
    m = block_link_map(parent, job, offset)
    if not m:
        return HEALTHY
    dn = frozenset(m[i] for i in down if i in m)
    deg = {m[i]: float(f) for i, f in degraded.items() if i in m}
    st = {m[i]: float(s) for i, s in stretch.items() if i in m}
    return LinkHealth(dn, deg, st)
