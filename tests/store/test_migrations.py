"""Schema migrations, URL resolution and SQLite durability settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL

from podfleet.errors import InvalidInputError
from podfleet.store import Store, open_store
from podfleet.store.engine import default_path, resolve_url
from podfleet.store.models import Base
from tests.store.factories import cluster

TABLES = {"clusters", "jobs", "chip_health", "checkpoints", "idempotency_keys", "tokens",
          "audit_events", "telemetry_rollups", "job_metric_rollups", "audit_archives", "users", "health_reports", "queues", "priority_classes",
          "leader_lease", "reservations",
          "alembic_version"}


def test_fresh_database_is_migrated_to_head_and_matches_models(store: Store) -> None:
    assert store.schema_revision() == "0009"
    with store._writer.connect() as conn:
        assert set(inspect(conn).get_table_names()) == TABLES
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_reopen_is_idempotent_and_keeps_data(store_url: URL) -> None:
    with Store(store_url) as s:
        s.save_cluster(cluster(1))
        s.append_audit(time=1.0, actor="a", action="X", target="", result="ok", detail={})
    for _ in range(2):
        with Store(store_url) as s:
            assert s.schema_revision() == "0009"
            assert [c.id for c in s.list_clusters()] == ["cl-001"]
            assert s.verify_audit()[0]


def test_the_packaged_head_is_read_without_alembic_and_a_store_at_it_is_not_migrated(
        store_url: URL, monkeypatch: pytest.MonkeyPatch) -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from podfleet.store import migrate

    cfg = Config()
    cfg.set_main_option("script_location", str(migrate.MIGRATIONS_DIR))
    assert migrate.package_head() == ScriptDirectory.from_config(cfg).get_current_head()
    with Store(store_url) as s:
        assert migrate.current_revision(s._writer) == migrate.package_head()
    called: list[str] = []
    monkeypatch.setattr("alembic.command.upgrade", lambda cfg, rev: called.append(rev))
    with Store(store_url) as s:  # at head: Alembic is not run
        assert s.schema_revision() == migrate.package_head()
    assert called == []
    with Store(store_url) as s, s._writer.begin() as conn:  # one revision behind: it is
        conn.execute(text("UPDATE alembic_version SET version_num = '0008'"))
    with Store(store_url):
        pass
    assert called == ["head"]


def test_sqlite_is_configured_for_durability(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "x.db")) as s, s._writer.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 2  # FULL
        assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() >= 1000


def test_url_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PODFLEET_DB", raising=False)
    assert resolve_url(None).database == str(default_path())
    monkeypatch.setenv("PODFLEET_DB", str(tmp_path / "env.db"))
    assert resolve_url(None).database == str(tmp_path / "env.db")
    monkeypatch.setenv("PODFLEET_DB", "postgres://u@db:5432/pf")
    assert resolve_url(None).drivername == "postgresql+psycopg"
    assert resolve_url("postgresql+psycopg://u@h/d").drivername == "postgresql+psycopg"
    assert resolve_url("sqlite:///" + str(tmp_path / "a.db")).database == str(tmp_path / "a.db")
    with pytest.raises(InvalidInputError) as err:
        resolve_url("mysql://u@h/d")
    assert err.value.field == "db" and "postgresql" in err.value.message
    monkeypatch.setenv("PODFLEET_DB", "oracle://x")
    with pytest.raises(InvalidInputError) as err:
        resolve_url(None)
    assert err.value.field == "PODFLEET_DB"


def test_default_location_is_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PODFLEET_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with open_store() as s:
        s.save_cluster(cluster(0))
    assert (tmp_path / ".podfleet" / "podfleet.db").is_file()


def test_password_is_hidden_in_url() -> None:
    url = resolve_url("postgresql://pf:s3cret@127.0.0.1:1/none")
    assert "s3cret" not in url.render_as_string(hide_password=True)


def test_in_memory_store_works_across_threads() -> None:
    import threading

    with open_store(":memory:") as s:
        s.save_cluster(cluster(0))
        seen: list[object] = []
        t = threading.Thread(target=lambda: seen.append(s.get_cluster("cl-000")))
        t.start()
        t.join()
        assert seen and seen[0] is not None


def test_unreachable_server_is_one_clear_error() -> None:
    from podfleet.errors import PodfleetError

    with pytest.raises(PodfleetError) as err:
        open_store("postgresql://pf:s3cret@127.0.0.1:1/none")
    assert "cannot open store at postgresql+psycopg://pf:***@127.0.0.1:1/none" in err.value.message
    assert "s3cret" not in err.value.message
