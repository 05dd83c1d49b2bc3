"""The leadership lease and its fencing token (``store.lease``, ``store.election``).

The property test drives two or three electors over one real lease row (SQLite, the same
SQL as on PostgreSQL) with a fake clock: servers pause, the database drops out, renewals
come late; at no instant do two electors believe they lead, terms only go up, and a
write under an ended term is refused by the fence.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection

from podfleet.errors import NotLeaderError
from podfleet.store import Store
from podfleet.store.election import Elector, Role
from podfleet.store.lease import Fence, Lease, LeaseState
from podfleet.store.records import ClusterRecord, ClusterStatus

TTL_S = 4.0


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def db(self, _conn: Connection) -> float:
        return self.t

    def mono(self) -> float:
        return self.t


class Flaky(Lease):
    """A lease whose database drops out when told (each call raises, as a cut connection)."""

    down = False

    def acquire(self, holder: str, url: str) -> int | None:
        if self.down:
            raise ConnectionError("database unreachable")
        return super().acquire(holder, url)

    def renew(self, holder: str, term: int) -> bool:
        if self.down:
            raise ConnectionError("database unreachable")
        return super().renew(holder, term)

    def reclaim(self, holder: str, term: int) -> int | None:
        if self.down:
            raise ConnectionError("database unreachable")
        return super().reclaim(holder, term)

    def read(self) -> LeaseState | None:
        if self.down:
            raise ConnectionError("database unreachable")
        return super().read()


def _store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'lease.db'}")


step_kind = st.one_of(
    st.tuples(st.just("step"), st.integers(0, 2)),  # elector i runs a round (others are paused)
    # time passes: a little, or about one lease (the edges where a takeover becomes possible)
    st.tuples(st.just("tick"), st.one_of(st.floats(0.01, 3.0), st.sampled_from([TTL_S - 0.01, TTL_S, TTL_S + 0.01]))),
    st.tuples(st.just("down"), st.booleans()),  # the database drops out / comes back
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(2, 3), steps=st.lists(step_kind, min_size=1, max_size=80))
def test_two_servers_never_both_hold_the_lease(tmp_path: Path, n: int,
                                               steps: list[tuple[str, object]]) -> None:
    clock = FakeClock()
    store = _store(tmp_path)
    try:
        with store.write_engine.begin() as conn:  # a fresh row per example
            conn.exec_driver_sql("DELETE FROM leader_lease")
        lease = Flaky(store.write_engine, ttl_s=TTL_S, clock=clock.db)
        lost: list[int] = []
        electors = [Elector(lease, f"s{i}", f"http://s{i}", monotonic=clock.mono,
                            on_lost=lambda term, _why: lost.append(term)) for i in range(n)]
        terms_seen: dict[int, str] = {}  # term -> its holder, in the order they came
        for kind, arg in steps:
            if kind == "step":
                e = electors[int(arg) % n]  # type: ignore[call-overload]
                e.step()
                if e.term is not None:
                    assert terms_seen.setdefault(e.term, e.holder) == e.holder, "a term held by two"
            elif kind == "tick":
                clock.t += float(arg)  # type: ignore[arg-type]
            else:
                lease.down = bool(arg)
            leaders = [e.holder for e in electors if e.leads()]
            assert len(leaders) <= 1, f"both lead at t={clock.t}: {leaders}"
            assert sum(1 for e in electors if e.role == Role.LEADER) == len(leaders)
        assert list(terms_seen) == sorted(terms_seen), "a later election got a lower term"
        # Every term but the current one is fenced off: a write under it is refused.
        lease.down = False
        current = lease.read()
        for term, holder in terms_seen.items():
            if current is not None and term != current.term:
                store.use_fence(Fence(holder, term))
                with pytest.raises(NotLeaderError):
                    store.save_cluster(ClusterRecord("cl-x", "x", "active", {}, ClusterStatus(), 0.0, 0.0))
    finally:
        store.close()


def test_a_paused_leader_loses_its_term_and_every_write(tmp_path: Path) -> None:
    """SIGSTOP in miniature: the leader stops running rounds, the lease lapses, another
    takes over; when the first wakes its belief has run out and its writes are refused."""
    clock = FakeClock()
    store = _store(tmp_path)
    lease = Lease(store.write_engine, ttl_s=TTL_S, clock=clock.db)
    lost: list[tuple[int, str]] = []
    a = Elector(lease, "a", "http://a", monotonic=clock.mono, on_lost=lambda t, why: lost.append((t, why)))
    b = Elector(lease, "b", "http://b", monotonic=clock.mono)
    a.step()
    assert a.leads() and a.term == 1
    store.use_fence(Fence("a", 1))
    store.save_cluster(ClusterRecord("cl-a", "a", "active", {}, ClusterStatus(), clock.t, clock.t))  # term 1 writes
    b.step()
    assert not b.leads() and b.leader_url() == "http://a"
    clock.t += TTL_S + 0.1  # a is paused past its lease
    assert not a.leads()
    b.step()
    assert b.leads() and b.term == 2
    with pytest.raises(NotLeaderError, match="term 2 of b"):
        store.save_cluster(ClusterRecord("cl-b", "b", "active", {}, ClusterStatus(), clock.t, clock.t))
    assert store.get_cluster("cl-b") is None
    a.step()  # a wakes: its round finds the lease gone and says so
    assert lost and lost[0][0] == 1 and not a.leads() and a.leader_url() == "http://b"
    store.use_fence(Fence("b", 2))
    store.save_cluster(ClusterRecord("cl-b", "b", "active", {}, ClusterStatus(), clock.t, clock.t))
    assert store.get_cluster("cl-b") is not None
    store.close()


def test_a_clean_stop_hands_the_lease_on_at_once(tmp_path: Path) -> None:
    clock = FakeClock()
    store = _store(tmp_path)
    lease = Lease(store.write_engine, ttl_s=TTL_S, clock=clock.db)
    a = Elector(lease, "a", "http://a", monotonic=clock.mono)
    b = Elector(lease, "b", "http://b", monotonic=clock.mono)
    a.step()
    a.stop()
    b.step()
    assert b.leads() and b.term == 2
    store.close()


def test_a_follower_times_its_next_round_for_the_lease_s_expiry(tmp_path: Path) -> None:
    # A dead leader's lease lapses at its last renewal + ttl: the follower's next round
    # comes then, not up to a whole round later.
    clock = FakeClock()
    store = _store(tmp_path)
    lease = Lease(store.write_engine, ttl_s=TTL_S, clock=clock.db)
    a = Elector(lease, "a", "http://a", monotonic=clock.mono)
    b = Elector(lease, "b", "http://b", monotonic=clock.mono)
    a.step()
    assert a.next_round_s() == a.interval_s == TTL_S / 4  # the leader renews on its cadence
    clock.t += 0.5
    b.step()  # reads the lease with 3.5 s left
    assert b.known is not None and b.known.remaining_s == pytest.approx(TTL_S - 0.5)
    assert b.next_round_s() == b.interval_s
    clock.t += 2.9  # 0.6 s left: sooner than the cadence
    assert b.next_round_s() == pytest.approx(0.6 + 0.02)
    b.last_error = "OperationalError: connection refused"  # a failed round: back to the cadence
    assert b.next_round_s() == b.interval_s
    b.last_error = None
    clock.t += 0.62  # a is gone: b's round at the expiry takes over
    b.step()
    assert b.leads() and b.term == 2
    c = Elector(lease, "c", "http://c", monotonic=clock.mono)
    c.step()
    assert not c.leads() and c.next_round_s() == pytest.approx(c.interval_s)
    clock.t += 2.9
    b.step()  # renewed: c, having read the old expiry, looks once more and then keeps its cadence
    assert b.leads()
    clock.t += 0.6
    assert c.next_round_s() == pytest.approx(0.5 + 0.02)
    clock.t += 0.52
    c.step()
    assert not c.leads() and c.next_round_s() == pytest.approx(c.interval_s)
    store.close()


def test_a_leader_cut_off_from_the_database_is_suspended_then_leads_on_or_ends(tmp_path: Path) -> None:
    """A store outage longer than the lease: the leader stops leading but keeps serving reads
    from memory; back, it reclaims the lease (nobody took over) under a new term, or its
    term ends (somebody did)."""
    clock = FakeClock()
    store = _store(tmp_path)
    lease = Flaky(store.write_engine, ttl_s=TTL_S, clock=clock.db)
    lost: list[int] = []
    elected: list[int] = []
    a = Elector(lease, "a", "http://a", monotonic=clock.mono, on_lost=lambda t, _w: lost.append(t),
                on_elected=elected.append)
    a.step()
    assert a.leads() and elected == [1]
    lease.down = True
    for _ in range(5):  # renewals fail, then the belief runs out
        clock.t += 1.0
        a.step()
    assert not a.leads() and a.suspended == 1 and a.serves_reads and lost == []
    lease.down = False
    clock.t += 1.0
    a.step()
    assert a.leads() and a.term == 2 and elected == [1, 2] and a.suspended is None and lost == []
    store.use_fence(Fence("a", 2))
    store.save_cluster(ClusterRecord("cl-a", "a", "active", {}, ClusterStatus(), clock.t, clock.t))
    # Again, and this time another server takes the lease before a hears back.
    lease.down = True
    for _ in range(5):
        clock.t += 1.0
        a.step()
    assert a.suspended == 2
    lease.down = False
    b = Elector(lease, "b", "http://b", monotonic=clock.mono)
    b.step()
    assert b.leads() and b.term == 3
    a.step()
    assert lost == [2] and not a.leads() and not a.serves_reads and a.leader_url() == "http://b"
    store.close()


def test_a_lapsed_term_serves_reads_before_its_next_round_suspends_it(tmp_path: Path) -> None:
    """Between the instant a term runs out after failed renewals and the round that marks it
    suspended (later under load), the server follows but its memory is still the leader's:
    reads answer from it instead of a 503 for no known leader."""
    clock = FakeClock()
    store = _store(tmp_path)
    lease = Flaky(store.write_engine, ttl_s=TTL_S, clock=clock.db)
    a = Elector(lease, "a", "http://a", monotonic=clock.mono)
    a.step()
    lease.down = True
    clock.t += 1.0
    a.step()  # a renewal fails: still within the term
    assert a.leads() and a.serves_reads
    clock.t += TTL_S  # the term runs out before the next round
    assert not a.leads() and a.role is Role.FOLLOWER and a.suspended is None
    assert a.serves_reads
    a.step()
    assert a.suspended == 1 and a.serves_reads
    store.close()


def test_a_term_that_ran_out_without_an_outage_serves_no_reads(tmp_path: Path) -> None:
    """A leader paused past its lease with the database reachable (a takeover may follow)
    does not answer from memory."""
    clock = FakeClock()
    store = _store(tmp_path)
    lease = Flaky(store.write_engine, ttl_s=TTL_S, clock=clock.db)
    a = Elector(lease, "a", "http://a", monotonic=clock.mono)
    a.step()
    clock.t += TTL_S + 1.0
    assert not a.leads() and not a.serves_reads
    store.close()
