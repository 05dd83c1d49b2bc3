"""`podfleet up` archives health reports in its store: a report made through the API is a
row of the store's table, and a new server on the same database lists and serves it."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import httpx
import pytest

from podfleet.api.testing import free_port, spawn_server, stop_server

pytestmark = pytest.mark.realproc

TOKEN = "pf_reports-served-test-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def _serve(db: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = spawn_server(db, port, TOKEN, "--fabric", "sim", "--speed", "20", "--default-cluster", "pod-0",
                        log=db.parent / "server.log", timeout_s=60)
    return proc, f"http://127.0.0.1:{port}"


def test_a_report_outlives_the_server_that_made_it(tmp_path: Path) -> None:
    db = tmp_path / "pf.db"
    proc, url = _serve(db)
    try:
        with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as c:
            r = c.post("/v1/clusters/pod-0/reports", json={"period": "1h"})
            assert r.status_code == 201, r.text
            made = r.json()["id"]
    finally:
        stop_server(proc)
    # In the store (table health_reports), not in files somewhere beside it.
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM health_reports WHERE id = ?", (made,)).fetchone() == (1,)
    proc, url = _serve(db)
    try:
        with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as c:
            listed = c.get("/v1/clusters/pod-0/reports").json()["reports"]
            assert made in [x["id"] for x in listed]
            html = c.get(f"/v1/clusters/pod-0/reports/{made}", params={"format": "html"})
            assert html.status_code == 200 and "<svg" in html.text
    finally:
        stop_server(proc)
