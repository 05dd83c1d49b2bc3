"""Durable commit cost of the store: one job upsert + one audit append per transaction,
fsynced (SQLite WAL, synchronous=FULL) or committed (PostgreSQL), then chain verification."""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

NAME = "store-commit"
DESCRIPTION = (
    "durable transactions/s and commit latency (job upsert + audit append) on SQLite "
    "and PostgreSQL, and audit-chain verification speed"
)
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _measure(url: Any, n: int) -> dict[str, float]:
    from podfleet.store import Store
    from podfleet.store.records import ClusterRecord, JobRecord

    with Store(url) as s:
        s.save_cluster(ClusterRecord("cl-bench", "bench", "active", {}))
        lat_ms = []
        t0 = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            with s.transaction():
                s.save_job(JobRecord(f"job-{i:06d}", "cl-bench", "RUNNING", {"i": i},
                                     {"step": i, "loss": 1.0 / (i + 1)}))
                s.append_audit(time=time.time(), actor="bench", action="SubmitTrainingJob",
                               target=f"job-{i:06d}", result="ok", detail={"i": i})
            lat_ms.append((time.perf_counter() - t) * 1000)
        wall = time.perf_counter() - t0
        t = time.perf_counter()
        ok, _, _ = s.verify_audit()
        verify_s = time.perf_counter() - t
    assert ok
    lat_ms.sort()
    return {
        "tx_per_s": round(n / wall, 1),
        "commit_p50_ms": round(statistics.median(lat_ms), 3),
        "commit_p99_ms": round(lat_ms[min(n - 1, int(n * 0.99))], 3),
        "verify_records_per_s": round(n / verify_s, 1),
    }


def run(quick: bool = False) -> dict[str, Any]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import URL, make_url

    n = 200 if quick else 2000
    out: dict[str, Any] = {"transactions": n}
    with tempfile.TemporaryDirectory() as d:
        for k, v in _measure(URL.create("sqlite", database=str(Path(d) / "b.db")), n).items():
            out[f"sqlite_{k}"] = v
    schema = "pf_bench_" + uuid.uuid4().hex[:8]
    try:
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT",
                              connect_args={"connect_timeout": 3})
        with admin.connect() as c:
            c.execute(text(f"CREATE SCHEMA {schema}"))
    except Exception as exc:  # no server: report SQLite only, say why
        out["postgres_skipped"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return out
    try:
        url = make_url(PG_URL).update_query_dict({"options": f"-csearch_path={schema}"})
        for k, v in _measure(url, n).items():
            out[f"postgres_{k}"] = v
    finally:
        with admin.connect() as c:
            c.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
    return out
