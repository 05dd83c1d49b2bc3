"""The trace-replay baselines on hand-made traces whose right schedule is known: strict
FIFO, EASY backfill that fills a hole, EASY that must not delay the head job, and block
placement that sees fragmentation counting chips would miss."""

from __future__ import annotations

import numpy as np
import pytest

from podfleet.hardware.catalog import custom_grid, get_topology
from podfleet.hardware.topology import GridTopology
from podfleet.scheduler.baselines import Policy, Run, TraceJob, figures, run_figures, simulate


def J(name: str, submit: float, chips: int, run: float) -> TraceJob:
    return TraceJob(name, submit, chips, run)


def starts(runs: list[Run]) -> dict[str, float]:
    return {r.job.job_id: r.start_s for r in runs}


def test_fifo_head_blocks_everything_behind_it() -> None:
    trace = [J("a", 0, 2, 10), J("b", 1, 4, 5), J("c", 2, 1, 1)]
    # c would fit beside a at t=2, but strict FIFO keeps it behind b.
    assert starts(simulate(trace, 4, Policy.FIFO)) == {"a": 0, "b": 10, "c": 15}


def test_easy_backfills_a_job_that_ends_before_the_head_starts() -> None:
    trace = [J("a", 0, 2, 10), J("b", 1, 4, 5), J("c", 2, 2, 8)]
    # b's reservation is t=10; c (2 free chips, t=2..10) is gone by then.
    assert starts(simulate(trace, 4, Policy.EASY)) == {"a": 0, "b": 10, "c": 2}
    assert starts(simulate(trace, 4, Policy.FIFO)) == {"a": 0, "b": 10, "c": 15}


def test_easy_must_not_delay_the_head_job() -> None:
    trace = [J("a", 0, 2, 10), J("b", 1, 4, 5), J("c", 2, 2, 20)]
    # c fits now, but would run past b's reservation (t=10) on chips b needs: it waits.
    runs = simulate(trace, 4, Policy.EASY)
    assert starts(runs) == {"a": 0, "b": 10, "c": 15}
    assert starts(runs) == starts(simulate(trace, 4, Policy.FIFO))


def test_easy_long_job_may_use_chips_the_reservation_does_not_need() -> None:
    trace = [J("a", 0, 2, 10), J("b", 1, 3, 5), J("c", 2, 1, 100), J("d", 3, 1, 100)]
    # b needs 3 chips at t=10: a's two and one free now. The fourth is spare until
    # then, so c takes it and runs long; d would take b's third chip: it waits.
    runs = simulate(trace, 4, Policy.EASY)
    assert starts(runs) == {"a": 0, "b": 10, "c": 2, "d": 15}
    by = {r.job.job_id: r for r in runs}
    assert not set(by["c"].chips) & set(by["b"].chips)
    assert starts(simulate(trace, 4, Policy.FIFO)) == {"a": 0, "b": 10, "c": 10, "d": 15}


def test_blocks_see_fragmentation_that_counting_misses() -> None:
    line = custom_grid([4], wrap=False)
    trace = [J("a", 0, 1, 10), J("b", 0, 1, 100), J("c", 0, 1, 10), J("d", 1, 2, 5)]
    # At t=10 chips 0 and 2 are free: two chips, but not two neighbours (b holds chip 1).
    assert starts(simulate(trace, 4, Policy.FIFO))["d"] == 10
    assert starts(simulate(trace, 4, Policy.FIFO, topology=line))["d"] == 10  # chips 2, 3
    trace = [J("a", 0, 1, 10), J("b", 0, 1, 100), J("c", 0, 1, 100), J("d", 1, 2, 5)]
    assert starts(simulate(trace, 4, Policy.FIFO))["d"] == 10
    got = simulate(trace, 4, Policy.FIFO, topology=line)
    assert starts(got)["d"] == 100 and got[3].chips == (0, 1)


def test_easy_reservation_on_blocks_is_not_delayed() -> None:
    line = custom_grid([4], wrap=False)
    # a holds chips 0-1 to t=10. h (3 chips) is reserved the block 0-2 at t=10 (it
    # overlaps the busy chips most), so the long c takes chip 3 now and d must wait.
    trace = [J("a", 0, 2, 10), J("h", 1, 3, 5), J("c", 2, 1, 100), J("d", 3, 1, 100)]
    runs = simulate(trace, 4, Policy.EASY, topology=line)
    assert starts(runs) == {"a": 0, "h": 10, "c": 2, "d": 15}
    assert runs[1].chips == (0, 1, 2) and runs[2].chips == (3,)
    # The whole line reserved: nothing long may start before the head.
    trace = [J("a", 0, 1, 10), J("h", 1, 4, 1), J("c", 2, 1, 100)]
    assert starts(simulate(trace, 4, Policy.EASY, topology=line)) == {"a": 0, "h": 10, "c": 11}


