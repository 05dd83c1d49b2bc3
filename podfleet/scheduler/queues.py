"""Queues, cohorts, borrowing and lending: the pure quota rules of admission.

A queue (Kueue's ClusterQueue) owns a ``nominal`` number of chips. Queues that name the
same ``cohort`` lend each other what they leave idle:

* A queue may hold up to its nominal quota at any time (reclaiming it if lent out).
* Above nominal it borrows: at most ``borrowing_limit`` chips (None: no limit of its
  own), and only out of the cohort's lendable idle quota.
* What a queue lends is at most ``lending_limit`` chips of its unused nominal quota
  (None: all of it). The rule kept at every admission::

      sum over the cohort of borrowed(Q)  <=  sum over the cohort of lendable(Q)
      borrowed(Q) = max(0, used(Q) - nominal(Q))
      lendable(Q) = min(lending_limit(Q), max(0, nominal(Q) - used(Q)))

  so the borrowed chips can always be assigned to lenders within their limits.
* A queue admitting a job within its nominal quota while its idle quota is lent out
  reclaims it: jobs of borrowing queues (never of a queue within its nominal quota) are
  preempted with a checkpoint, as its ``reclaim`` policy allows (``never``,
  ``lower-priority``, ``any``; Kueue's ``reclaimWithinCohort``).

Every cluster has a ``default`` queue; until an operator defines it, it is unlimited and
in no cohort, so a cluster without queues schedules as before.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podfleet.errors import InfeasibleError, InvalidInputError

DEFAULT_QUEUE = "default"
RECLAIM_POLICIES = ("never", "lower-priority", "any")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@dataclass(frozen=True)
class QueueSpec:
    name: str
    nominal: int | None  # chips; None: unlimited (the implicit default queue only)
    cohort: str | None = None
    borrowing_limit: int | None = None  # None: as much as the cohort lends
    lending_limit: int | None = None  # None: all of its unused nominal quota
    weight: float = 1.0  # fair-share weight within the cohort
    reclaim: str = "any"  # never | lower-priority | any

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise InvalidInputError(f"queue name {self.name!r} must be 1-63 chars of a-z, 0-9 and '-'", field="name")
        if self.cohort is not None and not NAME_RE.match(str(self.cohort)):
            raise InvalidInputError(f"cohort {self.cohort!r} must be 1-63 chars of a-z, 0-9 and '-'", field="cohort")
        for fname in ("nominal", "borrowing_limit", "lending_limit"):
            v = getattr(self, fname)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise InvalidInputError(f"{fname} must be an integer >= 0, got {v!r}", field=fname)
        if self.nominal is None and self.cohort is not None:
            raise InfeasibleError(f"queue {self.name!r} needs a nominal quota to join cohort {self.cohort!r}",
                                  field="nominal")
        if self.lending_limit is not None and self.nominal is not None and self.lending_limit > self.nominal:
            raise InfeasibleError(f"lending_limit ({self.lending_limit}) exceeds nominal ({self.nominal})",
                                  field="lending_limit")
        if not isinstance(self.weight, int | float) or not 0 < float(self.weight) <= 1000:
            raise InvalidInputError(f"weight must be > 0 and <= 1000, got {self.weight!r}", field="weight")
        if self.reclaim not in RECLAIM_POLICIES:
            raise InvalidInputError(f"reclaim {self.reclaim!r} is not one of {', '.join(RECLAIM_POLICIES)}",
                                    field="reclaim", allowed=list(RECLAIM_POLICIES))

    def lendable(self, used: int) -> int:
        if self.nominal is None or self.cohort is None:
            return 0
        idle = max(0, self.nominal - used)
        return idle if self.lending_limit is None else min(self.lending_limit, idle)

    def borrowed(self, used: int) -> int:
        return 0 if self.nominal is None else max(0, used - self.nominal)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "nominal": self.nominal, "cohort": self.cohort,
                "borrowing_limit": self.borrowing_limit, "lending_limit": self.lending_limit,
                "weight": float(self.weight), "reclaim": self.reclaim}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> QueueSpec:
        known = {"name", "nominal", "cohort", "borrowing_limit", "lending_limit", "weight", "reclaim"}
        extra = sorted(set(d) - known)
        if extra:
            raise InvalidInputError(f"unknown queue field {extra[0]!r} (known: {', '.join(sorted(known))})",
                                    field=extra[0])
        if "nominal" not in d:
            raise InvalidInputError("nominal is required (chips the queue owns)", field="nominal")
        vals = {k: v for k, v in d.items() if v is not None or k == "nominal"}
        return cls(**vals)

    def updated(self, changes: Mapping[str, Any]) -> QueueSpec:
        """A copy with ``changes`` (a key set to None clears an optional limit)."""
        if "name" in changes and changes["name"] != self.name:
            raise InvalidInputError("a queue cannot be renamed", field="name")
        if "nominal" in changes and changes["nominal"] is None:
            raise InfeasibleError("nominal must be a chip count (an unlimited queue is the implicit default only)",
                                  field="nominal")
        return QueueSpec.from_dict({**self.to_dict(), **dict(changes)})


UNLIMITED_DEFAULT = QueueSpec(DEFAULT_QUEUE, None)


@dataclass(frozen=True)
class Admission:
    """The quota verdict for one job: ``ok`` (admit; ``borrow`` chips above nominal),
    or ``reclaim`` > 0 (within nominal, but that many chips lent out must come back
    first), or neither (wait; ``reason`` says why). ``final``: it can never be admitted."""

    ok: bool
    reason: str = ""
    borrow: int = 0
    reclaim: int = 0
    final: bool = False


@dataclass
class QueueBook:
    """The queues of one cluster and the chips each holds (running, nominated or
    checkpointing). The scheduler charges and releases; admission reads."""

    specs: dict[str, QueueSpec] = field(default_factory=lambda: {DEFAULT_QUEUE: UNLIMITED_DEFAULT})
    used: dict[str, int] = field(default_factory=dict)
    # Fair share (Slurm's fair-share factor): chip-seconds used, decayed with this half-life.
    half_life_s: float = 7 * 24 * 3600.0
    history: dict[str, float] = field(default_factory=dict)
    history_at_s: float = 0.0

    # --- definitions ------------------------------------------------------------------
    def put(self, spec: QueueSpec) -> None:
        self.specs[spec.name] = spec

    def remove(self, name: str) -> None:
        if name == DEFAULT_QUEUE:
            self.specs[name] = UNLIMITED_DEFAULT  # back to the implicit one
        else:
            self.specs.pop(name, None)

    def get(self, name: str) -> QueueSpec | None:
        return self.specs.get(name)

    def cohort_of(self, name: str) -> list[QueueSpec]:
        spec = self.specs.get(name)
        if spec is None or spec.cohort is None:
            return [spec] if spec is not None else []
        return [s for s in self.specs.values() if s.cohort == spec.cohort]

    # --- accounting -------------------------------------------------------------------
    def charge(self, name: str, chips: int) -> None:
        self.used[name] = self.used.get(name, 0) + chips

    def release(self, name: str, chips: int) -> None:
        self.used[name] = self.used.get(name, 0) - chips

    def usage(self, name: str) -> int:
        return self.used.get(name, 0)

    def borrowed(self, name: str) -> int:
        spec = self.specs.get(name)
        return 0 if spec is None else spec.borrowed(self.usage(name))

    def lent(self, name: str) -> int:
        """Chips of this queue's nominal quota other queues of its cohort use now (its
        share of the cohort's borrowing, lenders in name order)."""
        spec = self.specs.get(name)
        if spec is None or spec.cohort is None:
            return 0
        owed = sum(s.borrowed(self.usage(s.name)) for s in self.cohort_of(name))
        for s in sorted(self.cohort_of(name), key=lambda s: s.name):
            take = min(owed, s.lendable(self.usage(s.name)))
            if s.name == name:
                return take
            owed -= take
        return 0

    def capacity(self, name: str) -> int | None:
        """The most chips the queue can ever hold (None: unlimited)."""
        spec = self.specs.get(name)
        if spec is None or spec.nominal is None:
            return None
        if spec.cohort is None:
            return spec.nominal
        others = sum(s.nominal if s.lending_limit is None else s.lending_limit
                     for s in self.cohort_of(name) if s.name != name and s.nominal is not None)
        cap = others if spec.borrowing_limit is None else min(others, spec.borrowing_limit)
        return spec.nominal + cap

    def overdraw(self, used: Mapping[str, int], cohort: Iterable[QueueSpec]) -> int:
        """Chips borrowed in the cohort beyond what its lenders may lend, at ``used``."""
        members = list(cohort)
        borrowed = sum(s.borrowed(used.get(s.name, 0)) for s in members)
        lendable = sum(s.lendable(used.get(s.name, 0)) for s in members)
        return max(0, borrowed - lendable)

    # --- fair share -------------------------------------------------------------------
    def advance(self, now_s: float) -> None:
        """Fold the chips held since the last call into each queue's decayed usage:
        U(t+dt) = U(t)*2^(-dt/h) + chips * (h/ln 2) * (1 - 2^(-dt/h)), exact for chips
        held constant over dt (they are: every charge and release advances first)."""
        dt = now_s - self.history_at_s
        if dt <= 0:
            return
        k = 2.0 ** (-dt / self.half_life_s)
        gain = self.half_life_s / math.log(2.0) * (1.0 - k)
        for q in set(self.history) | set(self.used):
            self.history[q] = self.history.get(q, 0.0) * k + max(self.used.get(q, 0), 0) * gain
        self.history_at_s = now_s

    def fair_share(self, name: str) -> float:
        """Slurm's classic fair-share factor 2^(-usage/shares) in [0, 1] (1: unused): its
        share of the cohort's decayed usage against its share of the cohort's weights."""
        members = self.cohort_of(name)
        spec = self.specs.get(name)
        if spec is None or not members:
            return 0.0
        shares = float(spec.weight) / sum(float(s.weight) for s in members)
        total = sum(self.history.get(s.name, 0.0) for s in members)
        usage = self.history.get(name, 0.0) / total if total > 0 else 0.0
        return float(2.0 ** (-usage / shares))

    def share(self, name: str) -> float:
        """Dominant share (one resource: chips): chips held over the cohort's nominal
        chips, divided by its normalized weight (Kueue's fair sharing orders by it)."""
        members = self.cohort_of(name)
        spec = self.specs.get(name)
        cap = sum(s.nominal or 0 for s in members)
        if spec is None or cap <= 0:
            return 0.0
        w = float(spec.weight) / (sum(float(s.weight) for s in members) / len(members))
        return self.usage(name) / cap / w

    # --- the rule ---------------------------------------------------------------------
    def admit(self, name: str, chips: int) -> Admission:
        spec = self.specs.get(name)
        if spec is None:
            return Admission(False, f"queue {name!r} does not exist", final=True)
        if spec.nominal is None:
            return Admission(True)
        cap = self.capacity(name)
        if cap is not None and chips > cap:
            how = f"nominal {spec.nominal}" + (f" + {cap - spec.nominal} it can borrow" if cap > spec.nominal else "")
            return Admission(False, f"job asks {chips} chips; queue {name!r} can hold at most {cap} ({how})",
                             final=True)
        used = self.usage(name)
        after = used + chips
        if after <= spec.nominal:
            cohort = self.cohort_of(name)
            want = {**self.used, name: after}
            owed = self.overdraw(want, cohort)
            if owed > 0:
                return Admission(False, f"queue {name!r} reclaims {owed} chips lent to cohort {spec.cohort!r}",
                                 reclaim=owed)
            return Admission(True)
        borrow = after - spec.nominal
        where = f"used {used} of nominal {spec.nominal}, job asks {chips}"
        if spec.cohort is None:
            return Admission(False, f"queue {name!r} at its nominal quota ({where}); it is in no cohort to borrow from")
        if spec.borrowing_limit is not None and borrow > spec.borrowing_limit:
            return Admission(False, f"queue {name!r} would borrow {borrow} chips, over its borrowing limit "
                                    f"{spec.borrowing_limit} ({where})")
        cohort = self.cohort_of(name)
        want = {**self.used, name: after}
        if self.overdraw(want, cohort) > 0:
            idle = sum(s.lendable(self.usage(s.name)) for s in cohort) - sum(
                s.borrowed(self.usage(s.name)) for s in cohort)
            return Admission(False, f"queue {name!r} cannot borrow {borrow} chips: cohort {spec.cohort!r} has "
                                    f"{max(0, idle)} idle chips to lend ({where})")
        return Admission(True, borrow=borrow)

    def may_reclaim(self, name: str, victim_queue: str, job_priority: int, victim_priority: int) -> bool:
        """Whether queue ``name``'s reclaim policy lets it preempt a job of ``victim_queue``
        (another queue of its cohort; whether that one borrows is checked by the caller)."""
        spec, other = self.specs.get(name), self.specs.get(victim_queue)
        if spec is None or other is None or spec.cohort is None or other.cohort != spec.cohort or other.name == name:
            return False
        if spec.reclaim == "never":
            return False
        return not (spec.reclaim == "lower-priority" and victim_priority >= job_priority)

    def view(self, name: str) -> dict[str, Any]:
        spec = self.specs[name]
        return {**spec.to_dict(), "used": self.usage(name), "borrowed": self.borrowed(name), "lent": self.lent(name),
                "capacity": self.capacity(name), "share": round(self.share(name), 4),
                "usage": round(self.history.get(name, 0.0), 1), "fair_share": round(self.fair_share(name), 4)}


