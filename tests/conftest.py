"""Shared fixtures. Hypothesis: a CI profile bounded for a 2-core machine."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from podfleet.security import harden

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Worker isolation (docs/security.md): a root server gives every job its own uid, which
# must reach the interpreter and the job's files. Tests that are not about isolation keep
# their workers (local, Ray, CLI servers started as subprocesses) as root on purpose, the
# single-user opt-in; tests/security/test_worker_isolation.py and test_worker_sandbox.py
# take it away and run jobs under their own uids for real.
ISOLATION_OPT_OUT = ("PODFLEET_WORKER_USER", "root")
os.environ.setdefault(*ISOLATION_OPT_OUT)
# A served plane's local workers are owned by the host's agent and outlive the server
# (docs/operations.md): a test server stopped at its end would leave its jobs training on
# CI's two cores. Tests run without one unless they ask (`podfleet up --agent`).
os.environ.setdefault("PODFLEET_LOCAL_AGENT", "false")
# Planes built in tests (the console's served plane, embedded planes) keep their job work
# directories in this run's own temporary directory, never in the user's ~/.podfleet: a
# test run must not read or leave state where a real server keeps its own. (Keys are left
# to their default: a cluster's KEK sits beside its data directory unless PODFLEET_KEY_DIR
# is set, which tests/security/test_job_code.py checks.)
_RUN_DIR = tempfile.mkdtemp(prefix="podfleet-tests-")
os.environ.setdefault("PODFLEET_WORKDIR", os.path.join(_RUN_DIR, "work"))
atexit.register(shutil.rmtree, _RUN_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _process_security_state() -> Iterator[None]:
    """Tests that run ``podfleet up`` or ``build_server`` in this process (bad flags, bad
    store URLs) set the server's 077 umask and make the process undumpable, as a real server
    does at start. Both are process-wide: put them back after each test, so a later test's
    files stay readable by the job uids it runs workers as, and its own dumpable flag is its."""
    umask = os.umask(0o022)
    os.umask(umask)
    dumpable = harden.is_dumpable()
    yield
    os.umask(umask)
    if dumpable and not harden.is_dumpable():
        harden.set_dumpable()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list) -> None:
    """Run the tests that connect this process to an external Ray cluster first, and give
    every test its xdist group (``make test PYTEST_ARGS="-n 2 --dist loadgroup"``).

    Groups: one per test file (its module fixtures, a Ray cluster or a served plane, are
    made once), except that every Ray test shares one group, so one worker process runs
    them all in this order (two Ray clusters at once would share CI's two cores, and the
    order below is a property of one process).

    Observed with Ray 2.60: once this process has started a private Ray instance with
    ``ray.init()`` and shut it down (tests/api/test_real_ray.py, tests/fabric/ray/test_ray_fabric.py),
    a later ``ray.init(address=...)`` to a ``ray start`` cluster connects, but its actors are
    cancelled before they run ("all references to the actor were removed"). Each order works
    on its own; this one keeps both in one pytest process. docs/ray.md (troubleshooting)
    tells operators the same about one ``podfleet up``.
    """
    # tests/fabric/neuron/test_neuron_hosts.py connects to a ``ray start`` cluster too (its
    # hosts are Ray nodes): after tests/api/test_real_ray.py's private instance its host agents
    # died before they ran (a fresh-clone CI), as above.
    first_files = ("tests/fabric/ray/test_ray_recovery.py", "tests/fabric/neuron/test_neuron_hosts.py")
    first = [it for f in first_files for it in items if it.nodeid.startswith(f)]
    if first:
        rest = [it for it in items if it not in first]
        items[:] = first + rest
    for it in items:
        ray = it.nodeid.startswith("tests/fabric/ray/") or it.get_closest_marker("ray") is not None
        it.add_marker(pytest.mark.xdist_group("ray" if ray else it.nodeid.split("::", 1)[0]))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A private Ray head outlives the server that started it while gangs run on it, by
    design (docs/ray.md, "The private Ray head"): one that a test's server left behind (its
    job still running at the test's end) is stopped here with its gangs, so nothing keeps
    training on CI's two cores after the run (one fresh-clone CI found such a head)."""
    from pathlib import Path

    roots = [Path(_RUN_DIR)]
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        roots.append(factory.getbasetemp())
    records = [r for root in roots if root.is_dir() for r in root.rglob("ray/head.json")]
    if not records:
        return
    from podfleet.fabric.ray.private import PrivateHead

    for record in records:
        head = PrivateHead(record.parent)
        head.rec = head._read()
        head._stop()  # only a process that is still that head on that port is signalled
