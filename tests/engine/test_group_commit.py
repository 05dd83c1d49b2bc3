"""Group commit: commands drained together commit once, fail alone, and are acked only
after the commit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from podfleet.engine import Timeline
from podfleet.store import open_store
from podfleet.store.records import ClusterRecord, ClusterStatus


def _rec(i: int) -> ClusterRecord:
    return ClusterRecord(f"cl-{i:03d}", f"c{i}", "active", {"type": "trn2-node"}, ClusterStatus(), 1.0, 1.0)


def test_batch_commits_once_and_a_failing_command_rolls_back_alone(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'pf.db'}")
    tl = Timeline(0)
    commits = []

    @contextmanager
    def batch() -> Iterator[None]:
        with store.transaction():
            yield
        commits.append(1)

    tl.batch = batch

    def ok(i: int) -> str:
        with store.transaction():
            store.save_cluster(_rec(i))
        return f"cl-{i:03d}"

    def bad() -> None:
        with store.transaction():
            store.save_cluster(_rec(99))
            raise ValueError("refused after a write")

    futs = [tl.submit(ok, 1), tl.submit(bad), tl.submit(ok, 2)]
    assert not any(f.done() for f in futs)
    assert tl.drain() == 3
    assert len(commits) == 1
    assert futs[0].result() == "cl-001" and futs[2].result() == "cl-002"
    with pytest.raises(ValueError):
        futs[1].result()
    ids = {c.id for c in store.list_clusters()}
    assert ids == {"cl-001", "cl-002"}  # the failing command's write is gone, the others stay


def test_commit_failure_acknowledges_nothing_and_stops_the_engine() -> None:
    tl = Timeline(0)
    seen: list[str] = []

    @contextmanager
    def batch() -> Iterator[None]:
        yield
        raise OSError("disk full")

    tl.batch = batch
    f = tl.submit(lambda: seen.append("ran") or "acked")
    with pytest.raises(OSError):
        tl.drain()
    assert seen == ["ran"]
    with pytest.raises(OSError):
        f.result(timeout=1)
    assert tl.stopping and tl.log.filter("engine-fatal")