@dataclass(frozen=True)
class Holder:
    """A job that holds chips, as reclaim sees it."""

    job_id: str
    queue: str
    chips: int
    priority: int
    started_s: float = 0.0


def plan_reclaim(book: QueueBook, name: str, chips: int, priority: int, first: Iterable[Holder],
                 more: Iterable[Holder] = ()) -> tuple[str, ...] | None:
    """The jobs queue ``name`` preempts to admit ``chips`` within its nominal quota, or
    None when its policy and the cohort's borrowers cannot make room.

    ``first``: the holders of the block placement chose (all must go); ``more``: other
    holders, taken lowest priority and newest first while the cohort still lends more
    than its lenders may. Each victim, when taken, belongs to a queue that borrows (its
    usage, less the victims already taken, is above its nominal quota): a reclaim never
    preempts a job of a queue within its nominal quota."""
    spec = book.get(name)
    if spec is None or spec.nominal is None or book.usage(name) + chips > spec.nominal:
        return None
    used = dict(book.used)
    cohort = book.cohort_of(name)
    out: list[str] = []

    def take(h: Holder) -> bool:
        other = book.get(h.queue)
        if other is None or not book.may_reclaim(name, h.queue, priority, h.priority):
            return False
        if other.borrowed(used.get(h.queue, 0)) <= 0:
            return False
        used[h.queue] = used.get(h.queue, 0) - h.chips
        out.append(h.job_id)
        return True

    for h in first:
        if not take(h):
            return None
    for h in sorted(more, key=lambda h: (h.priority, -h.started_s, h.job_id)):
        if book.overdraw({**used, name: used.get(name, 0) + chips}, cohort) == 0:
            break
        if h.job_id not in out:
            take(h)
    if book.overdraw({**used, name: used.get(name, 0) + chips}, cohort) > 0:
        return None
    return tuple(out)


def with_defaults(specs: Iterable[QueueSpec]) -> QueueBook:
    book = QueueBook()
    for s in specs:
        book.put(s)
    return book
