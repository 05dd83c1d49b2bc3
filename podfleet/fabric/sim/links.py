"""Link tables as flat numpy arrays, for any topology (grid, switched, fleet).

A fleet's links are its groups' links tiled: link ``g * links_per_group + i`` is link
``i`` of group ``g``. A switched topology's links are chip-to-switch uplinks; the
switch end is ``-1``. The fleet's network tier is not a link here: the twin models it
as bandwidth per chip (``net_bw_per_chip``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from podfleet.hardware.topology import FleetTopology, Topology


@dataclass(frozen=True, eq=False)
class LinkTable:
    src: np.ndarray  # int64 chip
    dst: np.ndarray  # int64 chip, or -1 for a switch
    bw_bytes_per_s: np.ndarray  # float64, nominal, per direction
    latency_s: np.ndarray
    axis: np.ndarray
    # CSR incidence: links touching chip c are inc_links[inc_ptr[c]:inc_ptr[c+1]].
    inc_ptr: np.ndarray
    inc_links: np.ndarray
    group_size: int  # chips per group (the whole topology unless a fleet)
    net_bw_per_chip: float  # fleet network bandwidth per chip; 0 when not a fleet

    @property
    def n(self) -> int:
        return int(self.src.shape[0])

    def of_chip(self, chip: int) -> np.ndarray:
        return self.inc_links[self.inc_ptr[chip] : self.inc_ptr[chip + 1]]

    def among(self, chips: np.ndarray, n_chips: int) -> np.ndarray:
        """Links with both ends in ``chips`` (or one end and the switch)."""
        chips = np.asarray(chips, dtype=np.int64)
        if chips.size == 0:
            return np.empty(0, dtype=np.int64)
        cand = np.unique(np.concatenate([self.of_chip(int(c)) for c in chips]))
        member = np.zeros(n_chips, dtype=bool)
        member[chips] = True
        d = self.dst[cand]
        ok = member[self.src[cand]] & ((d < 0) | member[np.maximum(d, 0)])
        return cand[ok]


def _group_arrays(topo: Topology) -> tuple[np.ndarray, ...]:
    links = topo.links
    src = np.array([lk.src for lk in links], dtype=np.int64)
    dst = np.array([lk.dst for lk in links], dtype=np.int64)
    dst[dst >= topo.n_chips] = -1  # the switch of a switched topology
    bw = np.array([lk.bw_bytes_per_s for lk in links], dtype=np.float64)
    lat = np.array([lk.latency_s for lk in links], dtype=np.float64)
    axis = np.array([lk.axis for lk in links], dtype=np.int64)
    return src, dst, bw, lat, axis


def build_link_table(topo: Topology) -> LinkTable:
    if isinstance(topo, FleetTopology):
        gsrc, gdst, gbw, glat, gaxis = _group_arrays(topo.group)
        g = topo.group.n_chips
        off = (np.arange(topo.count, dtype=np.int64) * g)[:, None]
        src = (gsrc[None, :] + off).ravel()
        dst = np.where(gdst[None, :] < 0, -1, gdst[None, :] + off).ravel()
        bw, lat, axis = (np.tile(a, topo.count) for a in (gbw, glat, gaxis))
        group_size, net = g, float(topo.net_bw_per_chip_bytes_per_s)
    else:
        src, dst, bw, lat, axis = _group_arrays(topo)
        group_size, net = topo.n_chips, 0.0
    n = topo.n_chips
    ends = np.concatenate([src, dst])
    ids = np.concatenate([np.arange(src.size), np.arange(dst.size)])
    keep = ends >= 0
    ends, ids = ends[keep], ids[keep]
    order = np.argsort(ends, kind="stable")
    inc_links = ids[order]
    inc_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(ends, minlength=n), out=inc_ptr[1:])
    for a in (src, dst, bw, lat, axis, inc_ptr, inc_links):
        a.setflags(write=False)
    return LinkTable(src, dst, bw, lat, axis, inc_ptr, inc_links, group_size, net)
