"""Congestion between jobs: every flow crossing a link gets its max-min fair share.

A job's gradient ring sends from each rank to the next (its ring order, else rank
order); each of those ring edges is routed over the torus, one direction of each link
it crosses (NeuronLinks are full duplex: the two directions are separate capacities).
A job is one *flow* with a weight per directed link: how many of its ring edges cross
it. Every ring edge carries the same bytes at once, so the job's ring runs at rate r
(bytes per second per edge) only if ``w * r <= capacity`` on every link it uses.

Rates are max-min fair (progressive filling): all flows' rates rise together; when a
link fills, the flows crossing it stop there; the rest keep rising. A job's
*slowdown* is the per-edge bandwidth its step time assumed (the twin's
``job_link_bw``: the slowest live link among its chips) over its fair rate, at least 1:
the twin stretches the job's exposed communication by it. It is 1 for a ring laid on
the torus (the scheduler's blocks, snake rank order) with nobody else on its links; it
grows when the job's route crosses slower links than its own, when its own edges pile
onto a link (a scattered gang, a rank moved far away) and when other jobs' rings
share its links. The twin assumes that
the communication phases of jobs sharing a link overlap (a worst case; close for the
communication-heavy jobs where congestion matters).

Cheap by construction: a job's flow is routed once per placement, every ring edge in
one vectorised numpy pass (and again only when a link it crosses changes state); flows that share no link with another flow keep
rate = alone without entering the filling, which then runs over the few contended
flows only, vectorised over their (flow, link) entries.

Routing (``Congestion.routing``): ``dor`` is dimension-ordered (x, then y, then z;
the + way on a tie), around down links by the router's precomputed detour;
``adaptive`` spreads a ring edge over the minimal paths (every axis order, both ways
on a tie) and takes the one whose links carry the least traffic already; where every
minimal path is down or already carries traffic, it also weighs the paths two hops
longer (a step sideways, a minimal path beside the direct one, a step back; the
router's detour among them) and takes one when its hottest link is quieter, so a
collective detours around hot and failed links.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from podfleet.hardware.routing import NoRouteError, Router
from podfleet.hardware.topology import FleetTopology, GridTopology, Topology

ROUTINGS = ("dor", "adaptive")


@dataclass(frozen=True)
class Flow:
    """One job's traffic: directed link ids (``2 * link + direction``) and the number of
    its ring edges crossing each."""

    links: np.ndarray  # int64
    weights: np.ndarray  # float64


class GridPaths:
    """Minimal paths on one grid: per-axis step tables, as directed link ids."""

    def __init__(self, topo: GridTopology) -> None:
        n, nd = topo.n_chips, len(topo.dims)
        self.topo = topo
        self.nbr = np.full((nd, 2, n), -1, dtype=np.int64)
        self.dlink = np.full((nd, 2, n), -1, dtype=np.int64)
        for ln in topo.links:
            self.nbr[ln.axis, 0, ln.src], self.dlink[ln.axis, 0, ln.src] = ln.dst, 2 * ln.index
            self.nbr[ln.axis, 1, ln.dst], self.dlink[ln.axis, 1, ln.dst] = ln.src, 2 * ln.index + 1
        self.coords = topo.coords_array
        self.sizes = tuple(topo.dims)
        self.ring = tuple(a.wrap and a.size > 2 for a in topo.axes)
        self.link_src = np.array([ln.src for ln in topo.links], dtype=np.int64)

    def _ways(self, k: int, a: int, b: int) -> list[tuple[int, int]]:
        """(direction, hops) of the shortest ways along axis k from coordinate a to b."""
        if a == b:
            return [(0, 0)]
        size = self.sizes[k]
        if self.ring[k]:
            fwd = (b - a) % size
            back = size - fwd
            if fwd == back:
                return [(0, fwd), (1, back)]
            return [(0, fwd)] if fwd < back else [(1, back)]
        return [(0, b - a)] if b > a else [(1, a - b)]

    def walk(self, src: int, order: Sequence[int], ways: Sequence[tuple[int, int]]) -> list[int]:
        out, cur = [], src
        for k in order:
            d, hops = ways[k]
            for _ in range(hops):
                out.append(int(self.dlink[k, d, cur]))
                cur = int(self.nbr[k, d, cur])
        return out

    def dor(self, src: int, dst: int) -> list[int]:
        ca, cb = self.coords[src], self.coords[dst]
        ways = [self._ways(k, int(ca[k]), int(cb[k]))[0] for k in range(len(self.sizes))]
        return self.walk(src, range(len(self.sizes)), ways)

    def dor_many(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Dimension-ordered routes of many edges at once: (edge of each hop, its directed
        link, hops per edge). Same routes as ``dor``, in one numpy pass per axis."""
        cur = self.coords[src].astype(np.int64)
        tgt = self.coords[dst]
        n_edges = src.size
        edges, links = [], []
        total_hops = np.zeros(n_edges, dtype=np.int64)
        for k, size in enumerate(self.sizes):
            a, b = cur[:, k], tgt[:, k]
            if self.ring[k]:
                fwd = (b - a) % size
                plus = fwd <= size - fwd  # a tie goes the + way
                hops = np.where(plus, fwd, size - fwd)
            else:
                plus = b > a
                hops = np.abs(b - a)
            total = int(hops.sum())
            if total:
                e = np.repeat(np.arange(n_edges), hops)
                j = np.arange(total) - np.repeat(np.cumsum(hops) - hops, hops)
                pos = cur[e]
                pos[:, k] = (a[e] + np.where(plus[e], j, -j)) % size
                chip = np.ravel_multi_index(tuple(pos.T), self.sizes, order="F")
                edges.append(e)
                links.append(self.dlink[k, np.where(plus[e], 0, 1), chip])
                total_hops += hops
            cur[:, k] = b
        if not edges:
            return np.empty(0, np.int64), np.empty(0, np.int64), total_hops
        e_all, l_all = np.concatenate(edges), np.concatenate(links)
        order = np.argsort(e_all, kind="stable")
        return e_all[order], l_all[order], total_hops

    def minimal(self, src: int, dst: int) -> list[list[int]]:
        """Every minimal path that turns at most once per axis (each axis order, each
        shortest way), DOR's first."""
        ca, cb = self.coords[src], self.coords[dst]
        per_axis = [self._ways(k, int(ca[k]), int(cb[k])) for k in range(len(self.sizes))]
        moving = [k for k in range(len(self.sizes)) if ca[k] != cb[k]]
        seen: list[list[int]] = []
        for ways in itertools.product(*per_axis):
            for order in itertools.permutations(moving):
                p = self.walk(src, order, ways)
                if p not in seen:
                    seen.append(p)
        return seen


    def detours(self, src: int, dst: int) -> list[list[int]]:
        """Paths two hops longer than minimal: a step sideways (along an axis, either way),
        a minimal path beside the direct one, a step back; none visits a chip twice."""
        out: list[list[int]] = []
        for k in range(len(self.sizes)):
            for d in (0, 1):
                a2, b2 = int(self.nbr[k, d, src]), int(self.nbr[k, d, dst])
                if a2 < 0 or b2 < 0 or a2 in (src, dst) or b2 in (src, dst):
                    continue
                for mid in self.minimal(a2, b2):
                    p = [int(self.dlink[k, d, src]), *mid, int(self.dlink[k, 1 - d, b2])]
                    if self._simple(src, p) and p not in out:
                        out.append(p)
        return out

    def _simple(self, src: int, path: list[int]) -> bool:
        """True when ``path`` (directed links from ``src``) visits no chip twice."""
        seen, cur = {src}, src
        for dl in path:
            ln, d = divmod(dl, 2)
            cur = int(self.topo.links[ln].dst if d == 0 else self.topo.links[ln].src)
            if cur in seen:
                return False
            seen.add(cur)
        return True


