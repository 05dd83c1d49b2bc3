"""Topologies: N-dimensional torus / mesh, switched nodes, and multi-group fleets.

Chip indices are integers. In a grid, coordinates are ordered (x, y, z, ...) and the
index is ``x + X*y + X*Y*z`` (x fastest). On a ``trn2-node`` that makes device id =
row*4 + col with x = col and y = row, exactly as ``neuron-ls`` numbers devices; on a
``trn2-ultraserver`` z is the instance (node) and z links are the slower
inter-instance NeuronLink.

Units: bandwidths in bytes/s per link per direction; the ``_gbps`` figures printed by
``summary()`` are GB/s (10^9 bytes/s), the unit Neuron documentation uses for
NeuronLink.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

AXIS_NAMES = ("x", "y", "z", "w", "v", "u")
# Above this many chips hop counts are computed from coordinates, not an n x n matrix.
_HOP_MATRIX_MAX_CHIPS = 4096


@dataclass(frozen=True)
class Axis:
    name: str
    size: int
    wrap: bool
    link_bw_bytes_per_s: float
    hop_latency_s: float


@dataclass(frozen=True)
class Link:
    index: int
    src: int
    dst: int
    axis: int  # axis index; for switched / network tiers, the tier index
    bw_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class Block:
    """A contiguous sub-block of a grid: shape, start offset (wrapping) and its chips.

    ``chips`` is in ring order along the block (x fastest), so consecutive ranks are
    neighbours on the fastest axis.
    """

    shape: tuple[int, ...]
    offset: tuple[int, ...]
    chips: tuple[int, ...]


class Topology:
    """Common interface. Subclasses fill ``links`` and implement ``hops``."""

    name: str
    chip_type: str
    n_chips: int
    dims: tuple[int, ...]
    links: tuple[Link, ...]
    kind: str

    # --- queries -------------------------------------------------------------
    def hops(self, a: int, b: int) -> int:
        raise NotImplementedError  # abstract: each subclass defines its own metric

    def neighbours(self, chip: int) -> list[int]:
        return list(self._adjacency()[chip])

    @functools.cached_property
    def _adjacency_cache(self) -> dict[int, list[int]]:
        adj: dict[int, list[int]] = {i: [] for i in range(self.n_chips)}
        for link in self.links:
            if link.src < self.n_chips and link.dst < self.n_chips:
                adj[link.src].append(link.dst)
                adj[link.dst].append(link.src)
        return adj

    def _adjacency(self) -> dict[int, list[int]]:
        return self._adjacency_cache

    @property
    def diameter(self) -> int:
        raise NotImplementedError  # abstract

    @property
    def avg_hops(self) -> float:
        raise NotImplementedError  # abstract

    @property
    def bisection_bw_bytes_per_s(self) -> float:
        raise NotImplementedError  # abstract

    def check_chip(self, chip: int) -> None:
        from podfleet.errors import NotFoundError

        if not 0 <= chip < self.n_chips:
            raise NotFoundError(
                f"chip {chip} does not exist; valid chips are 0-{self.n_chips - 1}", field="chip"
            )

    def summary(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "chip_type": self.chip_type,
            "chips": self.n_chips,
            "dims": list(self.dims),
            "links": len(self.links),
            "diameter": self.diameter,
            "avg_hops": round(self.avg_hops, 4),
            "bisection_gbps": round(self.bisection_bw_bytes_per_s / 1e9, 3),
        }


class GridTopology(Topology):
    """N-dimensional torus (wrap=True per axis) or mesh (wrap=False)."""

    kind = "torus"

    def __init__(self, name: str, chip_type: str, axes: Sequence[Axis]) -> None:
        if not axes or any(a.size < 1 for a in axes):
            raise ValueError("a grid needs at least one axis, each of size >= 1")
        self.name = name
        self.chip_type = chip_type
        self.axes = tuple(axes)
        self.dims = tuple(a.size for a in axes)
        self.n_chips = math.prod(self.dims)
        self.kind = "torus" if all(a.wrap for a in axes if a.size > 2) else "mesh"
        self._coords = np.stack(
            np.unravel_index(np.arange(self.n_chips), self.dims, order="F"), axis=1
        )
        self.links = tuple(self._build_links())

    @property
    def coords_array(self) -> np.ndarray:
        """[n_chips, n_axes] coordinates of every chip (read only)."""
        return self._coords

    def _build_links(self) -> Iterator[Link]:
        idx = 0
        for k, axis in enumerate(self.axes):
            if axis.size < 2:
                continue
            for chip in range(self.n_chips):
                c = list(self._coords[chip])
                if c[k] + 1 < axis.size:
                    c[k] += 1
                elif axis.wrap and axis.size > 2:
                    c[k] = 0  # ring closure; a 2-ring is a single link
                else:
                    continue
                yield Link(idx, chip, self.index(c), k, axis.link_bw_bytes_per_s, axis.hop_latency_s)
                idx += 1

    def coords(self, chip: int) -> tuple[int, ...]:
        return tuple(int(v) for v in self._coords[chip])

    def index(self, coords: Sequence[int]) -> int:
        return int(np.ravel_multi_index(tuple(coords), self.dims, order="F"))

    def axis_distance(self, k: int, a: int, b: int) -> int:
        d = abs(a - b)
        return min(d, self.dims[k] - d) if self.axes[k].wrap else d

    def hops(self, a: int, b: int) -> int:
        if self.n_chips <= _HOP_MATRIX_MAX_CHIPS:
            return int(self.hop_matrix[a, b])
        ca, cb = self._coords[a], self._coords[b]
        return sum(self.axis_distance(k, int(ca[k]), int(cb[k])) for k in range(len(self.dims)))

    def neighbours(self, chip: int) -> list[int]:
        """Neighbours in neuron-ls order: -y (up), -x (left), +y (down), +x (right), then z."""
        out: list[int] = []
        c = self.coords(chip)
        order = [(1, -1), (0, -1), (1, +1), (0, +1)] if len(self.dims) >= 2 else [(0, -1), (0, 1)]
        order += [(k, s) for k in range(2, len(self.dims)) for s in (-1, +1)]
        for k, step in order:
            size = self.dims[k]
            nc = c[k] + step
            if not 0 <= nc < size:
                if not self.axes[k].wrap or size < 2:
                    continue
                nc %= size
            n = self.index([*c[:k], nc, *c[k + 1 :]])
            if n != chip and n not in out:
                out.append(n)
        return out

    @functools.cached_property
    def hop_matrix(self) -> np.ndarray:
        total = np.zeros((self.n_chips, self.n_chips), dtype=np.int32)
        for k, axis in enumerate(self.axes):
            col = self._coords[:, k]
            d = np.abs(col[:, None] - col[None, :])
            if axis.wrap:
                d = np.minimum(d, axis.size - d)
            total += d.astype(np.int32)
        return total

    @property
    def diameter(self) -> int:
        return sum(
            (a.size // 2 if a.wrap else a.size - 1) for a in self.axes
        )

    @property
    def avg_hops(self) -> float:
        # Per axis: the sum of ring/line distances over all coordinate pairs, counted once
        # for every pair of positions on the other axes. Exact, and no n x n matrix.
        n = self.n_chips
        if n < 2:
            return 0.0
        total = 0
        for a in self.axes:
            pos = np.arange(a.size)
            d = np.abs(pos[:, None] - pos[None, :])
            if a.wrap:
                d = np.minimum(d, a.size - d)
            total += int(d.sum()) * (n // a.size) ** 2
        return total / (n * (n - 1))

    @property
    def bisection_bw_bytes_per_s(self) -> float:
        cuts = []
        for a in self.axes:
            if a.size < 2:
                continue
            crossing = (self.n_chips // a.size) * (2 if a.wrap and a.size > 2 else 1)
            cuts.append(crossing * a.link_bw_bytes_per_s)
        return min(cuts) if cuts else 0.0

    # --- sub-blocks ------------------------------------------------------------
    def shapes(self, size: int) -> list[tuple[int, ...]]:
        """All block shapes of exactly ``size`` chips that fit in this grid."""
        # Divisors axis by axis (not the product of all ranges, which is 64^6 on big grids);
        # same order as itertools.product: lexicographic, x first.
        def rec(k: int, left: int) -> Iterator[tuple[int, ...]]:
            if k == len(self.dims):
                if left == 1:
                    yield ()
                return
            for s in range(1, min(self.dims[k], left) + 1):
                if left % s == 0:
                    for rest in rec(k + 1, left // s):
                        yield (s, *rest)

        return list(rec(0, size)) if size >= 1 else []

    def block_table(self, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(offsets [n, ndim], chips [n, size]) for every placement of ``shape``."""
        return _block_table(self, tuple(shape))

    def blocks(self, shape: tuple[int, ...]) -> list[Block]:
        offsets, chips = self.block_table(shape)
        return [
            Block(tuple(shape), tuple(int(v) for v in o), tuple(int(v) for v in c))
            for o, c in zip(offsets, chips, strict=True)
        ]

    def free_blocks(self, size: int, free: np.ndarray | None = None) -> list[Block]:
        """All contiguous sub-blocks of ``size`` chips whose chips are all free.

        ``free`` is a boolean mask over chips (default: all free). Wrapping blocks are
        included on torus axes.
        """
        mask = np.ones(self.n_chips, dtype=bool) if free is None else np.asarray(free, bool)
        out: list[Block] = []
        for shape in self.shapes(size):
            offsets, chips = self.block_table(shape)
            ok = mask[chips].all(axis=1)
            for o, c in zip(offsets[ok], chips[ok], strict=True):
                out.append(Block(shape, tuple(int(v) for v in o), tuple(int(v) for v in c)))
        return out


