"""Finding 11 (audit digests had gaps), each as a regression test: truncating the newest
records with the newest digest, a chain recomputed as plain SHA-256, no digests after
crashes, an offline verify of a copy without its digests; and the second location
(another directory, or an object store through an admin's command)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from podfleet.api.testing import free_port
from podfleet.cli.main import app as cli
from podfleet.errors import InvalidInputError
from podfleet.security.audit import audit_hash
from podfleet.security.digest_sinks import CommandSink, DirectorySink, copy_sink
from podfleet.security.digests import DigestWriter, load_digests, signing_key, verify_trail
from podfleet.security.keyring import FileKeyProvider, current_key, versions
from podfleet.store import Store, open_store

ADMIN = "pf_digest-test-admin-token-0123456789"
# An object store as the admin's command sees it: `CMD put|get|list LOCATION [NAME]`,
# here a directory standing in for a bucket (as an `aws s3 cp`/`ls` script would).
FAKE_S3 = """
import pathlib, sys
op, loc = sys.argv[1], pathlib.Path(sys.argv[2].removeprefix("s3://"))
if op == "put":
    loc.mkdir(parents=True, exist_ok=True); (loc / sys.argv[3]).write_bytes(sys.stdin.buffer.read())
elif op == "get":
    sys.stdout.buffer.write((loc / sys.argv[3]).read_bytes())
elif op == "list":
    for p in sorted(loc.glob("*")) if loc.is_dir() else []:
        print(f"2026-12-01 00:00:00 {p.stat().st_size} {p.name}")  # as `aws s3 ls` prints
else:
    sys.exit(f"unknown op {op}")
