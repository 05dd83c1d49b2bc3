"""Acceptance checks on the twin: inventory, compute (chip model, throttling), the
interconnect table (x/y against z), the rehearsed drill, and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from podfleet.advisor import drill, verify
from podfleet.advisor.checks import CheckStatus, verdict
from podfleet.compose import build
from podfleet.engine.timeline import Timeline
from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.fabric.base import ChipState, bus_factor
from podfleet.fabric.sim import probes
from podfleet.hardware.specs import get_chip
from podfleet.store.memory import MemoryStore
from tests.advisor.conftest import Pod

SMALL = verify.VerifyOptions(max_size_bytes=1 << 20)


def by_name(checks: list) -> dict:
    return {c.name: c for c in checks}


def test_a_healthy_pod_passes_and_the_z_rings_are_slower(pod: Pod) -> None:
    cid, checks = verify.run_checks(pod.plane, "pod", verify.VerifyOptions())
    c = by_name(checks)
    assert [x.status for x in checks] == [CheckStatus.PASS] * 3
    inv = c["inventory"].figures
    assert inv["chips_found"] == inv["chips_expected"] == 64 and inv["neighbours_mismatched"] == []
    bf16 = c["compute"].figures["bf16"]
    assert bf16["peak_tflops"] == get_chip("trn2").tflops["bf16"] and 0.4 < bf16["fraction_of_peak"] < 1.0
    assert c["compute"].figures["fp8"]["median_tflops"] > bf16["median_tflops"]
    fig = c["interconnect"].figures
    assert fig["sizes_bytes"][0] == 8 and fig["sizes_bytes"][-1] == 1 << 30
    bus = fig["busbw_gbps_at_largest"]
    assert bus["z"]["all-reduce"] < 0.6 * bus["x"]["all-reduce"]
    assert bus["x"]["all-reduce"] == pytest.approx(bus["y"]["all-reduce"])
    rows = [r for r in fig["table"] if r["group"] == "x" and r["op"] == "all-reduce"]
    assert [r["size_bytes"] for r in rows] == fig["sizes_bytes"]
    r = rows[-1]
    assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / (r["time_us"] * 1e-6) / 1e9)
    assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * bus_factor("all-reduce", 4))
    assert verdict(cid, checks)["passed"]


def test_a_down_link_fails_inventory_and_its_ring(pod: Pod) -> None:
    pod.plane.inject_fault("pod", "link-down", link="0-16")  # a z link: chips 0 and 16 differ in z
    pod.run(10)
    c = by_name(verify.run_checks(pod.plane, "pod", SMALL)[1])
    assert c["inventory"].status == CheckStatus.FAIL
    inter = c["interconnect"]
    assert inter.status == CheckStatus.FAIL
    assert any(e.startswith("z all-reduce") for e in inter.evidence)
    assert not any(e.startswith("x ") for e in inter.evidence)
    assert not verdict("pod", [inter])["passed"]


def test_compute_fails_a_throttled_chip_and_names_the_clock() -> None:
    spec = get_chip("trn2")
    clock = np.ones(64)
    clock[7] = 0.6
    rates = probes.matmul_rates(spec, clock, [ChipState.HEALTHY] * 64, range(64), "bf16")
    assert rates[7].tflops == pytest.approx(0.6 * rates[0].tflops, rel=0.05)
    assert rates[7].clock_factor == pytest.approx(0.6)
    down = probes.matmul_rates(spec, clock, [ChipState.FAILED] * 64, [3], "bf16")
    assert down[0].tflops == 0.0


def test_verify_of_a_deploying_cluster_is_refused_with_a_sentence() -> None:
    tl = Timeline(2)
    parts = build(MemoryStore(), tl)
    parts.plane.load()
    parts.plane.create_cluster({"name": "new", "type": "trn2-ultraserver"})
    with pytest.raises(ConflictError, match="is deploying"):
        verify.run_checks(parts.plane, "new", SMALL)
    with pytest.raises(NotFoundError):
        verify.run_checks(parts.plane, "nope", SMALL)


def test_bad_options_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="unknown collective"):
        verify.VerifyOptions(ops=("all-reduce", "broadcast"))
    with pytest.raises(InvalidInputError, match="8 B to 1 GiB"):
        verify.VerifyOptions(max_size_bytes=2 << 30)
    assert verify.sizes_up_to(100) == (8, 64, 100)


def test_the_drill_rehearses_a_chip_failure_within_budget(pod: Pod) -> None:
    plan = drill.plan(pod.plane, "pod")
    assert plan.runnable and plan.spares == 2
    check = drill.run(plan)
    assert check.status == CheckStatus.PASS, check.evidence
    assert check.figures["recoveries"] >= 1 and 0 < check.figures["failover_s"] <= drill.FAILOVER_BUDGET_S
    tight = drill.run(plan, budget_s=0.001)
    assert tight.status == CheckStatus.FAIL and "over the" in tight.evidence[0]
