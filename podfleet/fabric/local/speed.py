"""Per-rank speed of a data-parallel gang, from the times its workers report.

A synchronous gang ends every step together (the gradient all-reduce), so a slow rank
does not show a longer step: the others show it, as time spent waiting for it. What
each worker does report is enough to tell who they wait for: rank r's progress message
for step k carries its wall time ``t`` at the end of the step (one host, one clock) and
its ``step_time_s`` (loop top to the end of the update, waits included), so

* its step started at ``s_r = t_r(k) - step_time_r(k)``;
* between steps it was away for ``gap_r = s_r - t_r(k-1)`` (whatever the rank does
  outside the step: a slow input pipeline, host work, an emulated slow chip);
* the step's shared part began when the last rank arrived, ``R = max_r s_r``: from
  then to its end every rank computes its share, so rank r is credited
  ``(t_r(k) - R) * share_r / max share`` of it (compute scales with samples; the rank
  with the most samples sets that part's length).

``own_r = gap_r + credited compute`` is the rank's own time for the step, and
``samples_per_s_r = share_r / own_r`` its speed, which does not depend on the split
(the rebalancer can compare ranks across splits). A rank that is slow *inside* the
forward/backward pass looks like the others here (its slowness hides in the shared
part); telling that apart needs the worker to report its compute time separately.

The split in force for a step comes from the workers too: rank 0 logs
``work split [..] -> [..] from step N`` when it adopts a new one (``training/loop``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

_SPLIT_LINE = re.compile(r"work split \[[^\]]*\] -> \[([0-9, ]+)\] from step (\d+)")


@dataclass
class RankSpeed:
    """One attempt of one job: per-step report times and the splits in force."""

    world: int
    splits: list[tuple[int, tuple[int, ...]]]  # (from step, samples per rank), in step order
    ends: dict[int, dict[int, tuple[float, float]]] = field(default_factory=dict)  # step -> rank -> (t, step_time_s)
    own_s: np.ndarray | None = None  # last measured step, per rank
    samples_per_s: np.ndarray | None = None
    measured_step: int = 0

    def shares_at(self, step: int) -> tuple[int, ...]:
        got = self.splits[0][1]
        for start, shares in self.splits:
            if start <= step:
                got = shares
        return got

    def split_logged(self, line: str) -> None:
        """Rank 0's log line announcing a new split (ignored if it does not parse)."""
        m = _SPLIT_LINE.search(line)
        if m is None:
            return
        shares = tuple(int(x) for x in m.group(1).split(","))
        if len(shares) == self.world:
            self.splits.append((int(m.group(2)), shares))

    def observe(self, step: int, rank: int, t: float, step_time_s: float) -> bool:
        """Record one rank's report; True when it completed a measurement (step and step-1 in)."""
        got = self.ends.setdefault(step, {})
        got[rank] = (t, step_time_s)
        prev = self.ends.get(step - 1)
        if len(got) < self.world or prev is None or len(prev) < self.world:
            return False
        ends = np.array([got[r][0] for r in range(self.world)])
        starts = ends - np.array([got[r][1] for r in range(self.world)])
        gap = np.maximum(starts - np.array([prev[r][0] for r in range(self.world)]), 0.0)
        shares = np.asarray(self.shares_at(step), dtype=float)
        shared = np.maximum(ends - starts.max(), 0.0) * shares / shares.max()
        own = np.maximum(gap + shared, 1e-6)
        self.own_s, self.samples_per_s, self.measured_step = own, shares / own, step
        for old in [s for s in self.ends if s < step - 1]:
            del self.ends[old]
        return True
