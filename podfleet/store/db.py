"""``Store``: the durable store (SQLAlchemy 2; SQLite by default, PostgreSQL by URL).

One class per noun of ``store.protocol`` (``store/sql/<noun>.py``), all on one
``store.sql.base.SqlBase`` (its engines, sessions and transactions, with the threading
rules it describes): a transaction opened here spans every noun.
"""

from __future__ import annotations

from podfleet.store.engine import resolve_url
from podfleet.store.sql.audit import SqlAudit
from podfleet.store.sql.clusters import SqlClusters
from podfleet.store.sql.idempotency import SqlIdempotency
from podfleet.store.sql.job_metrics import SqlJobMetrics
from podfleet.store.sql.jobs import SqlJobs
from podfleet.store.sql.queues import SqlQueues
from podfleet.store.sql.reports import SqlReports
from podfleet.store.sql.rollups import SqlRollups
from podfleet.store.sql.tokens import SqlTokens
from podfleet.store.sql.users import SqlUsers

__all__ = ["Store", "open_store"]


class Store(SqlClusters, SqlJobs, SqlRollups, SqlJobMetrics, SqlReports, SqlQueues, SqlIdempotency, SqlTokens,
            SqlUsers, SqlAudit):
    """Implements ``podfleet.store.protocol.StoreProtocol``; opening it migrates to head."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


def open_store(url: str | None = None) -> Store:
    """Open (and migrate) the store at ``url``; None means ``$PODFLEET_DB`` or
    ``~/.podfleet/podfleet.db``."""
    return Store(resolve_url(url))
