"""The wire meter's counters stay readable after a worker under its job's uid makes itself
undumpable (podfleet/training/iocount.py): the full ``compression`` bench read n/a for
every mode and died with KeyError, outside the test suite's root workers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import podfleet.training.iocount as iocount

# PR_SET_DUMPABLE 0, as security.harden.set_undumpable does at a worker's start.
PROBE = """
import ctypes, sys
import iocount
if sys.argv[1] == "keep":
    iocount.keep_open()
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
before = iocount.wchar()
sys.stdout.write("x" * 10000); sys.stdout.flush()
print("", before, iocount.wchar())
"""
PYTHON = "/usr/bin/python3"  # one a job's uid can run (this venv's may sit under /root)


@pytest.mark.skipif(os.geteuid() != 0 or not sys.platform.startswith("linux") or not os.path.exists(PYTHON),
                    reason="needs root (to run as another uid), Linux and a system python")
@pytest.mark.parametrize("mode", ["keep", "late"])
def test_the_counters_survive_undumpable_only_when_opened_first(mode: str) -> None:
    d = Path(tempfile.mkdtemp(prefix="podfleet-iocount-"))
    try:
        d.chmod(0o755)
        shutil.copy(iocount.__file__, d / "iocount.py")
        out = subprocess.run([PYTHON, "-c", PROBE, mode], user=65534, group=65534, extra_groups=[],
                             capture_output=True, text=True, timeout=60, cwd=d, env={"PYTHONPATH": str(d)})
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.split()[-2:]
    if mode == "keep":
        assert int(after) - int(before) >= 10000  # its own write, counted
    else:
        assert (before, after) == ("None", "None")  # what the bench's workers saw: EACCES
