"""Rate limits and the aggregation of refused calls (pure, clock injected).

``TokenBuckets``: one token bucket per key (a token id, a client address), refilled at
``rate_per_s`` up to ``burst``. A key idle long enough to be full again is forgotten, so
a flood of distinct keys cannot grow the table without bound.

``DenialLog``: an anonymous or denied call must be visible in the audit trail, but a
flood of them must not cost one durable (fsynced) audit row each. The first refusal of
a (client, actor, reason) key in a window is written at once; the rest are counted and
written as one summary row (``count``) when the window closes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_KEYS = 50_000


@dataclass
class _Bucket:
    tokens: float
    at: float


class TokenBuckets:
    def __init__(self, rate_per_s: float, burst: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError(f"rate limit needs rate_per_s > 0 and burst >= 1, got {rate_per_s}, {burst}")
        self.rate_per_s, self.burst, self.clock = rate_per_s, burst, clock
        self.buckets: dict[str, _Bucket] = {}

    def _level(self, key: str, now: float) -> _Bucket:
        b = self.buckets.get(key)
        if b is None:
            if len(self.buckets) >= MAX_KEYS:
                self._forget_full(now)
            b = self.buckets[key] = _Bucket(self.burst, now)
        else:
            b.tokens = min(self.burst, b.tokens + (now - b.at) * self.rate_per_s)
            b.at = now
        return b

    def _forget_full(self, now: float) -> None:
        full_after_s = self.burst / self.rate_per_s
        for k in [k for k, b in self.buckets.items() if now - b.at >= full_after_s]:
            del self.buckets[k]
        if len(self.buckets) >= MAX_KEYS:  # still full of busy keys: start over rather than grow
            self.buckets.clear()

    def take(self, key: str, cost: float = 1.0) -> bool:
        """Spend ``cost`` from ``key``'s bucket; False (nothing spent) when it is empty."""
        b = self._level(key, self.clock())
        if b.tokens < cost:
            return False
        b.tokens -= cost
        return True

    def allows(self, key: str, cost: float = 1.0) -> bool:
        """Whether ``take`` would succeed, without spending."""
        return self._level(key, self.clock()).tokens >= cost

    def retry_after_s(self, key: str, cost: float = 1.0) -> float:
        b = self._level(key, self.clock())
        return max(0.0, (cost - b.tokens) / self.rate_per_s)


@dataclass(frozen=True)
class Denial:
    """One audit row to write: ``count`` refusals of ``key`` (the first, or a summary)."""

    actor: str
    action: str
    target: str
    detail: dict[str, Any]


@dataclass
class _Window:
    opened: float
    pending: int = 0
    last: Denial | None = None
    actions: set[str] = field(default_factory=set)


class DenialLog:
    def __init__(self, window_s: float = 60.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s, self.clock = window_s, clock
        self.windows: dict[tuple[str, str, str], _Window] = {}
        self._next_due = clock()

    def record(self, *, client: str, actor: str, action: str, target: str,
               detail: dict[str, Any]) -> list[Denial]:
        """Note one refusal; returns the rows to write now (often none)."""
        now = self.clock()
        out = self._close(lambda w: now - w.opened >= self.window_s)
        key = (client, actor, str(detail.get("reason", "")))
        row = Denial(actor, action, target, {**detail, "client": client, "count": 1})
        w = self.windows.get(key)
        if w is None:
            if len(self.windows) >= MAX_KEYS:
                out.extend(self.flush())
            self.windows[key] = _Window(now)
            out.append(row)
        else:
            w.pending += 1
            w.last = row
            w.actions.add(action)
        return out

    def _close(self, done: Callable[[_Window], bool]) -> list[Denial]:
        out = []
        for key, w in list(self.windows.items()):
            if done(w):
                del self.windows[key]
                if w.pending and w.last is not None:
                    detail = {**w.last.detail, "count": w.pending, "aggregated": True,
                              "window_s": self.window_s, "actions": sorted(w.actions)[:20]}
                    out.append(Denial(w.last.actor, w.last.action, w.last.target, detail))
        return out

    def flush(self) -> list[Denial]:
        """Every pending summary, now (shutdown, tests)."""
        return self._close(lambda w: True)

    def due(self) -> list[Denial]:
        """Summaries of windows that have closed (a periodic caller writes them)."""
        now = self.clock()
        return self._close(lambda w: now - w.opened >= self.window_s)

    def due_at_most_every(self, interval_s: float) -> list[Denial]:
        """``due``, but scanning the windows at most once per ``interval_s`` (a flood
        calls this per request)."""
        now = self.clock()
        if now < self._next_due:
            return []
        self._next_due = now + interval_s
        return self.due()
