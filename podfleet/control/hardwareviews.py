"""DescribeClusterHardware at fleet size: pages of chips filtered by pod, state and job,
and summaries per pod and per network block, read from the rendered snapshot.

Pure functions over the snapshot (``control.snapshot.HardwareSnapshot``) and the
topology: the engine renders the snapshot's columns once per tick; a page builds the
objects of its own chips only, and a summary counts the columns with numpy, so a
65,536-chip fleet is never built or serialised whole for a reader who wants 256 chips.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from podfleet.control.snapshot import HardwareSnapshot
from podfleet.errors import InfeasibleError, InvalidInputError, NotFoundError
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


def page(snapshot: HardwareSnapshot, topo: Topology, flt: ChipFilter, limit: int,
         next_token: str | None) -> JsonObject:
    """One page of the chips that match ``flt``, in index order, with the links of the
    pod when ``flt.pod`` names one; ``next_token`` resumes after the page."""
    pods, per, _ = pod_shape(topo)
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(f"limit must be 1-{MAX_PAGE}, got {limit}", field="limit")
    if flt.pod is not None and not 0 <= flt.pod < pods:
        raise NotFoundError(f"pod {flt.pod} does not exist; valid pods are 0-{pods - 1}", field="pod")
    n = snapshot.n_chips
    lo, hi = (flt.pod * per, (flt.pod + 1) * per) if flt.pod is not None else (0, n)
    hi = min(hi, n)
    start = lo
    if next_token:
        try:
            start = int(next_token)
        except ValueError:
            raise InvalidInputError(f"next_token {next_token!r} is not one this API gave", field="next_token") from None
        if not lo <= start <= hi:
            # Well formed (the schema's digits) but not a token of this query: a 422, as the
            # schema cannot say which offsets a pod has.
            raise InfeasibleError(f"next_token {next_token!r} is outside the chips asked for (chips {lo}-{hi - 1}); "
                                  "resume with the next_token of the previous page", field="next_token")
    states, owners = snapshot.states, snapshot.owners
    picked: list[int] = []
    i = start
    while i < hi and len(picked) < limit:
        if (flt.state is None or states[i] == flt.state) and (flt.job is None or owners.get(i) == flt.job):
            picked.append(i)
        i += 1
    out = snapshot.chips_at(picked)
    links = snapshot.links_from(lo, hi) if flt.pod is not None else []
    head = snapshot.head
    return {
        "cluster_id": head.get("cluster_id"), "name": head.get("name"), "state": head.get("state"),
        "type": head.get("type"), "dims": head.get("dims"), "time": head.get("time"),
        "chips": out, "links": links, "next_token": (nxt := str(i) if i < hi else None),
        "nextToken": nxt,  # the deprecated spelling, for one release (api/wirecase.py)
        **({"pod": flt.pod} if flt.pod is not None else {}),
    }


def summaries(snapshot: HardwareSnapshot, topo: Topology) -> JsonObject:
    """Per pod and per block: chips, healthy, failed (not healthy), spare, busy,
    utilization, jobs; per pod also ``states``, the count of each state other than healthy
    (the console's fleet view tells a pod with failed or isolated chips from one with
    chips cordoned or updating, without reading every chip)."""
    pods, per, k = pod_shape(topo)
    n = snapshot.n_chips
    if n != pods * per:  # not rendered yet: no chips to count
        pods = 0
    # Counts per pod as [pods, chips per pod] columns: one numpy pass, not one per chip.
    ok = snapshot.healthy()[:pods * per]
    healthy = ok.reshape(pods, per).sum(axis=1).tolist()
    states: list[dict[str, int]] = [{} for _ in range(pods)]
    for c in np.flatnonzero(~ok).tolist():  # the unhealthy chips only: few, even on a large fleet
        st, counts = snapshot.states[c], states[c // per]
        counts[st] = counts.get(st, 0) + 1
    spare = snapshot.spare[:pods * per].reshape(pods, per).sum(axis=1).tolist()
    busy = snapshot.busy()[:pods * per].reshape(pods, per).sum(axis=1).tolist()
    jobs: list[set[str]] = [set() for _ in range(pods)]
    for c, j in snapshot.owners.items():
        if c < pods * per:
            jobs[c // per].add(j)
    rows: list[JsonObject] = [
        {"pod": p, "block": p // k, "chips": per, "healthy": healthy[p], "failed": per - healthy[p],
         "spare": spare[p], "busy": busy[p], "utilization": round(busy[p] / per, 4) if per else 0.0,
         "states": dict(sorted(states[p].items())), "jobs": sorted(jobs[p])}
        for p in range(pods)
    ]
    blocks = []
    for b in range(-(-pods // k)):
        mine = rows[b * k:(b + 1) * k]
        chips = sum(int(r["chips"]) for r in mine)
        counts = {f: sum(int(r[f]) for r in mine) for f in ("healthy", "failed", "spare", "busy")}
        blocks.append({"block": b, "pods": [r["pod"] for r in mine], "chips": chips, **counts,
                       "utilization": round(counts["busy"] / chips, 4) if chips else 0.0})
    head = snapshot.head
    return {"cluster_id": head.get("cluster_id"), "name": head.get("name"), "time": head.get("time"),
            "pods_per_block": k, "pods": rows, "blocks": blocks}
