"""Routing on a torus/mesh: dimension-ordered routes, local repair, global recompute.

Three layers, cheapest first, the way a fabric reacts to a dead link:

1. **Dimension-ordered routing (DOR).** Correct x first, then y, then z. On a wrapped
   axis (size > 2) take the shorter way round; on a tie (distance = size/2) go the
   ``+`` way. DOR routes are shortest paths.
2. **Local repair.** Every link has a detour, precomputed when the router is built, so
   a failed link is bypassed at once without touching any other route. For a link
   ``a -> b`` on axis k the detour is ``a -> a+e_j -> b+e_j -> b`` through another
   axis j (the fastest one, so an UltraServer x/y link detours through y/x rather
   than the slower inter-instance z; ``-e_j`` at a mesh edge). On a 1-D ring it is
   the other way round the ring. The other squares (and the way round the link's own
   ring) are kept as alternates, used when a second failure breaks the detour. A 1-D
   mesh or a lone 2-ring has none: its links are bridges, and a route over a failed
   bridge falls back to the global route, as does one whose bypasses are all broken.
   Routes with detours spliced in are loop-erased, so they stay simple paths.
3. **Global recompute.** :meth:`Router.recompute` computes shortest paths over the
   surviving links (networkx BFS) and restores shortest routes for every pair the
   failures touched. Local repair also falls back to it when a detour is itself broken.

Stretch is route hops over the original (DOR) hops, per pair; :meth:`Router.stretch`
gives its mean and max over all ordered pairs.

Pure: numbers in, numbers out; no I/O, no clock. Built for pods (tens to hundreds of
chips); :meth:`Router.stretch` is O(pairs).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import networkx as nx
import numpy as np

from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.hardware.topology import GridTopology, Topology

__all__ = ["NoRouteError", "Route", "Router", "dor_route"]


class NoRouteError(ConflictError, code="no-route"):
    """The surviving links do not join the two chips."""


@dataclass(frozen=True)
class Route:
    """A path: ``chips`` from source to destination, ``links`` between them (link indices
    into ``topo.links``), ``hops == len(links)``."""

    chips: tuple[int, ...]
    links: tuple[int, ...]
    hops: int

    def reversed(self) -> Route:
        return Route(self.chips[::-1], self.links[::-1], self.hops)

    def uses_any(self, links: Iterable[int]) -> bool:
        return not set(self.links).isdisjoint(links)


def _route(chips: list[int], links: list[int]) -> Route:
    return Route(tuple(chips), tuple(links), len(links))


class _Steps:
    """Per-axis step tables: ``nbr[k][d][chip]`` / ``link[k][d][chip]`` for d = 0 (+) or
    1 (-); -1 where the grid has no such link (mesh edge, size-1 axis)."""

    def __init__(self, topo: GridTopology) -> None:
        n, nd = topo.n_chips, len(topo.dims)
        self.nbr = [[[-1] * n, [-1] * n] for _ in range(nd)]
        self.link = [[[-1] * n, [-1] * n] for _ in range(nd)]
        for ln in topo.links:
            self.nbr[ln.axis][0][ln.src] = ln.dst
            self.link[ln.axis][0][ln.src] = ln.index
            self.nbr[ln.axis][1][ln.dst] = ln.src
            self.link[ln.axis][1][ln.dst] = ln.index
        self.coords = [topo.coords(c) for c in range(n)]
        # Rings of size > 2 are routed modulo the size; a 2-ring is one link, like a mesh.
        self.ring = [a.wrap and a.size > 2 for a in topo.axes]
        self.sizes = topo.dims


@functools.lru_cache(maxsize=64)
def _steps(topo: GridTopology) -> _Steps:
    return _Steps(topo)


def _dor(st: _Steps, src: int, dst: int) -> Route:
    chips, links = [src], []
    cur = src
    cd = st.coords[dst]
    for k, size in enumerate(st.sizes):
        a, b = st.coords[cur][k], cd[k]
        if a == b:
            continue
        if st.ring[k]:
            fwd = (b - a) % size
            d, n = (0, fwd) if fwd <= size - fwd else (1, size - fwd)  # tie: + way
        else:
            d, n = (0, b - a) if b > a else (1, a - b)
        nbr, lnk = st.nbr[k][d], st.link[k][d]
        for _ in range(n):
            links.append(lnk[cur])
            cur = nbr[cur]
            chips.append(cur)
    return _route(chips, links)


@functools.lru_cache(maxsize=64)
def _dor_cache(topo: GridTopology) -> dict[tuple[int, int], Route]:
    """DOR routes are fixed per topology: filled lazily and shared by every router on it."""
    return {}


def _dor_cached(topo: GridTopology, st: _Steps, src: int, dst: int) -> Route:
    cache = _dor_cache(topo)
    r = cache.get((src, dst))
    if r is None:
        r = cache[(src, dst)] = _dor(st, src, dst)
    return r


def dor_route(topo: GridTopology, src: int, dst: int) -> Route:
    """The dimension-ordered route from ``src`` to ``dst`` (ignores failures)."""
    topo.check_chip(src)
    topo.check_chip(dst)
    return _dor_cached(topo, _steps(topo), src, dst)


@functools.lru_cache(maxsize=16)
def _dor_incidence(topo: GridTopology) -> tuple[np.ndarray, ...]:
    """For each link, the ordered pairs (as ``src * n + dst``) whose DOR route uses it."""
    st, n = _steps(topo), topo.n_chips
    users: list[list[int]] = [[] for _ in topo.links]
    for s in range(n):
        for t in range(n):
            for ln in _dor_cached(topo, st, s, t).links:
                users[ln].append(s * n + t)
    out = tuple(np.asarray(u, dtype=np.int64) for u in users)
    for a in out:
        a.setflags(write=False)
    return out


def _loop_erase(chips: list[int], links: list[int]) -> Route:
    """Cut every cycle out of a walk so each chip appears once."""
    if len(set(chips)) == len(chips):
        return _route(chips, links)
    out_c: list[int] = [chips[0]]
    out_l: list[int] = []
    pos = {chips[0]: 0}
    for ln, c in zip(links, chips[1:], strict=True):
        if c in pos:
            p = pos[c]
            for dropped in out_c[p + 1 :]:
                del pos[dropped]
            del out_c[p + 1 :]
            del out_l[p:]
        else:
            pos[c] = len(out_c)
            out_c.append(c)
            out_l.append(ln)
    return _route(out_c, out_l)


class Router:
    """Routes on one grid topology, with link failures, local repair and recompute.

    Not thread-safe: the engine is its single writer.
    """

    def __init__(self, topo: Topology) -> None:
        if not isinstance(topo, GridTopology):
            raise InvalidInputError(
                f"routing needs a torus or mesh; {topo.name!r} is {topo.kind}"
                + (" (route inside one group: Router(topo.group))" if topo.kind == "fleet" else ""),
                field="topology",
            )
        self.topo = topo
        self._st = _steps(topo)
        self._pairs = {
            (min(ln.src, ln.dst), max(ln.src, ln.dst)): ln.index for ln in topo.links
        }
        # Every bypass of each link, best first; the first is the link's detour.
        self._bypasses: tuple[tuple[Route, ...], ...] = tuple(
            tuple(self._make_bypasses(i)) for i in range(len(topo.links))
        )
        self._graph: nx.Graph[int] = nx.Graph()
        self._graph.add_nodes_from(range(topo.n_chips))
        for ln in topo.links:
            self._graph.add_edge(ln.src, ln.dst, index=ln.index)
        self._failed: set[int] = set()
        # Global table from the last recompute(): the failed set it saw and its distances.
        self._table_failed: frozenset[int] | None = None
        self._table_dist: np.ndarray | None = None
        self._table_paths: dict[tuple[int, int], Route | None] = {}
        self._reset_cache()

    # --- links ---------------------------------------------------------------------
    def link_between(self, a: int, b: int) -> int:
        """Index of the link joining adjacent chips ``a`` and ``b`` (either order)."""
        self.topo.check_chip(a)
        self.topo.check_chip(b)
        try:
            return self._pairs[(min(a, b), max(a, b))]
        except KeyError:
            raise NotFoundError(
                f"chips {a} and {b} are not joined by a link", field="link"
            ) from None

    def link_name(self, index: int) -> str:
        """``"A-B"``, lower chip first: the name the twin and the API use."""
        ln = self.topo.links[self._check_link(index)]
        return f"{min(ln.src, ln.dst)}-{max(ln.src, ln.dst)}"

    def parse_link(self, name: str) -> int:
        """The index of link ``"A-B"`` (either order)."""
        a_s, sep, b_s = str(name).partition("-")
        try:
            a, b = int(a_s), int(b_s)
        except ValueError:
            a = b = -1
        if not sep or a < 0 or b < 0:
            raise InvalidInputError(
                f"link must be written A-B with two chip numbers, e.g. 0-1; got {name!r}",
                field="link",
            )
        return self.link_between(a, b)

    def _check_link(self, index: int) -> int:
        if not 0 <= index < len(self.topo.links):
            raise NotFoundError(
                f"link {index} does not exist; valid links are 0-{len(self.topo.links) - 1}",
                field="link",
            )
        return index

    # --- failures --------------------------------------------------------------------
    @property
    def failed_links(self) -> frozenset[int]:
        return frozenset(self._failed)

    def fail_link(self, link_index: int) -> None:
        """Mark a link down. Routes over it switch to its detour at once. Idempotent."""
        if self._check_link(link_index) in self._failed:
            return
        self._failed.add(link_index)
        ln = self.topo.links[link_index]
        self._graph.remove_edge(ln.src, ln.dst)
        self._reset_cache()

    def restore_link(self, link_index: int) -> None:
        """Mark a link up again. Routes whose DOR path is whole again return to it."""
        if self._check_link(link_index) not in self._failed:
            return
        self._failed.discard(link_index)
        ln = self.topo.links[link_index]
        self._graph.add_edge(ln.src, ln.dst, index=link_index)
        if not self._failed:
            self._table_failed = self._table_dist = None
            self._table_paths = {}
        self._reset_cache()

    def _reset_cache(self) -> None:
        self._routes: dict[tuple[int, int], Route | None] = {}
        self._dist_to: dict[int, np.ndarray] = {}
        self._connected: bool | None = None

    # --- detours ---------------------------------------------------------------------
    def detour(self, link_index: int) -> Route | None:
        """The precomputed bypass of a link, from its ``src`` to its ``dst``; None for a
        bridge (1-D mesh, lone 2-ring), which has no alternative path."""
        bypasses = self._bypasses[self._check_link(link_index)]
        return bypasses[0] if bypasses else None

    def _make_bypasses(self, index: int) -> Iterator[Route]:
        topo, st = self.topo, self._st
        ln = topo.links[index]
        a, b, k = ln.src, ln.dst, ln.axis
        others = [j for j in range(len(topo.dims)) if j != k and topo.dims[j] >= 2]
        # Fastest other axis first, then the lowest index.
        others.sort(key=lambda j: (-topo.axes[j].link_bw_bytes_per_s, j))
        for j in others:
            for d in (0, 1):
                a2, b2 = st.nbr[j][d][a], st.nbr[j][d][b]
                if a2 < 0 or b2 < 0:
                    continue
                mid = self._pairs.get((min(a2, b2), max(a2, b2)))
                if mid is None:
                    continue
                yield _route([a, a2, b2, b], [st.link[j][d][a], mid, st.link[j][d][b]])
        if st.ring[k]:
            # The other way round the link's own ring (the detour on a 1-D ring).
            chips, links, cur = [a], [], a
            while cur != b:
                links.append(st.link[k][1][cur])
                cur = st.nbr[k][1][cur]
                chips.append(cur)
            yield _route(chips, links)

    # --- routes ----------------------------------------------------------------------
    def route(self, src: int, dst: int) -> Route:
        """The route ``src -> dst`` now: DOR when its links are up; otherwise the
        recomputed shortest path if one was computed and is whole; otherwise the
        base route with detours spliced in, or the global route if a detour is broken.
        Raises :class:`NoRouteError` when the surviving links do not join them."""
        key = (src, dst)
        if key not in self._routes:
            n = self.topo.n_chips
            if not (0 <= src < n and 0 <= dst < n):
                self.topo.check_chip(src)
                self.topo.check_chip(dst)
            self._routes[key] = self._compute(src, dst)
        r = self._routes[key]
        if r is None:
            raise NoRouteError(
                f"no route from chip {src} to chip {dst}: failed links "
                f"{', '.join(self.link_name(i) for i in sorted(self._failed))} cut them apart",
                field="link",
            )
        return r

    def _compute(self, src: int, dst: int) -> Route | None:
        base = _dor_cached(self.topo, self._st, src, dst)
        if not self._failed or not base.uses_any(self._failed):
            return base
        if self._table_dist is not None:
            tab = self._table_route(src, dst)
            if tab is None:
                return self._global(src, dst)
            if not tab.uses_any(self._failed):
                return tab
            base = tab
        chips, links = [base.chips[0]], []
        for ln, nxt in zip(base.links, base.chips[1:], strict=True):
            if ln not in self._failed:
                chips.append(nxt)
                links.append(ln)
                continue
            # The link's detour, or the next bypass if a second failure broke it.
            det = next((b for b in self._bypasses[ln] if not b.uses_any(self._failed)), None)
            if det is None:
                return self._global(src, dst)
            if det.chips[0] != chips[-1]:
                det = det.reversed()
            chips.extend(det.chips[1:])
            links.extend(det.links)
        return _loop_erase(chips, links)

    def _walk(self, src: int, dst: int, dist: np.ndarray, failed: Iterable[int]) -> Route | None:
        """A shortest path down the BFS distances ``dist`` (to ``dst``), preferring the
        lowest axis and the + way at each step, so it is deterministic and DOR-like."""
        if dist[src] < 0:
            return None
        failed = set(failed)
        st = self._st
        chips, links, cur = [src], [], src
        while cur != dst:
            want = dist[cur] - 1
            for k in range(len(st.sizes)):
                for d in (0, 1):
                    nb, ln = st.nbr[k][d][cur], st.link[k][d][cur]
                    if nb >= 0 and ln not in failed and dist[nb] == want:
                        break
                else:
                    continue
                break
            else:  # pragma: no cover - BFS distances guarantee a step
                raise AssertionError(f"no downhill step from {cur} towards {dst}")
            chips.append(nb)
            links.append(ln)
            cur = nb
        return _route(chips, links)

    def _bfs(self, dst: int) -> np.ndarray:
        dist = np.full(self.topo.n_chips, -1, dtype=np.int64)
        for node, d in nx.single_source_shortest_path_length(self._graph, dst).items():
            dist[node] = d
        return dist

    def _global(self, src: int, dst: int) -> Route | None:
        if dst not in self._dist_to:
            self._dist_to[dst] = self._bfs(dst)
        return self._walk(src, dst, self._dist_to[dst], self._failed)

    def _table_route(self, src: int, dst: int) -> Route | None:
        key = (src, dst)
        if key not in self._table_paths:
            assert self._table_dist is not None and self._table_failed is not None
            self._table_paths[key] = self._walk(
                src, dst, self._table_dist[:, dst], self._table_failed
            )
        return self._table_paths[key]

    def recompute(self) -> None:
        """Shortest paths over the surviving links for every pair (global repair)."""
        n = self.topo.n_chips
        dist = np.full((n, n), -1, dtype=np.int64)
        for src, lengths in nx.all_pairs_shortest_path_length(self._graph):
            for dst, d in lengths.items():
                dist[src, dst] = d
        self._table_dist = dist
        self._table_failed = frozenset(self._failed)
        self._table_paths = {}
        self._reset_cache()

    # --- health of the fabric --------------------------------------------------------
    def connected(self) -> bool:
        """Whether the surviving links still join every chip to every other."""
        if self._connected is None:
            self._connected = self.topo.n_chips <= 1 or nx.is_connected(self._graph)
        return self._connected

    def _candidate_pairs(self) -> np.ndarray:
        """Ordered pairs (``src * n + dst``) whose route may differ from DOR."""
        touched = set(self._failed)
        if self._table_failed:
            touched |= self._table_failed
        if not touched:
            return np.empty(0, dtype=np.int64)
        inc = _dor_incidence(self.topo)
        return np.unique(np.concatenate([inc[i] for i in sorted(touched)]))

    def stretch_matrix(self) -> np.ndarray:
        """Route hops / DOR hops for every ordered pair: 1.0 on the diagonal and for
        untouched pairs, ``inf`` for pairs the failures disconnected."""
        n = self.topo.n_chips
        out = np.ones((n, n))
        hops = self.topo.hops
        for p in self._candidate_pairs():
            s, t = divmod(int(p), n)
            key = (s, t)
            if key not in self._routes:
                self._routes[key] = self._compute(s, t)
            r = self._routes[key]
            out[s, t] = np.inf if r is None else r.hops / hops(s, t)
        return out

    def stretch(self) -> dict[str, float | int]:
        """Path stretch over all ordered pairs of distinct chips that still have a route:
        ``mean`` and ``max``; also how many pairs are ``rerouted`` onto a longer path
        and how many are ``disconnected`` (left out of mean and max)."""
        n = self.topo.n_chips
        if n < 2:
            return {"mean": 1.0, "max": 1.0, "rerouted": 0, "disconnected": 0}
        m = self.stretch_matrix()
        off = m[~np.eye(n, dtype=bool)]
        finite = off[np.isfinite(off)]
        return {
            "mean": float(finite.mean()) if finite.size else 1.0,
            "max": float(finite.max()) if finite.size else 1.0,
            "rerouted": int((finite > 1.0).sum()),
            "disconnected": int(off.size - finite.size),
        }
