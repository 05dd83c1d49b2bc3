"""A driver killed with SIGKILL (a crashed control plane) leaves no worker training on:
each worker exits when its report pipe breaks (within one heartbeat)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.realproc

DRIVER = """
import sys, time
from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.local import LocalFabric
fab = LocalFabric(1, workdir=sys.argv[1])
fab.launch(WorkerGroupSpec("job-o", chips=(0,), model="debug", steps=100000, checkpoint_interval=0,
                           options={"step_delay_s": 0.05}))
fab.wait("job-o", 120, until=lambda st: st.step >= 2)
print(list(fab.pids("job-o").values())[0], flush=True)
time.sleep(120)
"""


def test_workers_exit_when_their_driver_is_killed(tmp_path: Path) -> None:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        line = driver.stdout.readline() if driver.stdout else ""
        pid = int(line)
        assert psutil.pid_exists(pid)
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
    deadline = time.monotonic() + 10
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError("the worker outlived its driver by 10 s")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