"""


class Trail:
    def __init__(self, tmp: Path, copies: tuple = ()) -> None:
        self.db = tmp / "pf.db"
        self.keys = FileKeyProvider(tmp / "keys")
        self.store: Store = open_store(f"sqlite:///{self.db}")
        kid, key, known = current_key(self.keys, "audit-mac", create=True)
        self.store.use_audit_keys(kid, key, known)
        self.digests = tmp / "pf.db.digests"
        self.copies = copies
        self.writer = DigestWriter(self.store.audit_head, self.digests, signing_key(self.keys, create=True),
                                   every_records=5, copies=copies)

    def append(self, n: int) -> None:
        for _ in range(n):
            self.store.append_audit(time=1_800_000_000.0, actor="tok-1:ops", action="CreateAccessToken",
                                    target="x", result="ok", detail={})
            if self.writer.due():  # what the writer's thread does every poll
                self.writer.write()

    def verify(self, **kw: object) -> tuple[bool, int | None, str]:
        pub = signing_key(self.keys, create=False).public_key()
        return verify_trail(self.store.iter_audit(), versions(self.keys, "audit-mac"), self.digests, pub,
                            copies=self.copies, **kw).as_tuple()  # type: ignore[arg-type]

    def sql(self, *statements: str, params: tuple = ()) -> None:
        con = sqlite3.connect(self.db)
        with con:
            con.execute("DROP TRIGGER IF EXISTS audit_events_no_update")
            con.execute("DROP TRIGGER IF EXISTS audit_events_no_delete")
            for s in statements:
                con.execute(s, params)
        con.close()


@pytest.fixture
def trail(tmp_path: Path) -> Iterator[Trail]:
    t = Trail(tmp_path)
    t.writer.write(force=True)  # start-up
    t.append(12)  # digests at 5 and 10 (every 5 records)
    yield t
    t.store.close()


def test_a_digest_every_n_records(trail: Trail) -> None:
    assert [d.seq for d in load_digests(trail.digests, trail.writer.key.public_key())[0]] == [0, 5, 10]
    ok, bad, msg = trail.verify()
    assert not ok and bad == 11 and "newer than every signed digest" in msg  # 11-12 not signed yet
    assert trail.verify(allow_missing=True)[0]
    trail.writer.stop()  # shutdown signs the head
    ok, _, msg = trail.verify()
    assert ok and "4 signed digests, newest at record 12" in msg


def test_truncating_the_newest_records_and_the_newest_digest_fails(trail: Trail) -> None:
    trail.writer.stop()
    newest = sorted(trail.digests.glob("digest-*"))[-1]
    assert newest.name.startswith("digest-000000000012-")
    newest.unlink()
    trail.sql("DELETE FROM audit_events WHERE seq > 11")
    ok, bad, msg = trail.verify()
    assert not ok and bad == 11 and "newer than every signed digest" in msg, msg
    r = CliRunner().invoke(cli, ["audit", "verify", "--db", f"sqlite:///{trail.db}", "--key-dir",
                                 str(trail.keys.directory), "--output", "json"])
    assert r.exit_code == 6 and json.loads(r.stdout)["ok"] is False


def test_the_second_location_keeps_what_the_first_lost(tmp_path: Path) -> None:
    """Truncated exactly to a digest and that digest's successors deleted beside the
    database: only a second location shows it, and it does."""
    t = Trail(tmp_path, copies=(DirectorySink(tmp_path / "elsewhere"),))
    t.writer.write(force=True)
    t.append(12)
    t.writer.stop()
    assert t.verify()[0]
    for p in sorted(t.digests.glob("digest-*"))[-2:]:  # the digests of 12 and 10 ...
        p.unlink()
    t.sql("DELETE FROM audit_events WHERE seq > 5")  # ... and records 6-12: 5 is signed
    t.copies = ()
    assert t.verify()[0]  # one location alone cannot tell
    t.copies = (DirectorySink(tmp_path / "elsewhere"),)
    ok, bad, msg = t.verify()
    assert not ok and bad == 6 and "were deleted" in msg, msg
    # A restart: its start-up digest follows the newest digest of any location, so it
    # cannot paper over the loss.
    DigestWriter(t.store.audit_head, t.digests, t.writer.key, copies=t.copies).write(force=True)
    ok, _, msg = t.verify()
    assert not ok and "signs fewer records (5) than digest-000000000012" in msg, msg
    for p in t.digests.glob("digest-*"):  # every digest beside the database deleted, none copied:
        p.unlink()
    t.copies = ()
    t.writer.write(force=True)  # ... the running server's next digest follows one that is gone
    ok, _, msg = t.verify()
    assert not ok and "older digests were removed" in msg, msg
    t.store.close()


def test_a_chain_recomputed_as_plain_sha256_fails(trail: Trail) -> None:
    """Every record recomputed unkeyed from the first, and every digest removed: refused
    because the trail has a MAC key, even with --allow-missing-digests."""
    prev = "0" * 64
    for r in list(trail.store.iter_audit()):
        h = audit_hash(seq=r.seq, time=r.time, actor=r.actor, action=r.action, target=r.target, result=r.result,
                       detail=r.detail, prev_hash=prev)
        trail.sql("UPDATE audit_events SET prev_hash = ?, hash = ?, key_id = NULL WHERE seq = ?",
                  params=(prev, h, r.seq))
        prev = h
    for p in trail.digests.glob("digest-*"):
        p.unlink()
    for allow in (False, True):
        ok, bad, msg = trail.verify(allow_missing=allow)
        assert not ok and bad == 1 and "not keyed" in msg, msg
    assert trail.store.verify_audit()[:2] == (False, 1)


def test_offline_verify_of_a_copy_without_its_digests_fails(trail: Trail, tmp_path: Path) -> None:
    trail.writer.stop()
    copy = tmp_path / "copy" / "pf.db"
    copy.parent.mkdir()
    src = sqlite3.connect(trail.db)
    dst = sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    args = ["audit", "verify", "--db", f"sqlite:///{copy}", "--key-dir", str(trail.keys.directory), "--output", "json"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 6 and "no signed digest" in json.loads(r.stdout)["message"]
    r = CliRunner().invoke(cli, [*args, "--allow-missing-digests"])
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"] is True, r.output


def test_digests_through_an_object_store_command(tmp_path: Path) -> None:
    script = tmp_path / "fake-s3.py"
    script.write_text(FAKE_S3)
    command = f"{sys.executable} {script}"
    bucket = f"s3://{tmp_path / 'bucket'}"
    with pytest.raises(InvalidInputError, match="PODFLEET_AUDIT_DIGESTS_COMMAND"):
        copy_sink(bucket, None)
    with pytest.raises(InvalidInputError, match="second place"):
        copy_sink(str(tmp_path / "d"), None, primary=tmp_path / "d")
    sink = copy_sink(bucket, command)
    assert isinstance(sink, CommandSink)
    t = Trail(tmp_path, copies=(sink,))
    t.writer.write(force=True)
    t.append(7)
    t.writer.stop()
    assert sink.names() == sorted(p.name for p in t.digests.glob("digest-*"))
    for p in t.digests.glob("digest-*"):
        p.unlink()  # everything beside the database gone: the bucket still has them
    t.sql("DELETE FROM audit_events WHERE seq > 3")
    ok, bad, msg = t.verify()
    assert not ok and bad == 4 and "were deleted" in msg, msg
    # Offline, the CLI reads the bucket through the same command.
    r = CliRunner().invoke(cli, ["audit", "verify", "--db", f"sqlite:///{t.db}", "--key-dir", str(t.keys.directory),
                                 "--digests-copy", bucket, "--digests-command", command, "--output", "json"])
    assert r.exit_code == 6 and "were deleted" in r.output
    t.store.close()


def test_a_copy_that_fails_is_retried_with_the_next_digest(trail: Trail, tmp_path: Path) -> None:
    away = tmp_path / "away"
    away.write_text("not a directory yet")  # the second location is unreachable
    w = DigestWriter(trail.store.audit_head, tmp_path / "d2", trail.writer.key, copies=(DirectorySink(away),))
    w.write(force=True)
    assert not DirectorySink(away).names()
    away.unlink()  # reachable again
    trail.append(1)
    w.write()
    assert DirectorySink(away).names() == DirectorySink(tmp_path / "d2").names() and len(DirectorySink(away).names()) == 2


@pytest.mark.realproc
def test_kill_9_after_more_than_100_records_leaves_a_digest(tmp_path: Path) -> None:
    """A served control plane, killed with SIGKILL after 120 audited calls: a digest
    signs at least 100 of them (the interval is an hour: the record count did it), the
    offline verify names the unsigned tail, and the next start signs it."""
    db, keys, port = tmp_path / "pf.db", tmp_path / "keys", free_port()
    env = {**os.environ, "PODFLEET_ADMIN_TOKEN": ADMIN, "PODFLEET_KEY_DIR": str(keys),
           "PODFLEET_AUDIT_DIGEST_INTERVAL_S": "3600"}
    argv = [sys.executable, "-m", "podfleet", "up", "--db", f"sqlite:///{db}", "--port", str(port)]

    def up() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    return proc
            except httpx.HTTPError:
                time.sleep(0.2)
        proc.kill()
        raise AssertionError("podfleet up did not start")

    proc = up()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {ADMIN}"},
                          timeout=30) as c:
            for i in range(120):
                assert c.post("/v1/tokens", json={"name": f"ci-{i}", "role": "viewer"}).status_code == 201
        time.sleep(1.0)  # the writer looks at the head four times a second
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    pub = signing_key(FileKeyProvider(keys), create=False).public_key()
    digests, problem = load_digests(Path(f"{db}.digests"), pub)
    assert problem is None and digests[0].seq == 1  # the start-up digest (the admin token's record)
    assert digests[-1].seq >= 101, [d.seq for d in digests]
    args = ["audit", "verify", "--db", f"sqlite:///{db}", "--key-dir", str(keys), "--output", "json"]
    r = CliRunner().invoke(cli, args)
    signed_all = digests[-1].seq == 121
    assert r.exit_code == (0 if signed_all else 6), r.output
    assert CliRunner().invoke(cli, [*args, "--allow-missing-digests"]).exit_code == 0
    proc = up()  # the restart signs what the crash left unsigned
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"] is True, r.output
