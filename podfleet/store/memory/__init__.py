"""An in-memory ``StoreProtocol`` for fast unit tests (like httpx's ``MockTransport``).

Same semantics as the database store: upserts by id, live-name lookup, idempotency keys,
hashed tokens and a hash-chained audit trail (``podfleet.security.audit``).
``transaction()`` rolls every change back if the block raises. Not durable. One class per
noun of ``store.protocol`` (``store/memory/<noun>.py``) on ``base.MemoryBase``; a noun's
module imports no other noun's (``tests/test_architecture.py``).
"""

from __future__ import annotations

from podfleet.store.memory.audit import MemoryAudit
from podfleet.store.memory.clusters import MemoryClusters
from podfleet.store.memory.idempotency import MemoryIdempotency
from podfleet.store.memory.job_metrics import MemoryJobMetrics
from podfleet.store.memory.jobs import MemoryJobs
from podfleet.store.memory.queues import MemoryQueues
from podfleet.store.memory.reports import MemoryReports
from podfleet.store.memory.rollups import MemoryRollups
from podfleet.store.memory.tokens import MemoryTokens
from podfleet.store.memory.users import MemoryUsers

__all__ = ["MemoryStore"]


class MemoryStore(MemoryClusters, MemoryJobs, MemoryRollups, MemoryJobMetrics, MemoryReports, MemoryQueues,
                  MemoryIdempotency, MemoryTokens, MemoryUsers, MemoryAudit):
    """Every noun in memory, with one transaction across them."""
