"""Which chip takes a failed rank: a free one in the group (pod) its tensor-parallel group
mates sit in, then in the pod the job's other ranks sit in, then closest to the rank's
ring neighbours (so the ring all-reduce keeps short hops), spares first.

In a fleet of pods a hop to another pod counts as 2 (``FleetTopology.hops``), fewer
than many hops inside a 4x4x4 torus; but a gang that spans pods talks over the network
tier, whose per-chip bandwidth is a fraction of NeuronLink's (the twin stretches the
job's communication by it), and a rank's state copies over it. So a free chip in the
job's own pod always wins over one in another pod, whatever the hops, except against
the rank's tensor-parallel group: a rank of a group that sits in another pod (it left a
full pod whole, ``recovery.home``) stays beside its mates. Back in the job's pod alone it
would split the group between pods and put its all-reduces, every layer's, on the
network tier (the twin measured a 64-chip llama3-70b step 2.39x the healthy one with one
rank of a group split off, against 1.007x with the whole group away: docs/health.md,
"Recovery flows"); the whole group comes home together once the pod has room for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from podfleet.hardware.topology import FleetTopology, Topology


def group_of(topology: Topology, chip: int) -> int:
    """The pod (fleet group) a chip is in; 0 outside a fleet."""
    return topology.split(chip)[0] if isinstance(topology, FleetTopology) else 0


def home_group(topology: Topology, chips: Sequence[int]) -> int | None:
    """The group holding most of a gang's chips (lowest on a tie); None outside a fleet or
    for a gang larger than a group (it spans groups by design)."""
    if not isinstance(topology, FleetTopology) or not chips or len(chips) > topology.group.n_chips:
        return None
    counts = Counter(group_of(topology, c) for c in chips)
    return min(counts, key=lambda g: (-counts[g], g))


def choose_spare(topology: Topology, chips: Sequence[int], rank: int, candidates: Iterable[int],
                 spares: frozenset[int] | set[int] = frozenset(), mates: Sequence[int] = ()) -> int | None:
    """The candidate that leaves the fewest of the rank's tensor-parallel group ``mates``
    (their chips) in another group, then the fewest of the job's other ranks, then with
    the fewest hops to ``chips[rank-1]``, ``chips[rank+1]`` and the rank's old chip;
    designated spares win ties over other free chips, then the lowest index."""
    n = len(chips)
    anchors = {chips[rank]}
    if n > 1:
        anchors |= {chips[(rank - 1) % n], chips[(rank + 1) % n]}
    fleet = isinstance(topology, FleetTopology)
    others = Counter(group_of(topology, c) for i, c in enumerate(chips) if i != rank) if fleet else Counter()
    mate_pods = Counter(group_of(topology, c) for c in mates if c != chips[rank]) if fleet else Counter()
    n_mates = sum(mate_pods.values())
    best: tuple[tuple[int, int, int, bool, int], int] | None = None
    for c in candidates:
        g = group_of(topology, c) if fleet else 0
        outside = (n - 1 - others[g]) if fleet else 0
        key = (n_mates - mate_pods[g], outside, sum(topology.hops(c, a) for a in anchors), c not in spares, c)
        if best is None or key < best[0]:
            best = (key, c)
    return None if best is None else best[1]


def free_chips(states: Sequence[str], owner: Mapping[int, str], exclude: Iterable[int] = ()) -> list[int]:
    """Healthy chips no job holds."""
    ex = set(exclude)
    return [i for i, s in enumerate(states) if s == "healthy" and i not in owner and i not in ex]


def tp_size(options: Mapping[str, object]) -> int:
    """The tensor-parallel degree of a job's plan (its ``plan`` or ``parallelism``
    option, as the control plane resolved it); 1 without one."""
    plan = options.get("plan") or options.get("parallelism")
    if isinstance(plan, Mapping):
        try:
            return max(int(plan.get("tp", 1)), 1)
        except (TypeError, ValueError):
            return 1
    return 1


def tp_group(chips: Sequence[int], options: Mapping[str, object], chip: int) -> list[int]:
    """The chips of ``chip``'s tensor-parallel group, in rank order (Megatron order puts
    tp fastest: ranks ``k*tp .. k*tp+tp-1``); just ``[chip]`` without a plan."""
    tp = tp_size(options)
    if tp <= 1 or chip not in chips or len(chips) % tp:
        return [chip]
    start = list(chips).index(chip) // tp * tp
    return list(chips[start:start + tp])


def whole_groups(chips: Sequence[int], group: Callable[[int], Sequence[int]]) -> list[list[int]]:
    """``chips`` split into whole groups, in order of first appearance: each chip with the
    members of ``group(chip)`` (its tensor-parallel group) that are among ``chips``."""
    wanted, placed = set(chips), set()
    out: list[list[int]] = []
    for c in chips:
        if c in placed:
            continue
        g = [x for x in group(c) if x in wanted and x not in placed] or [c]
        placed.update(g)
        out.append(g)
    return out
