"""The audit chain in the database: append-only triggers, tamper and gap detection."""

from __future__ import annotations

import itertools
import threading

import pytest
from sqlalchemy.engine import URL

from podfleet.errors import InvalidInputError
from podfleet.security.audit import GENESIS_HASH, audit_hash
from podfleet.store import Store
from tests.store.conftest import RawSQL


def fill(store: Store, n: int) -> None:
    for i in range(n):
        store.append_audit(
            time=1_700_000_000.25 + i, actor="tok-admin", action="CreateTrainiumCluster",
            target=f"cl-{i}", result="ok" if i % 3 else "denied",
            detail={"i": i, "f": 0.1 * i, "name": "pod-é", "list": [1, None, True]},
        )


def drop_triggers(store_url: URL, raw_sql: RawSQL) -> None:
    if store_url.get_backend_name() == "sqlite":
        raw_sql("DROP TRIGGER audit_events_no_update")
        raw_sql("DROP TRIGGER audit_events_no_delete")
    else:
        raw_sql("DROP TRIGGER audit_events_no_update_delete ON audit_events")


def test_chain_links_and_verifies(store: Store) -> None:
    assert store.verify_audit() == (True, None, "audit chain intact: 0 records")
    assert store.audit_head() == (0, GENESIS_HASH)
    fill(store, 7)
    recs = list(store.iter_audit())
    assert [r.seq for r in recs] == list(range(1, 8))
    assert recs[0].prev_hash == GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(recs))
    assert store.audit_head() == (7, recs[-1].hash)
    assert [r.seq for r in store.list_audit(after_seq=5)] == [6, 7]
    assert store.verify_audit() == (True, None, "audit chain intact: 7 records")


def test_append_returns_what_is_stored(store: Store) -> None:
    rec = store.append_audit(time=5, actor="a", action="X", target="t", result="ok",
                             detail={"t": (1, 2)})
    assert store.list_audit() == [rec]
    assert rec.detail == {"t": [1, 2]} and isinstance(rec.time, float)


def test_non_json_detail_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInputError) as err:
        store.append_audit(time=1, actor="a", action="X", target="", result="ok",
                           detail={"x": float("nan")})
    assert err.value.field == "detail"
    assert store.list_audit() == []


def test_triggers_reject_update_and_delete(store: Store, raw_sql: RawSQL) -> None:
    fill(store, 3)
    for sql in ("UPDATE audit_events SET actor = 'mallory' WHERE seq = 2",
                "DELETE FROM audit_events WHERE seq = 3"):
        with pytest.raises(Exception, match="append-only"):
            raw_sql(sql)
    assert store.verify_audit()[0]
    assert [r.actor for r in store.iter_audit()] == ["tok-admin"] * 3


def test_tampered_row_is_named(store: Store, store_url: URL, raw_sql: RawSQL) -> None:
    fill(store, 6)
    drop_triggers(store_url, raw_sql)
    raw_sql("UPDATE audit_events SET result = 'ok' WHERE seq = 4")
    ok, bad, msg = store.verify_audit()
    assert (ok, bad) == (False, 4)
    assert "hash mismatch" in msg and "record 4" in msg


def test_rehashed_forgery_breaks_the_next_link(
    store: Store, store_url: URL, raw_sql: RawSQL
) -> None:
    fill(store, 5)
    drop_triggers(store_url, raw_sql)
    # A forger who changes record 2 and recomputes its hash still breaks record 3's link.
    r2 = store.list_audit(after_seq=1, limit=1)[0]
    forged = audit_hash(seq=2, time=r2.time, actor="mallory", action=r2.action,
                        target=r2.target, result=r2.result, detail=r2.detail,
                        prev_hash=r2.prev_hash)
    raw_sql(f"UPDATE audit_events SET actor = 'mallory', hash = '{forged}' WHERE seq = 2")
    ok, bad, msg = store.verify_audit()
    assert (ok, bad) == (False, 3) and "broken link" in msg
    raw_sql("UPDATE audit_events SET detail = 'not json' WHERE seq = 1")
    ok, bad, msg = store.verify_audit()
    assert (ok, bad) == (False, 1) and "not valid JSON" in msg


def test_gap_is_named(store: Store, store_url: URL, raw_sql: RawSQL) -> None:
    fill(store, 6)
    drop_triggers(store_url, raw_sql)
    raw_sql("DELETE FROM audit_events WHERE seq = 3")
    ok, bad, msg = store.verify_audit()
    assert (ok, bad) == (False, 4)
    assert "gap" in msg and "expected 3" in msg


def test_two_stores_on_one_database_append_gap_free(store: Store, store_url: URL) -> None:
    """Separate Store objects have separate in-process locks: only the database's own
    lock (SQLite BEGIN IMMEDIATE / PostgreSQL advisory lock) keeps seq gap-free."""
    other = Store(store_url)
    errors: list[BaseException] = []

    def append(s: Store, who: str) -> None:
        try:
            for i in range(15):
                s.append_audit(time=float(i), actor=who, action="X", target="", result="ok",
                               detail={})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(s, f"w{k}"))
               for k, s in enumerate((store, other, store, other))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert errors == []
    assert [r.seq for r in store.iter_audit()] == list(range(1, 61))
    assert store.verify_audit()[0]
