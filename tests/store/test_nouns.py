"""The store split by noun: each ``store.protocol`` noun is one class per backend, and both
backends keep a record the same way (the SQL store by the records' field names)."""

from __future__ import annotations

import subprocess
import sys

from podfleet.store import protocol
from podfleet.store import records as r
from podfleet.store.db import Store
from podfleet.store.memory import MemoryStore
from podfleet.store.memory import audit as mem_audit
from podfleet.store.memory import clusters as mem_clusters
from podfleet.store.memory import idempotency as mem_idempotency
from podfleet.store.memory import job_metrics as mem_job_metrics
from podfleet.store.memory import jobs as mem_jobs
from podfleet.store.memory import queues as mem_queues
from podfleet.store.memory import reports as mem_reports
from podfleet.store.memory import rollups as mem_rollups
from podfleet.store.memory import tokens as mem_tokens
from podfleet.store.memory import users as mem_users
from podfleet.store.sql import (
    audit,
    clusters,
    idempotency,
    job_metrics,
    jobs,
    queues,
    reports,
    rollups,
    tokens,
    users,
)
from tests.store.factories import cluster, job

# noun protocol -> (its SQL class, its in-memory class)
NOUNS: dict[type, tuple[type, type]] = {
    protocol.ClusterStore: (clusters.SqlClusters, mem_clusters.MemoryClusters),
    protocol.JobStore: (jobs.SqlJobs, mem_jobs.MemoryJobs),
    protocol.RollupStore: (rollups.SqlRollups, mem_rollups.MemoryRollups),
    protocol.JobMetricStore: (job_metrics.SqlJobMetrics, mem_job_metrics.MemoryJobMetrics),
    protocol.ReportStore: (reports.SqlReports, mem_reports.MemoryReports),
    protocol.QueueStore: (queues.SqlQueues, mem_queues.MemoryQueues),
    protocol.IdempotencyStore: (idempotency.SqlIdempotency, mem_idempotency.MemoryIdempotency),
    protocol.TokenStore: (tokens.SqlTokens, mem_tokens.MemoryTokens),
    protocol.UserStore: (users.SqlUsers, mem_users.MemoryUsers),
    protocol.AuditStore: (audit.SqlAudit, mem_audit.MemoryAudit),
}


def members(proto: type) -> set[str]:
    return {n for n in vars(proto) if not n.startswith("_")} | set(vars(proto).get("__annotations__", {}))


def test_each_noun_is_one_class_per_backend() -> None:
    for proto, impls in NOUNS.items():
        for impl in impls:
            # On the noun's own class, not reached through a sibling noun.
            own = {n for cls in impl.__mro__ if cls.__module__ in (impl.__module__, "podfleet.store.common")
                   for n in vars(cls)}
            missing = members(proto) - own
            assert not missing, f"{impl.__name__} lacks {sorted(missing)} of {proto.__name__}"
        assert issubclass(Store, impls[0]) and issubclass(MemoryStore, impls[1])


def test_the_whole_store_is_the_nouns_and_nothing_more() -> None:
    nouns = set().union(*(members(p) for p in NOUNS)) | members(protocol.Transactional)
    assert members(protocol.StoreProtocol) | nouns == nouns
    assert set(protocol.StoreProtocol.__mro__[1:]) >= {*NOUNS, protocol.Transactional}


def test_the_in_memory_store_loads_without_sqlalchemy() -> None:
    code = "import sys, podfleet.store.memory; sys.exit('sqlalchemy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_records_come_back_as_saved_in_sql(store: Store) -> None:
    round_trips(store)


def test_records_come_back_as_saved_in_memory() -> None:
    round_trips(MemoryStore())


def round_trips(s: protocol.StoreProtocol) -> None:
    s.save_cluster(cluster(0))
    s.save_job(job(0))
    user = r.UserRecord("ana", ["viewer"], {"own": {"allow": ["Get*"]}}, 5.0, "c2VhbGVk", 7, ["h1", "h2"],
                        mfa_failures=2, recovery_failures=1, mfa_blocked_until=9.5, mfa_locked=True)
    s.save_user(user)
    assert s.get_user("ana") == user and s.list_users() == [user]
    report = r.ReportRecord("rp-1", "cl-000", 10.0, 3600.0, {"score": 0.9}, '{"id": "rp-1"}', "<html/>")
    s.save_report(report)
    assert s.get_report("rp-1") == report and s.list_reports("cl-000") == [report]
    prio = r.PriorityClassRecord("high", 100, "lower", 3.0)
    s.save_priority_class(prio)
    assert s.list_priority_classes() == [prio]
    metric = r.JobMetricRecord("job-000", 300.0, 600.0, {"steps": [1, 9], "loss": {"avg": 2.0}})
    s.save_job_metrics([metric])
    assert s.list_job_metrics("job-000", resolution_s=300) == [metric]
    queue = r.QueueRecord("q-1", "cl-000", "batch", {"weight": 2}, 1.0, 2.0)
    s.save_queue(queue)
    assert s.list_queues("cl-000") == [queue]
    for step in (200, 100):
        s.add_checkpoint(r.CheckpointRecord(f"ckpt-{step}", "job-000", step, f"/c/{step}", 50.0 + step))
    assert [c.step for c in s.list_checkpoints("job-000")] == [100, 200]
    rec = s.append_audit(time=1.0, actor="tok-1", action="CreateQueue", target="q-1", result="ok",
                         detail={"n": [1, 2]})
    assert s.list_audit() == [rec] and rec.detail == {"n": [1, 2]}
    assert s.verify_audit()[0]
