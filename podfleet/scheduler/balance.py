"""Dynamic load balancing: monitor, straggler detection, and the actions that even load.

Pure numpy. ``LoadMonitor`` keeps a window of per-chip samples (relative speed =
clock / nominal, utilization, HBM bandwidth) and per-link slowdown (effective latency
over nominal, i.e. nominal bandwidth / measured bandwidth); ``attach`` samples a fabric
every 5 ms of timeline time. ``StragglerDetector`` flags chips whose speed relative to
their job's median stays below ``threshold`` for ``window`` consecutive samples.

Actions (pure functions; ``Rebalancer`` decides and records each as an event with a
reason):

* ``split_microbatches``: micro-batches across data-parallel replicas in proportion to
  measured speed, by water-filling (minimises the slowest replica's time exactly).
* ``partition_layers``: contiguous pipeline stages whose times (layer cost / stage
  speed) are as even as possible (dynamic programme, minimises the slowest stage).
* ``ring_avoiding``: a ring order over the job's block that does not cross a slow link
  (snake walks over axis permutations and reflections of the block).
* swap a persistent straggler for a free spare (the control plane moves the rank).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from podfleet.errors import InvalidInputError
from podfleet.scheduler.blocks import ring_orders

if TYPE_CHECKING:
    import simpy

    from podfleet.engine.timeline import Timeline
    from podfleet.fabric.base import Fabric


# --- pure rules --------------------------------------------------------------------------
def split_microbatches(speeds: Sequence[float] | np.ndarray, total: int, minimum: int = 1) -> np.ndarray:
    """Integers summing to ``total`` minimising max(m_i / speed_i) (each >= ``minimum``)."""
    s = np.asarray(speeds, dtype=float)
    n = len(s)
    if n == 0 or total < n * minimum or (s <= 0).any():
        raise InvalidInputError(f"cannot split {total} micro-batches over {n} replicas with speeds > 0", field="total")
    # Start from the proportional floor, then hand out the rest one at a time to the
    # replica whose finish time grows least (exact water-filling for a few leftovers).
    m: np.ndarray = np.maximum(np.floor(total * s / s.sum()).astype(np.int64), minimum)
    while m.sum() > total:
        i = int(np.argmax(np.where(m > minimum, m / s, -np.inf)))
        m[i] -= 1
    left = total - int(m.sum())
    for _ in range(left):
        i = int(np.argmin((m + 1) / s))
        m[i] += 1
    return m


def partition_layers(layer_costs: Sequence[float], stage_speeds: Sequence[float] | np.ndarray) -> tuple[int, ...]:
    """Layers per stage (contiguous, >= 1 each) minimising the slowest stage time."""
    c = np.asarray(layer_costs, dtype=float)
    sp = np.asarray(stage_speeds, dtype=float)
    L, S = len(c), len(sp)
    if S < 1 or L < S or (sp <= 0).any():
        raise InvalidInputError(f"need at least {S} layers for {S} stages and speeds > 0", field="layers")
    pre = np.concatenate([[0.0], np.cumsum(c)])
    best = np.full((S + 1, L + 1), np.inf)
    cut = np.zeros((S + 1, L + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for s in range(1, S + 1):
        for j in range(s, L - (S - s) + 1):
            i = np.arange(s - 1, j)
            cand = np.maximum(best[s - 1, i], (pre[j] - pre[i]) / sp[s - 1])
            k = int(np.argmin(cand))
            best[s, j], cut[s, j] = cand[k], i[k]
    out: list[int] = []
    j = L
    for s in range(S, 0, -1):
        start = int(cut[s, j])
        out.append(j - start)
        j = start
    return tuple(reversed(out))


def ring_pairs(order: Sequence[int]) -> set[frozenset[int]]:
    o = list(order)
    return {frozenset((o[i], o[(i + 1) % len(o)])) for i in range(len(o))} if len(o) > 1 else set()


def ring_avoiding(
    dims: tuple[int, ...], offset: tuple[int, ...], shape: tuple[int, ...], bad: set[frozenset[int]]
) -> tuple[int, ...] | None:
    """A ring order (chip indices) over the block that uses none of the ``bad`` chip pairs."""
    mult = np.cumprod((1, *dims[:-1]))
    for local in ring_orders(shape):
        chips = (((np.asarray(offset) + local) % np.asarray(dims)) * mult).sum(axis=1)
        if not (ring_pairs(chips.tolist()) & bad):
            return tuple(int(c) for c in chips)
    return None


# --- monitoring ----------------------------------------------------------------------------
class LoadMonitor:
    """Windows of vectorized samples; ``window`` samples (at 5 ms: 0.2 s by default)."""

    def __init__(self, n_chips: int, n_links: int = 0, window: int = 40) -> None:
        self.window = window
        self.speed = np.ones((window, n_chips))
        self.util = np.zeros((window, n_chips))
        self.hbm_bw = np.zeros((window, n_chips))
        self.link_slowdown = np.ones((window, n_links))
        self.n = 0
        self.t = 0.0

    def sample(self, t: float, speed: np.ndarray, util: np.ndarray | None = None,
               hbm_bw: np.ndarray | None = None, link_slowdown: np.ndarray | None = None) -> None:
        i = self.n % self.window
        self.speed[i] = speed
        if util is not None:
            self.util[i] = util
        if hbm_bw is not None:
            self.hbm_bw[i] = hbm_bw
        if link_slowdown is not None and link_slowdown.size:
            self.link_slowdown[i] = link_slowdown
        self.n += 1
        self.t = t

    def _rows(self) -> slice:
        return slice(0, min(self.n, self.window))

    def mean_speed(self) -> np.ndarray:
        mean: np.ndarray = self.speed[self._rows()].mean(axis=0) if self.n else self.speed[0]
        return mean

    def mean_link_slowdown(self) -> np.ndarray:
        mean: np.ndarray = self.link_slowdown[self._rows()].mean(axis=0) if self.n else self.link_slowdown[0]
        return mean

    def attach(self, timeline: Timeline, fabric: Fabric, interval_s: float = 0.005) -> simpy.Process:
        """Sample ``fabric.chip_metrics()`` / ``link_metrics()`` every ``interval_s`` of timeline time."""
        def tick() -> None:
            m = fabric.chip_metrics()
            clock = np.asarray(m["clock_mhz"], float)
            util = np.asarray(m["neuroncore_utilization"], float)
            util = util.mean(axis=1) / 100.0 if util.ndim == 2 else util / 100.0
            lm = fabric.link_metrics()
            bw = np.asarray(lm["bandwidth_bytes_per_s"], float)
            nominal = np.asarray(lm["nominal_bandwidth_bytes_per_s"], float)
            slow = np.where(bw > 0, nominal / np.maximum(bw, 1e-9), np.inf)
            self.sample(timeline.now, clock / clock.max() if clock.max() > 0 else clock, util,
                        np.asarray(m["hbm_bw_bytes_per_s"], float), slow)
        return timeline.every(interval_s, tick)


class StragglerDetector:
    """Chips slower than ``threshold`` x their job's median for ``window`` samples in a row."""

    def __init__(self, n_chips: int, threshold: float = 0.9, window: int = 20) -> None:
        if not 0 < threshold < 1:
            raise InvalidInputError(f"threshold must be in (0, 1), got {threshold}", field="threshold")
        self.threshold = threshold
        self.window = window
        self.run = np.zeros(n_chips, dtype=np.int64)  # consecutive slow samples per chip

    def update(self, chips: Sequence[int], speed: np.ndarray) -> np.ndarray:
        """Feed one sample for a job's chips; returns the chips that are stragglers now."""
        idx = np.asarray(chips, dtype=np.int64)
        s = np.asarray(speed, float)[idx]
        rel = s / max(float(np.median(s)), 1e-12)
        slow = rel < self.threshold
        self.run[idx] = np.where(slow, self.run[idx] + 1, 0)
        return idx[self.run[idx] >= self.window]


