"""``podfleet token reset-admin``: a lost admin token is replaced through the store's files."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from podfleet.cli.main import app
from podfleet.security.tokens import hash_token
from podfleet.store import open_store
from podfleet.store.records import TokenRecord

runner = CliRunner()


def test_reset_admin_revokes_the_old_token_and_audits(tmp_path: Path) -> None:
    db = str(tmp_path / "pf.db")
    with open_store(db) as store:
        store.add_token(TokenRecord("tok-old", "admin", "admin", hash_token("pf_lost-token-0123456789"), 1.0))
    r = runner.invoke(app, ["token", "reset-admin", "--db", db])
    assert r.exit_code == 2 and "--yes" in r.stderr  # no terminal to ask on
    r = runner.invoke(app, ["token", "reset-admin", "--db", db, "--yes", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    new = json.loads(r.stdout)
    with open_store(db) as store:
        assert store.find_token_by_hash(hash_token(new["token"])) is not None
        assert store.get_token("tok-old").revoked
        rec = [a for a in store.iter_audit() if a.action == "ResetAdminToken"]
        assert rec and rec[0].detail["revoked"] == ["tok-old"] and rec[0].actor.startswith("local:")
        assert store.verify_audit()[0]


def test_reset_admin_on_a_bad_url_is_one_line(tmp_path: Path) -> None:
    r = runner.invoke(app, ["token", "reset-admin", "--db", "nosuch://x", "--yes"])
    assert r.exit_code != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_up_refuses_a_busy_port_before_printing_anything(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = runner.invoke(app, ["up", "--port", str(port), "--db", str(tmp_path / "x.db")])
    assert r.exit_code == 4 and r.stdout == ""
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "pf_" not in r.stderr
    assert not (tmp_path / "x.db").exists()  # no store, no admin token made


def test_up_names_a_store_it_cannot_open(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = runner.invoke(app, ["up", "--port", "0", "--db", str(blocker / "sub" / "pf.db")])
    assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.stderr
    assert "cannot open store" in r.stderr and len(r.stderr.strip().splitlines()) == 1
