"""Health reports archived in the store (migration 0005), with retention, on SQLite and
PostgreSQL (the store fixtures of ``tests/store``) and the memory store."""

from __future__ import annotations

import datetime as dt
import functools
import json
from typing import Any

import pytest

from podfleet.advisor import reports
from podfleet.advisor.reports import StoredReports
from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.store import Store
from podfleet.store.memory import MemoryStore
from podfleet.store.protocol import StoreProtocol
from tests.advisor.conftest import make_pod
from tests.store.conftest import pg_base_url, store, store_url  # noqa: F401  (fixtures)

DAY = 86400.0
T0 = 1_800_000_000.0  # 2027-01-15


@functools.cache
def template() -> dict[str, Any]:
    """A real report of a twin pod (its figures do not matter here, its shape does)."""
    pod = make_pod()
    return reports.build(pod.plane, [], [], "pod", 3600.0)


def report(rid: str, cluster: str, t: float) -> dict[str, Any]:
    when = dt.datetime.fromtimestamp(t, dt.UTC).isoformat().replace("+00:00", "Z")
    return {**template(), "id": rid, "cluster_id": cluster, "created_at": when}


def check_archive(st: StoreProtocol) -> None:
    arch = StoredReports(st, retention_days=7)
    arch.save(report("rp-00a", "cl-1", T0), now=T0)
    arch.save(report("rp-00b", "cl-1", T0 + DAY), now=T0 + DAY)
    arch.save(report("rp-00c", "cl-2", T0 + DAY), now=T0 + DAY)
    assert [r["id"] for r in arch.list("cl-1")] == ["rp-00a", "rp-00b"]
    assert arch.list("cl-1")[0]["chip_availability"] == template()["availability"]["chip_availability"]
    assert json.loads(arch.get("cl-1", "rp-00a"))["id"] == "rp-00a"
    assert arch.get("cl-1", "rp-00a", "html").startswith("<!doctype html>")
    with pytest.raises(NotFoundError):  # another cluster's report is not this one's
        arch.get("cl-1", "rp-00c")
    with pytest.raises(InvalidInputError):
        arch.get("cl-1", "rp-00a", "pdf")
    # Retention: a save eight days on prunes what is older than seven days, for its cluster.
    arch.save(report("rp-00d", "cl-1", T0 + 8 * DAY), now=T0 + 8 * DAY)
    assert [r["id"] for r in arch.list("cl-1")] == ["rp-00b", "rp-00d"]
    assert [r["id"] for r in arch.list("cl-2")] == ["rp-00c"]
    assert arch.prune(now=T0 + 30 * DAY) == 3


def test_reports_in_the_sql_store(store: Store) -> None:  # noqa: F811
    check_archive(store)


def test_reports_in_the_memory_store_and_its_rollback() -> None:
    st = MemoryStore()
    check_archive(st)
    arch = StoredReports(st)
    with pytest.raises(RuntimeError), st.transaction():
        arch.save(report("rp-0ff", "cl-9", T0), now=T0)
        raise RuntimeError
    assert arch.list("cl-9") == []
    with pytest.raises(InvalidInputError):
        StoredReports(st, retention_days=0)
