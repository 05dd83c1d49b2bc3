"""Real collectives on this host: a torch.distributed all-reduce table (gloo on CPU,
NCCL when every rank has a GPU), nccl-tests style, and the bus bandwidth at 64 MiB.

The path ``podfleet verify`` runs on a local cluster (``LocalFabric.run_collectives`` ->
``fabric.local.probes.collectives``): one spawned process per rank, a warm-up, timed
runs between barriers, the slowest rank's mean time per row, every result checked
(``wrong`` must be 0). Sizes 8 B to 64 MiB in x8 steps, then 64 MiB.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

from podfleet.fabric.local import probes

NAME = "collectives"
DESCRIPTION = "real all-reduce table on local processes (gloo/NCCL), result-checked: busbw_gbps_64mib"
SIZE_64MIB = 64 << 20


def run(quick: bool = False) -> dict[str, Any]:
    world = 2 if quick else max(2, min(4, os.cpu_count() or 2))
    sizes = [8 * 8**k for k in range(8)] + [SIZE_64MIB]  # 8 B .. 16 MiB, then 64 MiB
    rows, refused = probes.collectives(world, ("all-reduce",), sizes, quick=quick)
    at_64 = next(r for r in rows if r.size_bytes == SIZE_64MIB)
    return {
        "ranks": world,
        "backend": probes.backend_for(world),
        "busbw_gbps_64mib": round(at_64.busbw_gbps, 4),
        "algbw_gbps_64mib": round(at_64.algbw_gbps, 4),
        "time_us_64mib": round(at_64.time_us, 1),
        "wrong": sum(r.wrong for r in rows),
        "refused": refused,
        "table": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(r).items()} for r in rows],
    }
