"""Recovery costs: detection delays, copy bandwidths and rank state from the models, and
the measured distributions the twin draws from (``recovery/data/measured_costs.json``)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podfleet.hardware.catalog import get_topology
from podfleet.recovery import costs
from podfleet.recovery.model import (
    MEASURED_COSTS_PATH,
    Empirical,
    MeasuredCosts,
    MeasuredCostsError,
    Timings,
    load_measured,
)

RAW: dict[str, Any] = json.loads(MEASURED_COSTS_PATH.read_text())


def _write(tmp_path: Path, data: Any, name: str = "costs.json") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


def test_the_packaged_file_says_how_when_and_where_it_was_measured() -> None:
    assert RAW["command"].startswith("python -m podfleet.rehearsal.calibrate")
    assert RAW["started_utc"].endswith("Z") and RAW["git_commit"]
    assert RAW["machine"]["cpus"] >= 1 and isinstance(RAW["machine"]["shared"], bool)
    assert all(r["mechanism"] == "rank-move" for r in RAW["rank_moves"])
    assert all(r["mechanism"] == "relaunch" and r["source"] == "checkpoint" for r in RAW["relaunches"])


def test_the_model_reads_the_file() -> None:
    m = Timings().costs
    assert m == load_measured()
    moves, cold = RAW["rank_moves"], RAW["relaunches"]
    assert sorted(m.kill_to_detect_s.samples) == sorted(r["kill_to_detect_s"] for r in moves + cold)
    assert sorted(m.replica_fixed_s.samples) == sorted(
        max(0.0, r["detect_to_step_s"] - r["restore_s"]) for r in moves)
    rate = float(np.median(RAW["checkpoint_io"]["restore_bytes_per_s"]))
    assert sorted(m.checkpoint_fixed_s.samples) == pytest.approx(sorted(
        max(0.0, r["detect_to_step_s"] - r["state_bytes"] / rate) for r in cold))
    assert m.provenance["command"] == RAW["command"]
    # A cold relaunch costs more than a rank move onto a warm standby.
    assert m.checkpoint_fixed_s.median > m.replica_fixed_s.median > 0


def test_draws_are_deterministic_per_seed_and_come_from_the_samples() -> None:
    tm = Timings()

    def draws(seed: int) -> list[float]:
        rng = np.random.default_rng(seed)
        return [tm.draw_move_s(rng) for _ in range(50)] + [costs.detect_delay_s("chip-failure", tm, rng)
                                                           for _ in range(50)]

    assert draws(5) == draws(5) and draws(5) != draws(6)
    assert set(draws(5)[:50]) <= set(tm.costs.replica_fixed_s.samples)
    assert Timings(move_s=0.5).draw_move_s(np.random.default_rng(0)) == 0.5  # a pinned value wins


def test_a_changed_data_file_moves_the_twins_figures(tmp_path: Path) -> None:
    slow = copy.deepcopy(RAW)
    for r in slow["rank_moves"] + slow["relaunches"]:
        r["kill_to_detect_s"] += 1.0
        r["detect_to_step_s"] += 2.0
    base, moved = Timings(), Timings(costs=load_measured(_write(tmp_path, slow)))
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    assert moved.draw_move_s(rng_b) == pytest.approx(base.draw_move_s(rng_a) + 2.0)
    a = costs.detect_delay_s("chip-failure", base, rng_a)
    b = costs.detect_delay_s("chip-failure", moved, rng_b)
    assert b == pytest.approx(a + 1.0)
    nbytes = 1e9
    assert moved.checkpoint_restore_s(nbytes, np.random.default_rng(2)) == pytest.approx(
        base.checkpoint_restore_s(nbytes, np.random.default_rng(2)))  # + 2 s to the relaunch, + 2 s to the move


def test_the_twins_recovery_reads_the_measured_move(tmp_path: Path) -> None:
    """A rank move on the control plane in twin time lasts what the file says it does."""
    from podfleet.rehearsal.recovery_rehearsal import CLUSTER, rehearse

    def move_s(tm: Timings) -> float:
        r = rehearse(3, timings=tm)
        job = r.submit({"model": "llama3-70b", "chips": 64, "steps": 10**7, "checkpoint_interval": 10,
                        "parallelism": {"tp": 8, "pp": 4, "dp": 2}})
        r.plane.inject_fault(CLUSTER, "chip-failure", chip=r.chips(job)[7], actor="t")
        r.tl.run(r.tl.now + 60.0)
        rec = [x for x in r.recoveries() if x["job_id"] == job][-1]
        step = next(s for s in rec["steps"] if s["name"] == "move-rank")
        nxt = rec["steps"][rec["steps"].index(step) + 1]
        return float(nxt["t_start"] - step["t_start"])

    slow = copy.deepcopy(RAW)
    for r in slow["rank_moves"]:
        r["detect_to_step_s"] = r["restore_s"] + 7.0
    base = move_s(Timings())
    assert any(base == pytest.approx(x) for x in Timings().costs.replica_fixed_s.samples)
    assert move_s(Timings(costs=load_measured(_write(tmp_path, slow)))) == pytest.approx(7.0)


@pytest.mark.parametrize(("mutate", "says"), [
    (lambda d: d.pop("rank_moves"), "rank_moves must be a non-empty list"),
    (lambda d: d.__setitem__("relaunches", []), "relaunches must be a non-empty list"),
    (lambda d: d["rank_moves"][0].__setitem__("kill_to_detect_s", "fast"), "rank_moves[0].kill_to_detect_s"),
    (lambda d: d["rank_moves"][0].__setitem__("restore_s", -1), "rank_moves[0].restore_s"),
    (lambda d: d["relaunches"][0].pop("state_bytes"), "relaunches[0].state_bytes"),
    (lambda d: d["checkpoint_io"].__setitem__("restore_bytes_per_s", [0]), "rates must be > 0"),
    (lambda d: d.__setitem__("schema", 99), "schema 99"),
])
def test_a_malformed_file_is_a_clear_error(tmp_path: Path, mutate: Any, says: str) -> None:
    bad = copy.deepcopy(RAW)
    mutate(bad)
    p = _write(tmp_path, bad)
    with pytest.raises(MeasuredCostsError) as err:
        load_measured(p)
    assert says in err.value.message and str(p) in err.value.message


def test_a_missing_or_unparsable_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MeasuredCostsError, match=r"cannot be read.*podfleet\.rehearsal\.calibrate"):
        load_measured(tmp_path / "nope.json")
    with pytest.raises(MeasuredCostsError, match="is not JSON"):
        load_measured(_write(tmp_path, "{not json", "broken.json"))
    with pytest.raises(MeasuredCostsError, match="expected a JSON object"):
        MeasuredCosts.from_json([1, 2])


samples = st.lists(st.floats(min_value=0.0, max_value=1e3, allow_nan=False), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(samples, st.integers(min_value=0, max_value=2**32 - 1))
def test_empirical_draws_stay_in_the_sample_and_repeat_per_seed(xs: list[float], seed: int) -> None:
    e = Empirical(tuple(xs))
    a = [e.draw(np.random.default_rng(seed)) for _ in range(3)]
    b = [e.draw(np.random.default_rng(seed)) for _ in range(3)]
    assert a == b and set(a) <= set(xs)
    assert min(xs) <= e.median <= max(xs)


@settings(max_examples=40, deadline=None)
@given(samples, st.floats(min_value=0.0, max_value=100.0), st.integers(min_value=0, max_value=1000))
def test_detection_is_timeout_plus_a_measured_exit(exits: list[float], hang: float, seed: int) -> None:
    tm = replace(Timings(), hang_timeout_s=hang,
                 costs=replace(Timings().costs, kill_to_detect_s=Empirical(tuple(exits))))
    d = costs.detect_delay_s("chip-failure", tm, np.random.default_rng(seed))
    assert hang - tm.heartbeat_interval_s + min(exits) - 1e-9 <= d <= hang + tm.monitor_poll_s + max(exits) + 1e-9


def test_an_empty_distribution_is_refused() -> None:
    with pytest.raises(MeasuredCostsError, match="at least one sample"):
        Empirical(())


def test_detection_is_the_runtime_timeout_never_zero_for_a_fault() -> None:
    tm, rng = Timings(), np.random.default_rng(0)
    hard = np.array([costs.detect_delay_s("chip-failure", tm, rng) for _ in range(2000)])
    exits = tm.costs.kill_to_detect_s.samples
    assert hard.min() >= tm.hang_timeout_s - tm.heartbeat_interval_s + min(exits)
    assert hard.max() <= tm.hang_timeout_s + tm.monitor_poll_s + max(exits)
    assert hard.std() > 0.03  # a distribution, not a constant
    soft = np.array([costs.detect_delay_s("thermal-runaway", tm, rng) for _ in range(2000)])
    assert soft.min() > 0 and soft.max() <= tm.telemetry_interval_s + tm.scan_interval_s
    assert np.median(soft) == pytest.approx((tm.telemetry_interval_s + tm.scan_interval_s) / 2, rel=0.1)
    assert costs.detect_delay_s("firmware-update", tm, rng) == 0.0
    assert costs.detect_delay_s("predicted-failure", tm, rng) == 0.0


def test_copy_bandwidth_follows_the_topology() -> None:
    fleet = get_topology("trn2-ultraserver:2")
    assert costs.copy_bw_bytes_per_s(fleet, 3, 64 + 3, 1.0) == fleet.net_bw_per_chip_bytes_per_s  # other pod
    pod = fleet.group
    inside = {costs.copy_bw_bytes_per_s(fleet, 0, c, 1.0) for c in pod.neighbours(0)}
    assert inside == {ax.link_bw_bytes_per_s for ax in pod.axes}  # x/y 256 GB/s, z 128 GB/s
    far = max(range(64), key=lambda c: pod.hops(0, c))
    assert costs.copy_bw_bytes_per_s(fleet, 0, far, 1.0) == min(ax.link_bw_bytes_per_s for ax in pod.axes)


def test_rank_state_from_the_perf_memory_model() -> None:
    topo = get_topology("trn2-ultraserver")
    got = costs.state_bytes_per_rank("llama3-70b", 64, {"parallelism": {"tp": 8, "pp": 8, "dp": 1}}, topo)
    assert got is not None and 14e9 < got < 20e9  # ~70e9 x 14 bytes / 64 (embeddings on the end stages)
    dp2 = costs.state_bytes_per_rank("llama3-70b", 64, {"parallelism": {"tp": 8, "pp": 4, "dp": 2}}, topo)
    assert dp2 is not None and dp2 > 0
    assert costs.state_bytes_per_rank("no-such-model", 64, {}, topo) is None
