"""DescribeClusterHardware at fleet size: pages of chips filtered by pod, state and job,
and summaries per pod and per network block, read from the rendered snapshot.

Pure functions over the snapshot dict (``ClusterRuntime.hardware``) and the topology:
the engine renders the snapshot once per tick; a page or a summary is sliced from it,
so a 65,536-chip fleet is never serialised whole for a reader who wants 256 chips.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from podfleet.errors import InvalidInputError
from podfleet.hardware.topology import FleetTopology, Topology
from podfleet.wire import JsonObject

MAX_PAGE = 4096


@dataclass(frozen=True)
class ChipFilter:
    pod: int | None = None
    state: str | None = None
    job: str | None = None


def pod_shape(topo: Topology) -> tuple[int, int, int]:
    """(pods, chips per pod, pods per block); a single pod is one pod of all its chips."""
    if isinstance(topo, FleetTopology):
        return topo.count, topo.group.n_chips, topo.pods_per_block
    return 1, topo.n_chips, 1


def page(snapshot: Mapping[str, Any], topo: Topology, flt: ChipFilter, limit: int,
         next_token: str | None) -> JsonObject:
    """One page of the chips that match ``flt``, in index order, with the links of the
    pod when ``flt.pod`` names one; ``nextToken`` resumes after the page."""
    pods, per, _ = pod_shape(topo)
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be 1-{MAX_PAGE}, got {limit}", field="limit")
    if flt.pod is not None and not 0 <= flt.pod < pods:
        raise InvalidInputError(f"pod {flt.pod} does not exist; valid pods are 0-{pods - 1}", field="pod")
    chips: Sequence[Mapping[str, Any]] = snapshot.get("chips", [])
    lo, hi = (flt.pod * per, (flt.pod + 1) * per) if flt.pod is not None else (0, len(chips))
    start = lo
    if next_token:
        try:
            start = int(next_token)
        except ValueError:
            raise InvalidInputError(f"next_token {next_token!r} is not one this API gave", field="next_token") from None
        if not lo <= start <= hi:
            raise InvalidInputError(f"next_token {next_token!r} is outside the chips asked for", field="next_token")
    out: list[Mapping[str, Any]] = []
    i = start
    while i < hi and len(out) < limit:
        c = chips[i]
        if (flt.state is None or c["state"] == flt.state) and (flt.job is None or c.get("job") == flt.job):
            out.append(c)
        i += 1
    links: list[Mapping[str, Any]] = []
    if flt.pod is not None:
        links = [lk for lk in snapshot.get("links", []) if lo <= int(lk["src"]) < hi]
    return {
        "cluster_id": snapshot.get("cluster_id"), "name": snapshot.get("name"), "state": snapshot.get("state"),
        "type": snapshot.get("type"), "dims": snapshot.get("dims"), "time": snapshot.get("time"),
        "chips": out, "links": links, "nextToken": str(i) if i < hi else None,
        **({"pod": flt.pod} if flt.pod is not None else {}),
    }


def summaries(snapshot: Mapping[str, Any], topo: Topology) -> JsonObject:
    """Per pod and per block: chips, healthy, failed, spare, busy, utilization, jobs."""
    pods, per, k = pod_shape(topo)
    chips: Sequence[Mapping[str, Any]] = snapshot.get("chips", [])
    rows: list[JsonObject] = []
    for p in range(pods):
        part = chips[p * per:(p + 1) * per]
        healthy = sum(1 for c in part if c["state"] == "healthy")
        spare = sum(1 for c in part if c["spare"])
        jobs = sorted({c["job"] for c in part if c.get("job")})
        busy = sum(1 for c in part if c.get("job"))
        rows.append({"pod": p, "block": p // k, "chips": len(part), "healthy": healthy,
                     "failed": len(part) - healthy, "spare": spare, "busy": busy,
                     "utilization": round(busy / len(part), 4) if part else 0.0, "jobs": jobs})
    blocks = []
    for b in range(-(-pods // k)):
        mine = rows[b * k:(b + 1) * k]
        n = sum(int(r["chips"]) for r in mine)
        counts = {f: sum(int(r[f]) for r in mine) for f in ("healthy", "failed", "spare", "busy")}
        blocks.append({"block": b, "pods": [r["pod"] for r in mine], "chips": n, **counts,
                       "utilization": round(counts["busy"] / n, 4) if n else 0.0})
    return {"cluster_id": snapshot.get("cluster_id"), "name": snapshot.get("name"), "time": snapshot.get("time"),
            "pods_per_block": k, "pods": rows, "blocks": blocks}