def valid(runs: list[Run], n: int) -> None:
    """No chip runs two jobs at once; nothing starts before it was submitted."""
    events = sorted([(r.start_s, 1, r) for r in runs] + [(r.end_s, 0, r) for r in runs], key=lambda e: e[:2])
    held = np.zeros(n, dtype=bool)
    for _, kind, r in events:
        idx = list(r.chips)
        if kind:
            assert not held[idx].any() and r.start_s >= r.job.submit_s and len(r.chips) == r.job.chips
            held[idx] = True
        else:
            held[idx] = False


@pytest.mark.parametrize("seed", range(4))
def test_random_traces_are_valid_and_easy_beats_fifo_on_average(seed: int) -> None:
    rng = np.random.default_rng(seed)
    topo = get_topology("trn2-ultraserver")
    assert isinstance(topo, GridTopology)
    sizes = rng.choice([1, 2, 4, 8, 16, 32, 64], size=80)
    trace = [J(f"j{i}", float(t), int(s), float(r)) for i, (t, s, r) in
             enumerate(zip(np.cumsum(rng.exponential(60, 80)), sizes, rng.lognormal(6, 1, 80), strict=True))]
    fifo = simulate(trace, 64, Policy.FIFO, topology=topo)
    easy = simulate(trace, 64, Policy.EASY, topology=topo)
    valid(fifo, 64)
    valid(easy, 64)
    assert sum(r.jct_s for r in easy) <= sum(r.jct_s for r in fifo)


def test_figures_use_one_definition() -> None:
    runs = simulate([J("a", 0, 2, 10), J("b", 1, 4, 5), J("c", 2, 2, 8)], 4, Policy.EASY)
    f = run_figures(runs, 4)
    assert f.makespan_s == 15 and f.utilization == pytest.approx((20 + 20 + 16) / (4 * 15))
    assert f.mean_jct_s == pytest.approx((10 + 14 + 8) / 3) and f.max_wait_s == 9
    assert figures(60.0, 4, [0.0], [15.0], [0.0]).utilization == 1.0


def test_bad_traces_are_refused() -> None:
    with pytest.raises(ValueError, match="asks 8 chips"):
        simulate([J("a", 0, 8, 1)], 4)
    with pytest.raises(ValueError, match="no block"):
        simulate([J("a", 0, 30, 1)], 64, topology=get_topology("trn2-ultraserver"))  # type: ignore[arg-type]


def test_on_a_fleet_a_job_larger_than_a_pod_takes_whole_free_pods() -> None:
    pod = get_topology("trn2-ultraserver")
    assert isinstance(pod, GridTopology)
    trace = [J("a", 0, 8, 10), J("b", 1, 128, 5), J("c", 2, 64, 3)]
    # Pod 0 is partly held by a: b needs 2 whole pods (1 and 2), c then fits on pod 3 at once.
    runs = {r.job.job_id: r for r in simulate(trace, 256, Policy.FIFO, topology=pod, pods=4)}
    assert runs["b"].start_s == 1 and {c // 64 for c in runs["b"].chips} == {1, 2}
    assert runs["c"].start_s == 2 and {c // 64 for c in runs["c"].chips} == {3}
    assert {c // 64 for c in runs["a"].chips} == {0}
    # Three pods: b waits for a to leave pod 0; counting chips would have started it at 1.
    runs3 = {r.job.job_id: r for r in simulate(trace[:2], 192, Policy.FIFO, topology=pod, pods=3)}
    assert runs3["b"].start_s == 1 and {c // 64 for c in runs3["b"].chips} == {1, 2}
    late = [J("a", 0, 8, 10), J("x", 0.5, 64, 20), J("b", 1, 128, 5)]
    runs_late = {r.job.job_id: r for r in simulate(late, 192, Policy.FIFO, topology=pod, pods=3)}
    assert runs_late["b"].start_s == 10, runs_late["b"]  # only pod 0 (after a) and pod 2 are whole
    with pytest.raises(ValueError, match="whole pods of 64"):
        simulate([J("d", 0, 96, 1)], 256, Policy.FIFO, topology=pod, pods=4)
