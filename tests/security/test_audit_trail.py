"""The audit trail as CloudTrail validates its logs: a keyed MAC chain plus Ed25519-signed
digests outside the database. Each kind of tampering an attacker with write access to the
database (but not to the key directory) can do is detected, online and offline."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app as cli
from podfleet.security.audit import audit_hash
from podfleet.security.digests import DigestWriter, signing_key, verify_trail, write_digest
from podfleet.security.keyring import FileKeyProvider, current_key, rotate, versions
from podfleet.store import Store, open_store

N = 12


@pytest.fixture
def trail(tmp_path: Path) -> Iterator[tuple[Store, Path, Path, FileKeyProvider]]:
    db = tmp_path / "podfleet.db"
    keys = FileKeyProvider(tmp_path / "keys")
    store = open_store(f"sqlite:///{db}")
    kid, key, known = current_key(keys, "audit-mac", create=True)
    store.use_audit_keys(kid, key, known)
    digests = tmp_path / "digests"
    writer = DigestWriter(store.audit_head, digests, signing_key(keys, create=True))
    for i in range(N):
        store.append_audit(time=1_800_000_000.0 + i, actor="tok-1:ops", action="DeleteCluster",
                           target=f"cl-{i}", result="ok", detail={"i": i})
        if i in (4, 9):
            writer.write()
    writer.stop()  # the shutdown digest signs the final head
    yield store, db, digests, keys
    store.close()


def check(store: Store, digests: Path, keys: FileKeyProvider) -> tuple[bool, int | None, str]:
    return verify_trail(store.iter_audit(), versions(keys, "audit-mac"), digests,
                        signing_key(keys, create=False).public_key()).as_tuple()


def sql(db: Path, *statements: str, params: tuple = ()) -> None:
    """As an attacker with the database file: drop the append-only triggers, then edit."""
    con = sqlite3.connect(db)
    with con:
        con.execute("DROP TRIGGER IF EXISTS audit_events_no_update")
        con.execute("DROP TRIGGER IF EXISTS audit_events_no_delete")
        for s in statements:
            con.execute(s, params)
    con.close()


def test_an_intact_trail_verifies(trail) -> None:
    store, _, digests, keys = trail
    ok, bad, msg = check(store, digests, keys)
    assert ok and bad is None and "12 records" in msg and "3 signed digests" in msg
    assert all(r.key_id == "audit-mac-v1" for r in store.iter_audit())
    assert store.verify_audit()[0]
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in [*digests.iterdir(), *keys.directory.iterdir()])


def test_modification(trail) -> None:
    store, db, digests, keys = trail
    sql(db, "UPDATE audit_events SET actor = 'tok-2:someone-else' WHERE seq = 3")
    assert check(store, digests, keys)[:2] == (False, 3)
    assert store.verify_audit()[:2] == (False, 3)


def test_recomputation_without_the_key(trail) -> None:
    store, db, digests, keys = trail
    # Edit record 3 and recompute every later link, as the old unkeyed chain allowed:
    # with a key of the attacker's own, and (a downgrade) as plain SHA-256.
    recs = list(store.iter_audit())
    for key_id, key in (("audit-mac-v1", b"k" * 32), (None, None)):
        prev = recs[1].hash
        for r in recs[2:]:
            result = "denied" if r.seq == 3 else r.result
            h = audit_hash(seq=r.seq, time=r.time, actor=r.actor, action=r.action, target=r.target, result=result,
                           detail=r.detail, prev_hash=prev, key_id=key_id, key=key)
            sql(db, "UPDATE audit_events SET result = ?, prev_hash = ?, hash = ?, key_id = ? WHERE seq = ?",
                params=(result, prev, h, key_id, r.seq))
            prev = h
        ok, bad, msg = check(store, digests, keys)
        assert not ok and bad == 3, msg


def test_deletion_from_the_middle(trail) -> None:
    store, db, digests, keys = trail
    sql(db, "DELETE FROM audit_events WHERE seq = 6")
    ok, bad, msg = check(store, digests, keys)
    assert (ok, bad) == (False, 7) and "gap" in msg


def test_truncation_of_the_newest_records(trail) -> None:
    store, db, digests, keys = trail
    sql(db, "DELETE FROM audit_events WHERE seq > 8")  # the chain itself stays well formed
    assert store.verify_audit()[0]
    ok, bad, msg = check(store, digests, keys)
    assert not ok and bad == 9 and "deleted" in msg


def test_reordering(trail) -> None:
    store, db, digests, keys = trail
    sql(db, "UPDATE audit_events SET seq = -1 WHERE seq = 4", "UPDATE audit_events SET seq = 4 WHERE seq = 5",
        "UPDATE audit_events SET seq = 5 WHERE seq = -1")
    ok, bad, _ = check(store, digests, keys)
    assert not ok and bad == 4


def test_digests_cannot_be_removed_or_forged(trail) -> None:
    store, _, digests, keys = trail
    files = sorted(digests.iterdir())
    files[1].unlink()  # one from the middle
    ok, _, msg = check(store, digests, keys)
    assert not ok and "removed" in msg
    doc = json.loads(files[2].read_text())
    doc["payload"]["seq"] = 3
    files[2].write_text(json.dumps(doc))
    ok, _, msg = check(store, digests, keys)
    assert not ok and "signature" in msg


def test_offline_verify_from_the_cli(trail) -> None:
    _, db, digests, keys = trail
    args = ["audit", "verify", "--db", f"sqlite:///{db}", "--digests", str(digests), "--key-dir", str(keys.directory),
            "--output", "json"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ok"] is True
    sql(db, "DELETE FROM audit_events WHERE seq = 12")
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 6 and "deleted" in r.output
    # Without the keys, nothing verifies: a MACed record cannot be checked by just anyone.
    r = CliRunner().invoke(cli, [*args[:-4], "--key-dir", str(db.parent / "elsewhere"), "--output", "json"])
    assert r.exit_code != 0


def test_rotation_keeps_old_records_verifiable(trail) -> None:
    store, _, digests, keys = trail
    assert rotate(keys, "audit-mac") == "audit-mac-v2"
    kid, key, known = current_key(keys, "audit-mac", create=False)
    store.use_audit_keys(kid, key, known)
    rec = store.append_audit(time=1.0, actor="a", action="b", target="c", result="ok", detail={})
    assert rec.key_id == "audit-mac-v2"
    write_digest(store.audit_head(), digests, signing_key(keys, create=False))  # the server signs it
    assert store.verify_audit()[0] and check(store, digests, keys)[0]
    store.use_audit_keys("audit-mac-v2", key)  # v1 forgotten: its records no longer verify
    ok, bad, msg = store.verify_audit()
    assert not ok and bad == 1 and "not available" in msg


def test_retention_archives_then_prunes_and_the_chain_still_verifies(trail) -> None:
    from podfleet.security.retention import archive_old, load_manifests, read_archive

    store, db, digests, keys = trail
    signer = signing_key(keys, create=False)
    archives, key = digests / "archives", b"a" * 32
    # Records 1..12 are at 1.8e9 + i: a cut-off after record 6 archives 1-6.
    m = archive_old(store, archives, key=key, signer=signer, now=1_800_000_006.0 + 30 * 86_400, retention_s=30 * 86_400)
    assert m is not None and (m.first_seq, m.through_seq) == (1, 6)
    assert next(r.seq for r in store.iter_audit()) == 7 and store.audit_archived_through()[0] == 6
    assert store.verify_audit()[0]
    ok, _, msg = check(store, digests, keys)
    assert ok and "records 1-6 archived" in msg, msg
    manifests, problem = load_manifests(archives, signer.public_key())
    assert problem is None and [r["seq"] for r in read_archive(archives, manifests[0], key)] == list(range(1, 7))
    blob = (archives / m.file).read_bytes()
    assert b"DeleteCluster" not in blob  # compressed and encrypted
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in archives.iterdir())
    # Nothing older: nothing to do. The kept records stay append-only.
    assert archive_old(store, archives, key=key, signer=signer, now=1.0, retention_s=1.0) is None
    with pytest.raises(Exception, match="append-only"):
        con = sqlite3.connect(db)
        with con:
            con.execute("DELETE FROM audit_events WHERE seq = 7")
    # Pruning without a signed archive (the attacker's own audit_archives row) is caught.
    sql(db, "INSERT INTO audit_archives VALUES (8, 7, 'x', 'nowhere', 'x', 0)", "DELETE FROM audit_events WHERE seq <= 8")
    ok, bad, msg = check(store, digests, keys)
    assert not ok and bad == 9, msg
