"""Recovery costs: detection delays, copy bandwidths and rank state from the models."""

from __future__ import annotations

import numpy as np
import pytest

from podfleet.hardware.catalog import get_topology
from podfleet.recovery import costs
from podfleet.recovery.model import (
    CHECKPOINT_FIXED_S,
    MEASURED_CHECKPOINT_RESUME_S,
    MEASURED_REPLICA_RESUME_S,
    REPLICA_FIXED_S,
    Timings,
)


def test_measured_fixed_costs_come_from_the_benchmarks() -> None:
    tm = Timings()
    assert 0 < REPLICA_FIXED_S < MEASURED_REPLICA_RESUME_S and 0 < CHECKPOINT_FIXED_S < MEASURED_CHECKPOINT_RESUME_S
    assert tm.move_s == REPLICA_FIXED_S and tm.move_s + tm.restart_s == pytest.approx(CHECKPOINT_FIXED_S)


def test_detection_is_the_runtime_timeout_never_zero_for_a_fault() -> None:
    tm, rng = Timings(), np.random.default_rng(0)
    hard = np.array([costs.detect_delay_s("chip-failure", tm, rng) for _ in range(2000)])
    assert hard.min() >= tm.hang_timeout_s - tm.heartbeat_interval_s
    assert hard.max() <= tm.hang_timeout_s + tm.monitor_poll_s
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
