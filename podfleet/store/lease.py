"""The leadership lease of servers that share one PostgreSQL store, and its fencing token.

Why a lease row and not a session advisory lock: an advisory lock lives as long as the
holder's connection, and a paused leader (SIGSTOP, a VM frozen, a GC stall) keeps its TCP
connection open, so nobody could take over until the kernel gave up on the socket,
minutes later. A row with an expiry hands the lease on after ``ttl_s`` whatever the old
holder does, and its ``term`` (raised by every takeover) is the fencing token: each write
transaction of a leader first reads the row ``FOR KEY SHARE`` and goes on only if the term
is still its own (``check``), in the same transaction, so a leader paused past its lease
changes nothing once it wakes up. The share lock makes a takeover wait for a write
transaction in flight; PostgreSQL ends a transaction left idle by a paused process after
``idle_in_transaction_session_timeout`` (``store.engine``), so that wait is bounded.

Time is the database's (``clock_timestamp()``), one clock for every server whatever their
hosts' clocks say; tests give a fake clock. The holder's own belief ("I lead until T") is
kept on its monotonic clock by ``store.election.Elector``, started *before* it asks, so it
always ends before the row's expiry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, insert, select, text, update
from sqlalchemy.orm import Session

from podfleet.errors import NotLeaderError
from podfleet.store.models import LeaderLeaseRow, table_of

LEASE_NAME = "engine"
# How long a takeover may wait for the lease row's lock (a transaction of the old leader
# in flight) before it gives up and asks again on its next round.
LOCK_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class LeaseState:
    holder: str
    url: str
    term: int
    expires_at: float
    # Seconds the lease had left when read, by the database's clock (the reader's own clock
    # may differ from it, but a duration does not depend on whose clock measured it).
    remaining_s: float = 0.0


Clock = Callable[[Connection], float]


def database_clock(conn: Connection) -> float:
    """Unix seconds by the database server (PostgreSQL), or this host (SQLite: one host)."""
    if conn.dialect.name == "postgresql":
        return float(conn.execute(text("SELECT EXTRACT(EPOCH FROM clock_timestamp())")).scalar_one())
    return time.time()


class Lease:
    """One named lease row on ``engine`` (each call is its own short transaction)."""

    def __init__(self, engine: Engine, *, ttl_s: float, name: str = LEASE_NAME, clock: Clock = database_clock) -> None:
        if ttl_s <= 0:
            raise ValueError(f"lease ttl must be positive, got {ttl_s}")
        self.engine, self.ttl_s, self.name, self.clock = engine, ttl_s, name, clock

    def read(self) -> LeaseState | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(table_of(LeaderLeaseRow)).where(LeaderLeaseRow.name == self.name)).first()
            now = self.clock(conn) if row else 0.0
        if row is None:
            return None
        return LeaseState(row.holder, row.url, int(row.term), float(row.expires_at),
                          max(0.0, float(row.expires_at) - now))

    def acquire(self, holder: str, url: str) -> int | None:
        """Take the lease if it is free or expired: the new term; None while another holds it.
        Taking it again after one's own term lapsed is a new term too (writes of the old
        one may be in flight)."""
        with self.engine.begin() as conn:
            # A look without a lock first: while the lease is held (the common case for a
            # follower) nothing waits on the leader's write transactions.
            seen = conn.execute(select(table_of(LeaderLeaseRow)).where(LeaderLeaseRow.name == self.name)).first()
            if seen is not None and float(seen.expires_at) > self.clock(conn):
                return None
            if conn.dialect.name == "postgresql":
                conn.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
            row = self._locked(conn)
            now = self.clock(conn)
            if row is None:
                conn.execute(insert(table_of(LeaderLeaseRow)).values(
                    name=self.name, holder=holder, url=url, term=1, expires_at=now + self.ttl_s))
                return 1
            if float(row.expires_at) > now:
                return None
            term = int(row.term) + 1
            conn.execute(update(table_of(LeaderLeaseRow)).where(LeaderLeaseRow.name == self.name).values(
                holder=holder, url=url, term=term, expires_at=now + self.ttl_s))
            return term

    def reclaim(self, holder: str, term: int) -> int | None:
        """After one's own ``term`` lapsed with nobody taking over (the database was out of
        reach): a new term if the row still names ``term`` and ``holder``, else None. The
        holder's memory is then exactly what the store holds (no other term wrote), so it
        leads on without a reload; any other term in between ends it."""
        with self.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))
            row = self._locked(conn)
            if row is None or row.holder != holder or int(row.term) != term:
                return None
            now = self.clock(conn)
            conn.execute(update(table_of(LeaderLeaseRow)).where(LeaderLeaseRow.name == self.name).values(
                term=term + 1, expires_at=now + self.ttl_s))
            return term + 1

    def renew(self, holder: str, term: int) -> bool:
        """Extend one's own unexpired term by ``ttl_s``; False once it is not one's own (or
        has lapsed: a lapsed term is never revived, its holder must acquire a new one)."""
        # A plain conditional UPDATE of a non-key column: its row lock (FOR NO KEY UPDATE)
        # does not wait for the leader's own write transactions (FOR KEY SHARE, ``Fence``),
        # so a long transaction of the engine never delays the renewal of its lease.
        with self.engine.begin() as conn:
            now = self.clock(conn)
            res = conn.execute(update(table_of(LeaderLeaseRow)).where(
                LeaderLeaseRow.name == self.name, LeaderLeaseRow.holder == holder, LeaderLeaseRow.term == term,
                LeaderLeaseRow.expires_at > now).values(expires_at=now + self.ttl_s))
            return bool(res.rowcount)

    def release(self, holder: str, term: int) -> None:
        """A clean stop hands the lease on at once instead of after ``ttl_s``."""
        with self.engine.begin() as conn:
            now = self.clock(conn)
            conn.execute(update(table_of(LeaderLeaseRow)).where(
                LeaderLeaseRow.name == self.name, LeaderLeaseRow.holder == holder,
                LeaderLeaseRow.term == term).values(expires_at=now))

    def _locked(self, conn: Connection) -> LeaderLeaseRow | None:
        q = select(table_of(LeaderLeaseRow)).where(LeaderLeaseRow.name == self.name).with_for_update()
        return conn.execute(q).first()  # type: ignore[return-value]


@dataclass(frozen=True)
class Fence:
    """What a leader's write transaction checks first: the lease row still names its term."""

    holder: str
    term: int
    name: str = LEASE_NAME

    def check(self, session: Session) -> None:
        # FOR KEY SHARE: a takeover (FOR UPDATE of the row) waits until this transaction
        # ends, so the term read here stays the row's until our commit; the holder's own
        # renewals (an UPDATE of a non-key column) do not wait for it.
        q = select(LeaderLeaseRow.holder, LeaderLeaseRow.term).where(
            LeaderLeaseRow.name == self.name).with_for_update(read=True, key_share=True)
        row = session.execute(q).first()
        if row is None or row.holder != self.holder or int(row.term) != self.term:
            now = f"term {row.term} of {row.holder}" if row is not None else "no lease"
            raise NotLeaderError(f"write refused: this server's leadership (term {self.term}) has ended; "
                                 f"the lease is now {now}", retry_after_s=1)