@dataclass(frozen=True)
class BalanceAction:
    t: float
    kind: str  # move-microbatches | repartition-layers | reroute-ring | swap-straggler
    job_id: str
    reason: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class DPJob:
    """What the rebalancer tracks for a data-parallel job (one replica per chip group)."""

    job_id: str
    chips: tuple[int, ...]  # rank order (the DP ring)
    microbatches: np.ndarray  # per rank
    block: tuple[tuple[int, ...], tuple[int, ...]] | None = None  # (offset, shape) in the pod
    stage_layers: tuple[int, ...] = ()  # pipeline: layers per stage (empty: no pipeline)
    layer_costs: tuple[float, ...] = ()


class Rebalancer:
    """Decides actions from monitor data; ``emit(kind, **fields)`` records each (e.g. tl.emit)."""

    def __init__(self, monitor: LoadMonitor, dims: tuple[int, ...], *, links: tuple[np.ndarray, np.ndarray] | None = None,
                 tolerance: float = 0.01, slow_link: float = 1.5, swap_after: int = 200,
                 emit: Callable[..., object] | None = None, threshold: float = 0.9, window: int = 20) -> None:
        self.monitor = monitor
        self.dims = dims
        self.links = links  # (src, dst) arrays over the pod's links
        self.tolerance = tolerance
        self.slow_link = slow_link
        self.swap_after = swap_after
        self.emit = emit
        self.detector = StragglerDetector(monitor.speed.shape[1], threshold, window)
        self.actions: list[BalanceAction] = []

    def _record(self, a: BalanceAction) -> None:
        self.actions.append(a)
        if self.emit is not None:
            self.emit("rebalance", action=a.kind, job_id=a.job_id, reason=a.reason, **a.detail)

    def step(self, job: DPJob, spares_free: Sequence[int] = ()) -> list[BalanceAction]:
        t, out = self.monitor.t, []
        speed = self.monitor.mean_speed()
        chips = np.asarray(job.chips)
        s = speed[chips]
        cur = float((job.microbatches / s).max())
        ideal = split_microbatches(s, int(job.microbatches.sum()))
        if cur > (1 + self.tolerance) * float((ideal / s).max()) and not np.array_equal(ideal, job.microbatches):
            # Name the rank whose share changes most (a slowdown, or a recovery); of equal
            # changes, the one furthest from the median speed (the cause, not a helper).
            change = np.abs(ideal - job.microbatches)
            cand = np.flatnonzero(change == change.max())
            worst = int(cand[np.argmax(np.abs(s[cand] / np.median(s) - 1.0))])
            reason = (f"rank {worst} (chip {int(chips[worst])}) at {s[worst] / np.median(s):.2f}x median speed; "
                      f"its micro-batches {int(job.microbatches[worst])} -> {int(ideal[worst])}")
            moved = int(np.abs(ideal - job.microbatches).sum()) // 2
            job.microbatches = ideal
            out.append(BalanceAction(t, "move-microbatches", job.job_id, reason, {"moved": moved}))
        if job.stage_layers and job.layer_costs:
            stage_speed = np.array([s[i * len(s) // len(job.stage_layers)] for i in range(len(job.stage_layers))])
            layers = partition_layers(job.layer_costs, stage_speed)
            if layers != job.stage_layers:
                out.append(BalanceAction(t, "repartition-layers", job.job_id,
                                         f"stage times uneven; layers per stage {list(job.stage_layers)} -> {list(layers)}"))
                job.stage_layers = layers
        if self.links is not None and job.block is not None:
            slow = self.monitor.mean_link_slowdown()
            bad_links = np.flatnonzero(slow > self.slow_link)
            bad = {frozenset((int(self.links[0][k]), int(self.links[1][k]))) for k in bad_links}
            used = ring_pairs(job.chips) & bad
            if used:
                order = ring_avoiding(self.dims, job.block[0], job.block[1], bad)
                if order is not None:
                    pos = {c: i for i, c in enumerate(job.chips)}
                    job.microbatches = job.microbatches[[pos[c] for c in order]]
                    pair = sorted(next(iter(used)))
                    k = int(bad_links[0])
                    out.append(BalanceAction(t, "reroute-ring", job.job_id,
                                             f"link {k} (chips {pair[0]}-{pair[1]}) at {slow[k]:.1f}x nominal latency; ring re-ordered around it"))
                    job.chips = order
        stragglers = self.detector.update(job.chips, self.monitor.speed[(self.monitor.n - 1) % self.monitor.window])
        persistent = [int(c) for c in stragglers if self.detector.run[c] >= self.swap_after]
        free = list(spares_free)
        for c in persistent:
            if not free:
                break
            spare = free.pop(0)
            job.chips = tuple(spare if x == c else x for x in job.chips)
            self.detector.run[c] = 0
            out.append(BalanceAction(t, "swap-straggler", job.job_id,
                                     f"chip {c} slow for {self.swap_after} samples; rank moved to spare chip {spare}",
                                     {"chip": c, "spare": spare}))
        for a in out:
            self._record(a)
        return out
