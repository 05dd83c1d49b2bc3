"""The detached actors' names and the discard of what no job holds (no Ray needed: a
stand-in for the few Ray calls ``supervisor.py`` makes)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from podfleet.fabric.ray import supervisor
from podfleet.fabric.ray.actor import _BufferReporter


class _Remote:
    def __init__(self, fn: Any) -> None:
        self.remote = fn


class _Actor:
    def __init__(self, name: str, pg: object | None) -> None:
        self.name = name
        self.state = _Remote(lambda: {"pg": pg})


class _Ray:
    """``util.list_named_actors``, ``get_actor``, ``get`` and ``kill`` over a dict."""

    def __init__(self, names: dict[str, str]) -> None:  # name -> namespace
        self.alive = dict(names)
        self.killed: list[str] = []
        self.util = SimpleNamespace(list_named_actors=self._list)

    def _list(self, all_namespaces: bool = False) -> list[dict[str, str]]:
        assert all_namespaces
        return [{"name": n, "namespace": ns} for n, ns in self.alive.items()]

    def get_actor(self, name: str, namespace: str) -> _Actor:
        if self.alive.get(name) != namespace:
            raise ValueError(name)
        return _Actor(name, pg=None)

    def get(self, value: Any, timeout: float) -> Any:
        return value

    def kill(self, actor: _Actor, no_restart: bool) -> None:
        self.killed.append(actor.name)
        del self.alive[actor.name]


def test_names_round_trip_and_other_actors_are_ignored() -> None:
    name = supervisor.rank_name("job-1", 3, "ab12")
    assert supervisor.parse(name) == supervisor.Named(name, "job-1", "rank3", "ab12")
    assert supervisor.parse("someone-else's-actor") is None
    ns = supervisor.namespace_for("c1")
    ray = _Ray({supervisor.supervisor_name("job-1", "a"): ns, supervisor.supervisor_name("job-1", "b"): ns,
                supervisor.supervisor_name("job-2", "a"): "podfleet-other", "unrelated": ns})
    found = supervisor.find(ray, ns)
    assert set(found) == {"job-1"} and found["job-1"].launch == "b"  # the newest launch


def test_discard_kills_every_podfleet_actor_of_the_namespace_not_kept() -> None:
    ns = supervisor.namespace_for("c1")
    keep = {supervisor.supervisor_name("job-1", "b"), supervisor.rank_name("job-1", 0, "b")}
    ray = _Ray({**dict.fromkeys(keep, ns), supervisor.supervisor_name("job-1", "a"): ns,
                supervisor.rank_name("job-1", 0, "a"): ns, supervisor.rank_name("job-9", 1, "x"): ns,
                supervisor.rank_name("job-3", 0, "x"): "podfleet-c2", "unrelated": ns})
    assert supervisor.discard(ray, ns, keep) == ["job-1", "job-9"]
    assert set(ray.alive) == keep | {supervisor.rank_name("job-3", 0, "x"), "unrelated"}


def test_the_journal_keeps_what_is_not_acknowledged_and_the_loss_history() -> None:
    rep = _BufferReporter()
    for s in range(1, 4):
        rep.progress(s, 1.0 / s, 10.0, 0.1)
    rep.checkpoint(3, "/ckpt")
    msgs, _ = rep.drain(None)
    assert [m["seq"] for m in msgs] == [1, 2, 3, 4]
    msgs, _ = rep.drain(2)  # the plane applied 1 and 2
    assert [m["seq"] for m in msgs] == [3, 4]
    msgs, _ = rep.drain(4)
    assert msgs == []
    rep.progress(4, 0.25, 10.0, 0.1)
    # A re-attaching plane reads the progress history and what is unacknowledged, in order.
    assert [(m["type"], m.get("step")) for m in rep.journal()] == [("progress", s) for s in range(1, 5)]
    assert rep.last_progress is not None and rep.last_progress["step"] == 4
