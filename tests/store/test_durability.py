"""Every acknowledged write survives kill -9 of the writing process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from sqlalchemy.engine import URL

from podfleet.store import Store

WRITER = r"""
import sys, time
from podfleet.store import Store
from podfleet.store.records import ClusterRecord, JobRecord
s = Store(sys.argv[1])
s.save_cluster(ClusterRecord("cl-1", "pod", "active", {"type": "trn2-ultraserver"}))
print("acked cluster", flush=True)
i = 0
while True:
    with s.transaction():
        s.save_job(JobRecord(f"job-{i:06d}", "cl-1", "RUNNING", {"n": i}, {"step": i}))
        s.append_audit(time=time.time(), actor="engine", action="SubmitTrainingJob",
                       target=f"job-{i:06d}", result="ok", detail={"i": i})
    print(f"acked {i}", flush=True)  # only after commit returned
    i += 1
"""

KILL_AFTER_ACKS = 40


@pytest.mark.realproc
def test_acknowledged_writes_survive_kill_9(store_url: URL) -> None:
    Store(store_url).close()  # migrate first so the child starts writing at once
    url = store_url.render_as_string(hide_password=False)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    acked: list[int] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("acked ") and line.split()[1].isdigit():
                acked.append(int(line.split()[1]))
            if len(acked) >= KILL_AFTER_ACKS:
                os.kill(proc.pid, signal.SIGKILL)  # mid-write: it is already in the next one
                break
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        stderr = proc.stderr.read() if proc.stderr else ""
    assert len(acked) >= KILL_AFTER_ACKS, f"writer died early: {stderr}"
    assert proc.returncode == -signal.SIGKILL

    with Store(store_url) as s:
        jobs = {j.id for j in s.list_jobs(limit=100_000)}
        missing = [i for i in acked if f"job-{i:06d}" not in jobs]
        assert missing == []
        audit = list(s.iter_audit())
        # job and audit record commit together: never one without the other
        assert {a.target for a in audit} == jobs
        assert s.verify_audit()[0]
        assert s.get_cluster("cl-1") is not None
