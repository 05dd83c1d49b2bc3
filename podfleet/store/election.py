"""``Elector``: one server's side of the leadership lease (``store.lease``).

A step either asks for the lease (follower) or renews it (leader). The elector believes it
leads until ``started + ttl_s - margin_s`` on its own monotonic clock, where ``started`` is
read *before* the database call that granted or renewed the term: the row's expiry was set
later than that, by the database, so the belief always ends first and two electors never
both believe they lead (tests/store/test_lease.py checks this with a fake clock). A belief
that runs out, or a renewal refused, ends the term: ``on_lost`` is called and the elector
is a follower again. Either way the store's fence (``Fence``) refuses the old term's
writes, whatever the elector believes.

A leader whose belief runs out while the database does not answer (its renewals failed:
an outage, not a takeover) is *suspended*, not ended: it no longer leads (``leads`` is
False, so two electors still never both lead) but keeps its memory and answers reads from
it (``serves_reads``). When the database answers again it ``reclaim``s the lease if the row
still names its term (nobody took over: its memory is the store's) and leads on under a
new term (``on_elected``); if another term came in between, its term ends (``on_lost``).

A follower's next round comes at the lease's expiry when that is sooner than its usual
cadence (``next_round_s``): after a leader dies, the lease lapses at its last renewal plus
``ttl_s``, and a follower that only looked once a second took over up to a second late.

``run_forever`` is the thread; ``step`` one round, so tests drive it with a fake clock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from enum import StrEnum

from podfleet.store.lease import Lease, LeaseState

log = logging.getLogger("podfleet.election")
# A follower's round timed for the lease's expiry comes this much after it (the database's
# clock and this host's timer differ by scheduling noise), and never sooner than this.
EXPIRY_SLACK_S = 0.02


class Role(StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"


class Elector:
    def __init__(self, lease: Lease, holder: str, url: str, *, margin_s: float | None = None,
                 on_elected: Callable[[int], object] | None = None, on_lost: Callable[[int, str], object] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.lease, self.holder, self.url = lease, holder, url
        # A quarter of the lease by default: room for a renewal that is slow to answer.
        self.margin_s = lease.ttl_s / 4 if margin_s is None else margin_s
        self.on_elected, self.on_lost = on_elected, on_lost
        self.monotonic = monotonic
        self.term: int | None = None
        self.valid_until = 0.0
        self.last_error: str | None = None
        self.known: LeaseState | None = None  # the row as last read (who leads, at which URL)
        self.read_mono = 0.0  # when ``known`` was read (this host's monotonic clock)
        self.suspended: int | None = None  # a term that lapsed while the database was out of reach
        self._stop = threading.Event()

    @property
    def interval_s(self) -> float:
        """How often a round runs: renewals several times per lease, so one slow round
        does not lose it."""
        return self.lease.ttl_s / 4

    def next_round_s(self) -> float:
        """How long until the next round: the usual cadence, or sooner when the lease a
        follower last read runs out before that."""
        if self.term is not None or self.known is None or self.known.holder == self.holder \
                or self.last_error is not None:  # a database that fails is not asked faster
            return self.interval_s
        left = self.known.remaining_s - (self.monotonic() - self.read_mono)
        return max(EXPIRY_SLACK_S, min(self.interval_s, left + EXPIRY_SLACK_S))

    def leads(self) -> bool:
        return self.term is not None and self.monotonic() < self.valid_until

    @property
    def serves_reads(self) -> bool:
        """Whether this server's memory is the leader's: it leads, or its term lapsed only
        because the database is out of reach (nothing else could have written)."""
        # A term past its lease whose renewals failed is suspended at the next step; until
        # that step runs (later under load) its memory is still the leader's, and a read
        # refused in between would be a 503 for nothing.
        lapsed_in_outage = self.term is not None and self.last_error is not None
        return self.leads() or self.suspended is not None or lapsed_in_outage

    @property
    def role(self) -> Role:
        return Role.LEADER if self.leads() else Role.FOLLOWER

    def leader_url(self) -> str | None:
        """The leader's URL as last read (None: unknown, or the lease has lapsed)."""
        if self.leads():
            return self.url
        return self.known.url if self.known is not None and self.known.holder != self.holder else None

    def step(self) -> None:
        started = self.monotonic()
        if self.term is not None and started >= self.valid_until:
            if self.last_error is not None:  # renewals failed: the database is out of reach
                self._suspend()
            else:
                self._lose("its lease ran out before a renewal was confirmed")
        try:
            if self.suspended is not None:
                self._reclaim(started)
            elif self.term is None:
                term = self.lease.acquire(self.holder, self.url)
                if term is not None:
                    self.term, self.valid_until = term, started + self.lease.ttl_s - self.margin_s
                    self.known = LeaseState(self.holder, self.url, term, 0.0)
                    log.info("leader: term %d (%s)", term, self.holder)
                    if self.on_elected is not None:
                        self.on_elected(term)
                else:
                    self._read()
            elif self.lease.renew(self.holder, self.term):
                self.valid_until = started + self.lease.ttl_s - self.margin_s
            else:
                self._lose("the lease was taken over")
                self._read()
            self.last_error = None
        except Exception as exc:  # the database unreachable: this round changes nothing
            self.last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    def _suspend(self) -> None:
        self.suspended, self.term = self.term, None
        log.warning("leadership suspended: term %s lapsed while the database was out of reach (%s); "
                    "reads answer from memory", self.suspended, self.last_error)

    def _reclaim(self, started: float) -> None:
        old = self.suspended
        assert old is not None
        term = self.lease.reclaim(self.holder, old)  # raises while the database is still out of reach
        self.suspended = None
        if term is None:
            self.term = old  # so that ``_lose`` ends it
            self._lose("another server took the lease while the database was out of reach")
            self._read()
            return
        self.term, self.valid_until = term, started + self.lease.ttl_s - self.margin_s
        self.known = LeaseState(self.holder, self.url, term, 0.0)
        log.warning("leader again: term %d follows term %d (nobody took over during the outage)", term, old)
        if self.on_elected is not None:
            self.on_elected(term)

    def _read(self) -> None:
        started = self.monotonic()
        self.known = self.lease.read()
        self.read_mono = started  # read before the call: the expiry it computes is never late

    def _lose(self, why: str) -> None:
        term, self.term = self.term, None
        if term is None:
            return
        log.warning("leadership lost: term %d ended: %s", term, why)
        if self.on_lost is not None:
            self.on_lost(term, why)

    def run_forever(self) -> None:
        while not self._stop.wait(self.next_round_s()):
            self.step()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run_forever, name="podfleet-elector", daemon=True)
        thread.start()
        return thread

    def stop(self, *, release: bool = True) -> None:
        self._stop.set()
        term = self.term
        if release and term is not None:
            try:
                self.lease.release(self.holder, term)
            except Exception as exc:  # unreachable: the lease lapses by itself after ttl
                log.warning("lease not released (%s); it lapses after %.0f s", exc, self.lease.ttl_s)
            self.term = None
