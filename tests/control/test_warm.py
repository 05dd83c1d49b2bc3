"""A follower's warm-up (``control.warm``): the takeover's reload takes the specs it parsed."""

from __future__ import annotations

from podfleet.control.warm import Warmth
from podfleet.store.memory import MemoryStore
from tests.control.conftest import active_cluster, advance, make_plane


def test_a_reload_takes_the_followers_parsed_specs_and_parses_only_the_rest() -> None:
    store = MemoryStore()
    leader = make_plane(store)
    active_cluster(leader, spares=2)
    ids = [leader.jobs.submit("pod", {"model": "debug", "chips": 8, "steps": 100_000}, actor="t")["id"]
           for _ in range(5)]
    advance(leader, 5)
    warmth = Warmth(store)
    assert warmth.follow() == 5 and set(warmth.specs) == set(ids)
    assert warmth.follow() == 0  # a later round reads only the ids: nothing new
    late = leader.jobs.submit("pod", {"model": "debug", "chips": 4, "steps": 100}, actor="t")["id"]
    # A stored spec that is not the one the follower read is parsed again, never taken.
    raw, spec = warmth.specs[ids[0]]
    warmth.specs[ids[0]] = ({**raw, "chips": 999}, spec)
    advance(leader, 5)

    cold = make_plane(store, seed=1)
    cold.load()
    warm = make_plane(store, seed=1)
    warm.jobs.use_warmth(warmth)
    warm.load()
    assert (warmth.stats.specs_warm, warmth.stats.specs_parsed) == (4, 2)  # ids[0] and the late job
    for job_id in [*ids, late]:
        a, b = cold.jobs.describe(job_id), warm.jobs.describe(job_id)
        clock = ("timestamps", "usage", "created_at", "updated_at")  # each plane's own wall-clock epoch
        assert {k: v for k, v in a.items() if k not in clock} == {k: v for k, v in b.items() if k not in clock}
    assert warm.jobs.describe(ids[0])["chips"] == 8
    assert warmth.clusters == set(warm.clusters)


def test_a_stopped_warm_up_reads_nothing_more() -> None:
    store = MemoryStore()
    leader = make_plane(store)
    active_cluster(leader)
    leader.jobs.submit("pod", {"model": "debug", "chips": 4, "steps": 100}, actor="t")
    warmth = Warmth(store)
    warmth.stop()
    warmth.run(0.01)  # returns at once: the takeover began
    assert warmth.specs == {}