@functools.lru_cache(maxsize=512)
def _block_table(topo: GridTopology, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    if len(shape) != len(topo.dims) or any(s < 1 or s > d for s, d in zip(shape, topo.dims, strict=True)):
        raise ValueError(f"shape {shape} does not fit dims {topo.dims}")
    starts = []
    for s, axis in zip(shape, topo.axes, strict=True):
        if s == axis.size:
            starts.append(range(1))
        elif axis.wrap:
            starts.append(range(axis.size))
        else:
            starts.append(range(axis.size - s + 1))
    offsets = np.array(list(itertools.product(*starts)), dtype=np.int64)
    local = np.stack(np.unravel_index(np.arange(math.prod(shape)), shape, order="F"), axis=1)
    coords = (offsets[:, None, :] + local[None, :, :]) % np.array(topo.dims)
    mult = np.cumprod((1, *topo.dims[:-1]))
    chips = (coords * mult).sum(axis=2)
    offsets.setflags(write=False)
    chips.setflags(write=False)
    return offsets, chips


class SwitchedTopology(Topology):
    """Chips on one non-blocking switch (NVSwitch): every pair one switch hop apart."""

    kind = "switched"

    def __init__(
        self, name: str, chip_type: str, n_chips: int, bw_bytes_per_s: float, latency_s: float
    ) -> None:
        self.name = name
        self.chip_type = chip_type
        self.n_chips = n_chips
        self.dims = (n_chips,)
        self.per_chip_bw_bytes_per_s = bw_bytes_per_s
        self.latency_s = latency_s
        # Uplinks from each chip to the switch, which has pseudo-index n_chips.
        self.links = tuple(
            Link(i, i, n_chips, 0, bw_bytes_per_s, latency_s) for i in range(n_chips)
        )

    def hops(self, a: int, b: int) -> int:
        return 0 if a == b else 1

    def neighbours(self, chip: int) -> list[int]:
        return [i for i in range(self.n_chips) if i != chip]

    @property
    def diameter(self) -> int:
        return 1 if self.n_chips > 1 else 0

    @property
    def avg_hops(self) -> float:
        return 1.0 if self.n_chips > 1 else 0.0

    @property
    def bisection_bw_bytes_per_s(self) -> float:
        return (self.n_chips // 2) * self.per_chip_bw_bytes_per_s


@dataclass(frozen=True)
class NetworkLevel:
    """One level of a fleet's network hierarchy: what a collective crossing it gets.

    ``name`` is the level a group of chips stays inside ("pod": NeuronLink; "block": the
    pods behind one spine, over EFA; "fleet": across spines). ``bw_per_chip_bytes_per_s``
    is each chip's share of the level's bandwidth, per direction."""

    name: str
    bw_per_chip_bytes_per_s: float
    latency_s: float
    source: str = ""


class FleetTopology(Topology):
    """``count`` copies of a group (pod or node) joined by a slower network tier.

    A chip crossing groups goes chip -> network -> chip: counted as 2 hops. The
    per-chip network bandwidth is the group's NIC bandwidth divided among its chips
    (e.g. EFAv3 3.2 Tbps per trn2 instance = 25 GB/s per chip).

    Groups sit in network blocks of ``pods_per_block`` (the pods behind one spine
    switch; the last block may be smaller). ``levels`` describes the network above a
    group, innermost first ("block", then "fleet"); crossing blocks costs the fleet
    level's bandwidth and latency.
    """

    kind = "fleet"

    def __init__(
        self,
        name: str,
        group: Topology,
        count: int,
        net_bw_per_chip_bytes_per_s: float,
        net_latency_s: float,
        *,
        pods_per_block: int | None = None,
        levels: tuple[NetworkLevel, ...] = (),
    ) -> None:
        if count < 1:
            raise ValueError("a fleet needs at least one group")
        self.pods_per_block = count if pods_per_block is None else int(pods_per_block)
        if self.pods_per_block < 1:
            raise ValueError("a network block needs at least one group")
        self.levels = levels or (
            NetworkLevel("block", net_bw_per_chip_bytes_per_s, net_latency_s),
            NetworkLevel("fleet", net_bw_per_chip_bytes_per_s, net_latency_s),
        )
        self.name = name
        self.group = group
        self.count = count
        self.chip_type = group.chip_type
        self.n_chips = group.n_chips * count
        self.dims = (count, *group.dims)
        self.net_bw_per_chip_bytes_per_s = net_bw_per_chip_bytes_per_s
        self.net_latency_s = net_latency_s
        # Only the intra-group links are materialised lazily per group; the network tier is
        # modelled as bandwidth per chip, not as links.
        self.links = ()
        self._n_group_links = len(group.links)

    @property
    def n_group_links(self) -> int:
        """Links inside one group (every group has the same shape)."""
        return self._n_group_links

    def split(self, chip: int) -> tuple[int, int]:
        return divmod(chip, self.group.n_chips)

    def split_pod(self, chip: int) -> int:
        """The group (pod) of a chip."""
        return chip // self.group.n_chips

    @property
    def n_blocks(self) -> int:
        return -(-self.count // self.pods_per_block)

    def block_of(self, pod: int) -> int:
        """The network block (spine) pod ``pod`` sits behind."""
        return pod // self.pods_per_block

    def block_pods(self, block: int) -> range:
        return range(block * self.pods_per_block, min(self.count, (block + 1) * self.pods_per_block))

    def level(self, name: str) -> NetworkLevel:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise KeyError(name)

    def hops(self, a: int, b: int) -> int:
        ga, la = self.split(a)
        gb, lb = self.split(b)
        return self.group.hops(la, lb) if ga == gb else 2

    def neighbours(self, chip: int) -> list[int]:
        g, local = self.split(chip)
        base = g * self.group.n_chips
        return [base + n for n in self.group.neighbours(local)]

    @property
    def diameter(self) -> int:
        return max(self.group.diameter, 2 if self.count > 1 else 0)

    @property
    def avg_hops(self) -> float:
        n, g = self.n_chips, self.group.n_chips
        if n < 2:
            return 0.0
        same = g * (g - 1) * self.count
        other = n * (n - 1) - same
        return (self.group.avg_hops * same + 2.0 * other) / (n * (n - 1))

    @property
    def bisection_bw_bytes_per_s(self) -> float:
        if self.count < 2:
            return self.group.bisection_bw_bytes_per_s
        return (self.count // 2) * self.group.n_chips * self.net_bw_per_chip_bytes_per_s

    def summary(self) -> dict[str, object]:
        out = super().summary()
        out["links"] = self._n_group_links * self.count
        out["groups"] = self.count
        out["group"] = self.group.name
        out["pods_per_block"] = self.pods_per_block
        out["blocks"] = self.n_blocks
        out["network"] = [
            {"level": lv.name, "bw_per_chip_gbps": round(lv.bw_per_chip_bytes_per_s / 1e9, 3),
             "latency_us": round(lv.latency_s * 1e6, 3), "source": lv.source}
            for lv in self.levels
        ]
        return out
