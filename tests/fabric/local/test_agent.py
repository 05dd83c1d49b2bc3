"""The local agent owns workers across the loss of their control plane (real processes).

A ``LocalFabric`` that spawns through the agent is closed the way a dying plane leaves
it (the connection drops, nothing is stopped); a second fabric on the same workdir
adopts the gang: the same pids, the step carried on, the loss history without a gap;
a gang nobody adopts is stopped. A worker killed while no plane was attached is
recovered once one re-attaches.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podfleet.errors import ConflictError
from podfleet.fabric.base import Reattachable, RunState, WorkerGroupSpec
from podfleet.fabric.local import LocalFabric
from podfleet.fabric.local.agent import protocol
from podfleet.fabric.local.agent.client import AgentConnection, agent_status, stop_agent
from podfleet.fabric.local.agent.launch import ensure_agent

pytestmark = pytest.mark.realproc
# As the control plane sets it (fabric.factory): a shared 2-core host delays heartbeats.
HANG_S = 3.0


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = ensure_agent(tmp_path_factory.mktemp("data") / "agent")
    yield where
    stop_agent(where)


def _spec(job_id: str, chips: tuple[int, ...]) -> WorkerGroupSpec:
    return WorkerGroupSpec(job_id, chips, "debug", 100_000, checkpoint_interval=20, options={"step_delay_s": 0.05})


def _gaps(losses: dict[int, float], upto: int) -> list[int]:
    return [s for s in range(1, upto + 1) if s not in losses]


def test_socket_and_token_are_private_and_checked(agent: Path) -> None:
    assert stat.S_IMODE((agent / protocol.SOCKET).stat().st_mode) == 0o600
    assert stat.S_IMODE((agent / protocol.TOKEN).stat().st_mode) == 0o600
    sock = protocol.connect(agent)
    try:
        sock.sendall(protocol.encode({"id": 1, "op": "hello", "version": protocol.VERSION, "token": "wrong"}))
        assert b"bad agent token" in sock.recv(4096)
        sock.sendall(protocol.encode({"id": 2, "op": "spawn", "config": "{}"}))
        assert b"say hello" in sock.recv(4096)
    finally:
        sock.close()
    with pytest.raises(ConflictError, match=f"agent speaks protocol {protocol.VERSION}, this podfleet speaks {protocol.VERSION + 1}"):
        AgentConnection(agent, version=protocol.VERSION + 1)


def test_gang_outlives_its_plane_and_is_adopted(agent: Path, tmp_path: Path) -> None:
    wd = tmp_path / "cluster"
    fab = LocalFabric(4, workdir=wd, agent=agent, hang_timeout_s=HANG_S)
    assert isinstance(fab, Reattachable)
    fab.launch(_spec("job-a", (0, 1)))
    fab.launch(_spec("job-b", (2, 3)))  # no plane will adopt it: stopped after the reload
    st = fab.wait("job-a", 180, until=lambda s: s.step >= 8)
    fab.wait("job-b", 180, until=lambda s: s.step >= 1)
    before, orphans = fab.pids("job-a"), list(fab.pids("job-b").values())
    fab.close()  # the plane is gone: the agent keeps the workers and journals their reports
    time.sleep(1.0)
    held = {w["pid"] for w in agent_status(agent)["workers"] if w["job_id"] == "job-a" and w["alive"]}
    assert held == set(before.values())

    fab2 = LocalFabric(4, workdir=wd, agent=agent, hang_timeout_s=HANG_S)
    try:
        adoption = fab2.adopt("job-a", st.checkpoint_step)
        assert adoption is not None and adoption.pids == (before[0], before[1]) and adoption.replayed > 0
        assert fab2.discard_unadopted() == ["job-b"]
        st2 = fab2.wait("job-a", 120, until=lambda s: s.step > st.step + 8)
        assert st2.state is RunState.RUNNING and st2.attempt == st.attempt
        assert fab2.pids("job-a") == before  # never restarted
        assert not _gaps(st2.losses, st2.step)  # steps trained while no plane listened are all there
        assert fab2.adopt("job-a", None) is None  # adopted once
        _until(lambda: not any(_alive(p) for p in orphans), "job-b's workers stopped")
        _until(lambda: not any(w["job_id"] == "job-b" for w in agent_status(agent)["workers"]),
               "job-b's exits delivered and forgotten")

        # A worker dies while no plane is attached: the next plane sees its exit and recovers it.
        fab2.close()
        os.kill(before[1], signal.SIGKILL)
        time.sleep(0.5)
        fab3 = LocalFabric(4, workdir=wd, agent=agent, hang_timeout_s=HANG_S)
        try:
            assert fab3.adopt("job-a", st2.checkpoint_step) is not None
            st3 = fab3.wait("job-a", 180, until=lambda s: bool(s.recoveries) and s.state is RunState.RUNNING
                            and s.step > s.recoveries[0]["restored_step"])
            assert st3.state is RunState.RUNNING, "\n".join(fab3.job_logs("job-a")[-80:])
            rec = st3.recoveries[0]
            assert rec["cause"] == "infra" and rec["rank"] == 1
            assert fab3.pids("job-a")[1] != before[1]
            fab3.stop("job-a")
            assert fab3.wait("job-a", 60).state is RunState.STOPPED
        finally:
            fab3.close()
    finally:
        fab2.close()


def _until(cond: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie the agent has not reaped yet counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False
