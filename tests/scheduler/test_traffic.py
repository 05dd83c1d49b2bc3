"""Traffic-aware placement: the cost rule, table-driven, and the pick among candidates."""

from __future__ import annotations

import numpy as np
import pytest

from podfleet.errors import InvalidInputError
from podfleet.scheduler.traffic import Candidate, pick, traffic_cost, traffic_score

CAP = np.array([10.0, 10.0, 5.0, 10.0])


@pytest.mark.parametrize(("load", "links", "weights", "cost"), [
    ([0, 0, 0, 0], [0, 1], [1, 1], 1.0),  # quiet links, one edge each: ideal
    ([0, 0, 0, 0], [0, 1], [2, 1], 2.0),  # its own edges pile onto link 0
    ([1, 0, 0, 0], [0, 1], [1, 1], 2.0),  # a running ring shares link 0
    ([0, 0, 0, 3], [0, 1], [1, 1], 1.0),  # traffic elsewhere does not count
    ([0, 0, 1, 0], [0, 2], [1, 1], 2.0),  # the slow link is the pace; shared, it halves
    ([0, 0, 0, 0], [], [], 1.0),  # a one-chip job sends nothing
])
def test_traffic_cost(load: list[float], links: list[int], weights: list[float], cost: float) -> None:
    got = traffic_cost(np.array(load, float), CAP, np.array(links, np.int64), np.array(weights, float))
    assert got == pytest.approx(cost)
    assert traffic_score(got) == pytest.approx(100.0 / cost)


def test_pick_avoids_busy_links_then_prefers_short_rings() -> None:
    load = np.array([2.0, 0.0, 0.0, 0.0])
    busy = Candidate((0, 1), np.array([0]), np.array([1.0]))
    long_quiet = Candidate((2, 3), np.array([1, 3]), np.array([1.0, 1.0]))
    short_quiet = Candidate((4, 5), np.array([3]), np.array([1.0]))
    assert pick([busy, long_quiet, short_quiet], load, CAP) == (2, pytest.approx(1.0))
    assert pick([busy], load, CAP) == (0, pytest.approx(3.0))


def test_bad_candidates_are_named() -> None:
    with pytest.raises(InvalidInputError, match="no candidate"):
        pick([], np.zeros(4), CAP)
    with pytest.raises(InvalidInputError, match="link 1 has no capacity"):
        traffic_cost(np.zeros(4), np.array([1.0, 1.0, 0.0, 1.0]), np.array([2]), np.array([1.0]))
    with pytest.raises(InvalidInputError, match="differ in length"):
        traffic_cost(np.zeros(4), CAP, np.array([0, 1]), np.array([1.0]))


# --- in the scheduler: blocks whose rings would cross busy links score lower ---------------
def test_placement_moves_off_links_other_rings_load() -> None:
    from podfleet.hardware.catalog import get_topology
    from podfleet.scheduler import DecisionKind, JobRequest, Scheduler
    from podfleet.scheduler.traffic import ring_links

    pod = get_topology("trn2-ultraserver")

    def place(load: np.ndarray | None) -> tuple[int, ...]:
        s = Scheduler(pod)
        if load is not None:
            assert s.set_link_traffic(load)
        s.submit(JobRequest("j", 16))
        [d] = s.schedule()
        assert d.kind is DecisionKind.BIND
        return tuple(d.placement.chips)

    quiet = place(None)
    links, _weights = ring_links(pod, quiet)
    load = np.zeros(2 * len(pod.links))
    load[links] = 1.0  # another job's ring on exactly those links
    moved = place(load)
    assert set(moved) != set(quiet)
    moved_links, _ = ring_links(pod, moved)
    assert not load[moved_links].any()  # an equal block on quiet links
    # Traffic that no longer exists is forgotten.
    s = Scheduler(pod)
    s.set_link_traffic(load)
    assert s.set_link_traffic(np.zeros_like(load)) and not s.cluster.traffic_pods


def test_link_traffic_of_the_wrong_size_is_named() -> None:
    from podfleet.hardware.catalog import get_topology
    from podfleet.scheduler import Scheduler

    with pytest.raises(InvalidInputError, match="two per link"):
        Scheduler(get_topology("trn2-ultraserver")).set_link_traffic(np.zeros(3))
