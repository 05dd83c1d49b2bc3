"""Queue order, aging and quotas: pure rules the scheduler applies each cycle.

* Order: effective priority, highest first; ties by submit time, then job id.
* Aging: effective priority = priority + time queued / ``aging_interval_s`` (one level
  per interval), so a low-priority job eventually outranks newer high-priority ones.
* No starvation: the first job in queue order that has waited ``starvation_s`` and still
  cannot be placed holds the block it is waiting for (``starvation.py``): that block's
  free chips, and every chip freed there later, are kept for it while other jobs keep
  backfilling elsewhere. Preemption is still tried for it.
* Quotas: a team's chips in use (running + nominated) plus the job's must stay within
  the team's quota; over-quota jobs wait with the numbers in their reason and never
  trigger preemption. Preemption compares base priorities (aging never preempts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from podfleet.errors import InvalidInputError
from podfleet.scheduler.jobs import SchedulerJob


@dataclass(frozen=True)
class QueuePolicy:
    aging_interval_s: float = 60.0
    starvation_s: float = 24 * 3600.0  # see docs/scheduler.md: shorter holds drain pods under overload
    # Fair share between the queues of a cohort (``queues.QueueBook.fair_share``): the
    # factor (0-1) times this weight is added to the effective priority, as Slurm's
    # PriorityWeightFairshare; decayed usage halves every ``fair_share_half_life_s``.
    fair_share_weight: float = 10.0
    fair_share_half_life_s: float = 7 * 24 * 3600.0

    def __post_init__(self) -> None:
        if self.aging_interval_s <= 0:
            raise InvalidInputError("aging_interval_s must be positive", field="aging_interval_s")
        if self.starvation_s <= 0:
            raise InvalidInputError("starvation_s must be positive", field="starvation_s")
        if self.fair_share_weight < 0:
            raise InvalidInputError("fair_share_weight must be >= 0", field="fair_share_weight")
        if self.fair_share_half_life_s <= 0:
            raise InvalidInputError("fair_share_half_life_s must be positive", field="fair_share_half_life_s")


def effective_priority(priority: int, queued_s: float, aging_interval_s: float) -> float:
    return priority + max(queued_s, 0.0) / aging_interval_s


def order(records: Iterable[SchedulerJob], now_s: float, policy: QueuePolicy,
          bonus: Mapping[str, float] | None = None) -> list[SchedulerJob]:
    """Queue order; ``bonus``: per queue, added to the effective priority (fair share)."""
    extra = bonus or {}
    return sorted(
        records,
        key=lambda r: (
            -effective_priority(r.request.priority, now_s - r.enqueued_s, policy.aging_interval_s)
            - extra.get(r.request.queue, 0.0),
            r.submitted_s,
            r.job_id,
        ),
    )


def within_quota(used_chips: int, ask_chips: int, quota_chips: int | None) -> bool:
    """The rule: a team may hold at most its quota (None = unlimited)."""
    return quota_chips is None or used_chips + ask_chips <= quota_chips


def check_quotas(quotas: Mapping[str, int]) -> dict[str, int]:
    out = {}
    for team, q in quotas.items():
        if not isinstance(q, int) or q < 0:
            raise InvalidInputError(f"quota for team {team!r} must be an integer >= 0, got {q!r}", field="quotas")
        out[str(team)] = q
    return out