@functools.lru_cache(maxsize=16)
def grid_paths(topo: GridTopology) -> GridPaths:
    return GridPaths(topo)


def max_min_rates(cap: np.ndarray, flows: Sequence[Flow]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fair rate, alone rate, ideal rate) per flow under directed capacities ``cap``
    (progressive filling; flows that share no link with another keep their alone rate).
    Ideal: one ring edge per link (``min capacity``); alone: its own edges share links."""
    n = len(flows)
    alone = np.full(n, np.inf)
    rate = np.full(n, np.inf)
    ideal = np.full(n, np.inf)
    if n == 0:
        return rate, alone, ideal
    sizes = np.array([f.links.size for f in flows], dtype=np.int64)
    if not sizes.any():
        return rate, alone, ideal
    l_e = np.concatenate([f.links for f in flows])
    w_e = np.concatenate([f.weights for f in flows])
    f_e = np.repeat(np.arange(n), sizes)
    has = sizes > 0
    starts = (np.cumsum(sizes) - sizes)[has]
    ideal[has] = np.minimum.reduceat(cap[l_e], starts)
    alone[has] = np.minimum.reduceat(cap[l_e] / w_e, starts)
    rate[:] = alone
    users = np.bincount(l_e, minlength=cap.size)
    shared = users[l_e] > 1
    if not shared.any():
        return rate, alone, ideal
    contended = np.zeros(n, dtype=bool)
    contended[f_e[shared]] = True
    keep = contended[f_e]
    l_c, w_c, f_c = l_e[keep], w_e[keep], f_e[keep]
    rem = cap.astype(np.float64).copy()
    active = contended.copy()
    level = np.zeros(n)
    for _ in range(int(contended.sum()) + 1):
        on = active[f_c]
        if not on.any():
            break
        load = np.bincount(l_c[on], weights=w_c[on], minlength=cap.size)
        used = load > 0
        inc = float((rem[used] / load[used]).min())
        level[active] += inc
        rem -= load * inc
        full = used & (rem <= 1e-9 * np.maximum(cap, 1.0))
        hit = full[l_c] & on
        active[f_c[hit]] = False
    rate[contended] = level[contended]
    return rate, alone, ideal


class Congestion:
    """The twin's link sharing: flows of running jobs, their fair rates and link load.

    ``set_job`` / ``drop_job`` as jobs start, move and stop; ``slowdown(job)`` and
    ``utilization()`` recompute lazily when something changed.
    """

    def __init__(self, topology: Topology, n_links: int) -> None:
        self.topology = topology
        self.n_links = n_links
        self.routing = "dor"
        self._rings: dict[str, tuple[int, ...]] = {}
        self._flows: dict[str, Flow] = {}
        self._duty: dict[str, float] = {}
        self._rates: dict[str, float] = {}  # fair rate per ring edge, bytes/s
        self._alone: dict[str, float] = {}
        self._ideal: dict[str, float] = {}
        self._cap: np.ndarray | None = None
        self._down: frozenset[int] = frozenset()
        self._routers: dict[int, Router] = {}
        self._dirty = True
        self._util: np.ndarray | None = None  # cached utilization(); None after any change
        self._load: np.ndarray | None = None  # cached directed_load(); None after any change

    # --- what runs ------------------------------------------------------------------
    def set_routing(self, mode: str) -> None:
        if mode not in ROUTINGS:
            from podfleet.errors import UnknownNameError

            raise UnknownNameError("routing", mode, ROUTINGS, field="routing")
        if mode != self.routing:
            self.routing = mode
            self._flows.clear()
            self._dirty = True

    def set_job(self, job_id: str, ring: Sequence[int]) -> None:
        ring = tuple(ring)
        if self._rings.get(job_id) != ring:
            self._rings[job_id] = ring
            self._flows.pop(job_id, None)
            self._dirty = True

    def drop_job(self, job_id: str) -> None:
        if self._rings.pop(job_id, None) is not None:
            self._flows.pop(job_id, None)
            self._duty.pop(job_id, None)
            self._dirty = True

    def set_duty(self, job_id: str, share: float) -> None:
        """The share of the job's step spent communicating (for link utilization)."""
        share = round(float(share), 3)  # a metric: no recompute for a change in the 4th digit
        if self._duty.get(job_id) != share:
            self._duty[job_id] = share
            self._util = None

    def set_capacity(self, bw_bytes_per_s: np.ndarray, down: Iterable[int]) -> None:
        """Per-link bandwidth (per direction) and the links that are down; flows crossing
        a link whose state changed are routed again."""
        down = frozenset(int(x) for x in down)
        cap = np.repeat(np.asarray(bw_bytes_per_s, dtype=np.float64), 2)
        if self._cap is not None and down == self._down and np.array_equal(cap, self._cap):
            return
        if down != self._down:
            changed = {2 * x + d for x in (down ^ self._down) for d in (0, 1)}
            for job, f in list(self._flows.items()):
                if changed.intersection(f.links.tolist()) or self.routing == "adaptive":
                    del self._flows[job]
            self._routers.clear()
        self._cap, self._down = cap, down
        self._dirty = True

    # --- results --------------------------------------------------------------------
    def slowdown(self, job_id: str, assumed_bw: float | None = None) -> float:
        """How much slower the job's ring runs than at ``assumed_bw`` per edge (default:
        its ideal, one edge per link on its slowest link); >= 1."""
        self._refresh()
        rate = self._rates.get(job_id, np.inf)
        base = self._ideal.get(job_id, np.inf) if assumed_bw is None else assumed_bw
        return max(1.0, base / rate) if 0 < rate < np.inf and np.isfinite(base) else 1.0

    def own_slowdown(self, job_id: str, assumed_bw: float | None = None) -> float:
        """The slowdown the job would have alone (its own edges sharing links)."""
        self._refresh()
        rate = self._alone.get(job_id, np.inf)
        base = self._ideal.get(job_id, np.inf) if assumed_bw is None else assumed_bw
        return max(1.0, base / rate) if 0 < rate < np.inf and np.isfinite(base) else 1.0

    def utilization(self) -> np.ndarray:
        """float [n_links]: the busier direction's load while jobs communicate, weighted
        by each job's communication share of its step (0-1)."""
        self._refresh()
        if self._util is not None:
            return self._util
        jobs = list(self._flows)
        load = np.zeros(2 * self.n_links)
        if jobs:
            scale = np.array([self._rates.get(j, 0.0) * self._duty.get(j, 1.0) for j in jobs])
            scale[~np.isfinite(scale)] = 0.0
            sizes = np.array([self._flows[j].links.size for j in jobs])
            links = np.concatenate([self._flows[j].links for j in jobs])
            w = np.concatenate([self._flows[j].weights for j in jobs]) * np.repeat(scale, sizes)
            load = np.bincount(links, weights=w, minlength=2 * self.n_links).astype(np.float64)
        cap = self._cap if self._cap is not None else np.ones_like(load)
        u = np.divide(load, cap, out=np.zeros_like(load), where=cap > 0)
        self._util = np.minimum(u.reshape(-1, 2).max(axis=1), 1.0)
        self._util.setflags(write=False)
        return self._util

    def preview(self, ring: Sequence[int]) -> Flow:
        """The flow a ring would have if it started now (routed as ``routing`` says)."""
        self._refresh()
        return self._route(tuple(int(c) for c in ring))

    def directed_load(self) -> np.ndarray:
        """float [2 * n_links]: ring edges of the running jobs on each directed link
        (read-only; the same array until a job or a link changes)."""
        self._refresh()
        if self._load is None:
            self._load = self._hot()
            self._load.setflags(write=False)
        return self._load

    def capacity(self) -> np.ndarray:
        """float [2 * n_links]: bandwidth per direction (0 when down)."""
        return self._cap.copy() if self._cap is not None else np.ones(2 * self.n_links)

    def flows_per_link(self) -> np.ndarray:
        """int [n_links]: jobs whose rings cross each link (either direction)."""
        self._refresh()
        count = np.zeros(self.n_links, dtype=np.int64)
        for f in self._flows.values():
            count[np.unique(f.links // 2)] += 1
        return count

    def flows_per_directed_link(self) -> np.ndarray:
        """int [2 * n_links]: jobs whose rings cross each link in each direction (two or
        more: they share its bandwidth)."""
        self._refresh()
        count = np.zeros(2 * self.n_links, dtype=np.int64)
        for f in self._flows.values():
            count[f.links] += 1
        return count

    def _refresh(self) -> None:
        if not self._dirty:
            return
        cap = self._cap if self._cap is not None else np.ones(2 * self.n_links)
        jobs = list(self._rings)
        for job in jobs:
            if job not in self._flows:
                self._flows[job] = self._route(self._rings[job])
        flows = [self._flows[j] for j in jobs]
        rate, alone, ideal = max_min_rates(cap, flows)
        self._rates = {j: float(r) for j, r in zip(jobs, rate, strict=True)}
        self._alone = {j: float(r) for j, r in zip(jobs, alone, strict=True)}
        self._ideal = {j: float(r) for j, r in zip(jobs, ideal, strict=True)}
        self._dirty = False
        self._util = None
        self._load = None

    # --- routing ----------------------------------------------------------------------
    def _group(self) -> tuple[GridTopology | None, int, int]:
        """(the grid a ring is routed on, chips per group, links per group)."""
        topo = self.topology
        if isinstance(topo, FleetTopology) and isinstance(topo.group, GridTopology):
            return topo.group, topo.group.n_chips, len(topo.group.links)
        if isinstance(topo, GridTopology):
            return topo, topo.n_chips, len(topo.links)
        return None, 0, 0

    def _route(self, ring: tuple[int, ...]) -> Flow:
        grid, gsize, glinks = self._group()
        empty = Flow(np.empty(0, np.int64), np.empty(0))
        if grid is None or len(ring) < 2:
            return empty
        paths = grid_paths(grid)
        src = np.asarray(ring, dtype=np.int64)
        dst = np.roll(src, -1)
        same = src // gsize == dst // gsize  # across groups: the network tier, not a link
        src, dst = src[same], dst[same]
        off = 2 * (src // gsize) * glinks
        ls, ld = src % gsize, dst % gsize
        # Every edge's DOR route in one vectorised pass; edges that cross a down link (and,
        # routed adaptively, multi-hop edges) are routed one by one instead.
        e_idx, dl, hops = paths.dor_many(ls, ld)
        dl = dl + off[e_idx]
        redo = np.zeros(src.size, dtype=bool)
        if self._down:
            redo[e_idx[np.isin(dl // 2, np.fromiter(self._down, dtype=np.int64))]] = True
        hot = self._hot() if self.routing == "adaptive" else None
        if hot is not None:
            # Multi-hop edges choose among minimal paths; a one-hop edge whose link another
            # ring already loads may take a detour around it.
            redo |= hops > 1
            redo[e_idx[hot[dl] > 0]] = True
        keep = ~redo[e_idx]
        direct = dl[keep]
        load: dict[int, float] = {}
        if hot is not None and direct.size:
            np.add.at(hot, direct, 1.0)
        for i in np.flatnonzero(redo).tolist():
            g = int(src[i]) // gsize
            for d in self._path(paths, grid, g, int(ls[i]), int(ld[i]), int(off[i]), hot, load):
                load[d] = load.get(d, 0.0) + 1.0
        links = np.concatenate([direct, np.fromiter(load, dtype=np.int64, count=len(load))])
        weights = np.concatenate([np.ones(direct.size), np.fromiter(load.values(), dtype=np.float64,
                                                                       count=len(load))])
        if not links.size:
            return empty
        uniq, inv = np.unique(links, return_inverse=True)
        return Flow(uniq, np.bincount(inv, weights=weights))

    def _path(self, paths: GridPaths, grid: GridTopology, group: int, a: int, b: int, off: int,
              hot: np.ndarray | None, own: dict[int, float]) -> list[int]:
        down = self._down
        glinks = len(grid.links)
        local_down = {x - group * glinks for x in down if group * glinks <= x < (group + 1) * glinks}

        def ok(p: list[int]) -> bool:
            return not local_down or all(dl // 2 not in local_down for dl in p)

        if hot is None:
            p = paths.dor(a, b)
            if ok(p):
                return [off + dl for dl in p]
        else:
            def cost(p: list[int]) -> tuple[float, float, int]:
                loads = [hot[off + dl] + own.get(off + dl, 0.0) for dl in p]
                return max(loads, default=0.0), sum(loads), len(p)

            cands = [p for p in paths.minimal(a, b) if ok(p)]
            best = min(cands, key=cost) if cands else None
            if best is None or cost(best)[0] > 0:
                # Every minimal path is down or carries traffic already: a path two hops
                # longer over quieter links (the router's detour among them) may be faster.
                detour = [dl - off for dl in self._detoured(grid, group, a, b, local_down)]
                more = [p for p in [*paths.detours(a, b), detour] if p and ok(p)]
                if more:
                    alt = min(more, key=cost)
                    if best is None or cost(alt)[0] < cost(best)[0]:
                        best = alt
            if best is not None:
                return [off + dl for dl in best]
        return [off + dl for dl in self._detoured(grid, group, a, b, local_down)]

    def _detoured(self, grid: GridTopology, group: int, a: int, b: int, down: set[int]) -> list[int]:
        """The router's route around down links (its precomputed detours), as directed links."""
        router = self._routers.get(group)
        if router is None:
            router = self._routers[group] = Router(grid)
            for x in sorted(down):
                router.fail_link(x)
        try:
            route = router.route(a, b)
        except NoRouteError:
            return []
        src = grid_paths(grid).link_src
        return [2 * ln + (0 if int(src[ln]) == c else 1) for ln, c in zip(route.links, route.chips, strict=False)]

    def _hot(self) -> np.ndarray:
        """Ring edges of the flows already routed, per directed link."""
        load = np.zeros(2 * self.n_links)
        for f in self._flows.values():
            np.add.at(load, f.links, f.weights)
        return load
