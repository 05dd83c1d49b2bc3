"""The twin's answers to acceptance probes (``ComputeProbe``, ``CollectiveProbe``).

Compute: a square GEMM on each chip through the performance model (``perf.compute.gemm_s``)
at the chip's current clock, so a throttled chip shows its lost rate and a failed one
none. Collectives: the alpha-beta model of ``perf.collectives`` over the chips' real
links and their current states (a down link's ring detours, a degraded one runs at its
factor), at the chip type's calibrated link efficiency (``perf.collective_probe``, which
verification also reads). Nothing moves data, so ``wrong``
is -1 (not checked): the numbers are the model's, and say so.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from podfleet.fabric.base import ChipState, CollectiveRow, LinkState, MatmulRate, bus_factor
from podfleet.hardware.specs import ChipSpec
from podfleet.hardware.topology import GridTopology, Topology
from podfleet.perf.collective_probe import collective_times
from podfleet.perf.collectives import LinkHealth
from podfleet.perf.compute import gemm_s
from podfleet.perf.efficiency import efficiency_for

GEMM_N = 8192  # large enough to be compute-bound on every chip in the catalog
ELEMENT_BYTES = 4  # float32 rows, as the worker fabrics' gloo tables
DEGRADED_FACTOR = 0.5  # the board's: a degraded link retrained at half width


def matmul_rates(spec: ChipSpec, clock_factor: np.ndarray, states: Sequence[ChipState], chips: Sequence[int],
                 dtype: str) -> list[MatmulRate]:
    peak = spec.peak_flops(dtype)
    eff = efficiency_for(spec.name)
    flops = 2.0 * GEMM_N**3
    out = []
    for c in chips:
        f = float(clock_factor[c])
        down = states[c] in (ChipState.FAILED, ChipState.ISOLATED)
        rate = 0.0 if down or f <= 0 else flops / gemm_s(GEMM_N, GEMM_N, GEMM_N, peak * f, spec.hbm_bw_bytes_per_s, eff)
        out.append(MatmulRate(chip=int(c), dtype=dtype, tflops=rate / 1e12, clock_factor=0.0 if down else f))
    return out


def groups(topology: Topology) -> dict[str, tuple[int, ...]]:
    """One ring per torus axis through chip 0 (where the axes differ in speed, they show),
    and the whole pod."""
    out: dict[str, tuple[int, ...]] = {}
    if isinstance(topology, GridTopology):
        for k, axis in enumerate(topology.axes):
            if axis.size < 2:
                continue
            ring = []
            for v in range(axis.size):
                c = [0] * len(topology.dims)
                c[k] = v
                ring.append(topology.index(c))
            out[axis.name] = tuple(ring)
    out["pod"] = tuple(range(topology.n_chips))
    return out


def link_health(states: Sequence[LinkState]) -> LinkHealth:
    down = frozenset(i for i, s in enumerate(states) if s == LinkState.DOWN)
    degraded = {i: DEGRADED_FACTOR for i, s in enumerate(states) if s == LinkState.DEGRADED}
    return LinkHealth(down, degraded)


def collective_rows(topology: Topology, chips: Sequence[int], group: str, ops: Sequence[str],
                    sizes_bytes: Sequence[int], health: LinkHealth) -> list[CollectiveRow]:
    n = len(chips)
    rows = []
    for op, size, t in collective_times(topology, chips, ops, sizes_bytes, health):
        algbw = size / t / 1e9
        rows.append(CollectiveRow(op=op, group=group, ranks=n, size_bytes=size,
                                  count=max(1, size // ELEMENT_BYTES), type="float32",
                                  time_us=t * 1e6, algbw_gbps=algbw, busbw_gbps=algbw * bus_factor(op, n),
                                  wrong=-1))
    return rows
