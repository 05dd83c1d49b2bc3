"""Real probes on this host: gloo collectives with every result checked, and a timed
matmul; the local fabric declares both capabilities."""

from __future__ import annotations

import pytest

from podfleet.errors import InvalidInputError
from podfleet.fabric.base import COLLECTIVE_OPS, CollectiveProbe, ComputeProbe, bus_factor
from podfleet.fabric.local import probes

pytestmark = pytest.mark.realproc


def test_every_collective_runs_on_gloo_and_comes_back_right() -> None:
    pytest.importorskip("torch")
    rows, refused = probes.collectives(2, COLLECTIVE_OPS, (8, 1 << 14), quick=True)
    assert refused == {}
    assert {(r.op, r.size_bytes) for r in rows} == {(op, s) for op in COLLECTIVE_OPS for s in (8, 1 << 14)}
    for r in rows:
        assert r.wrong == 0 and r.time_us > 0 and r.ranks == 2 and r.type == "float32"
        assert r.count * 4 == r.size_bytes
        assert r.busbw_gbps == pytest.approx(r.algbw_gbps * bus_factor(r.op, 2))


def test_a_timed_matmul_per_rank_is_checked() -> None:
    pytest.importorskip("torch")
    rates = probes.matmuls(1, "fp32", n=128)
    assert [r.chip for r in rates] == [0] and rates[0].tflops > 0 and rates[0].wrong == 0
    with pytest.raises(InvalidInputError, match="fp8"):
        probes.matmuls(1, "fp8")
    with pytest.raises(InvalidInputError, match="unknown collective"):
        probes.collectives(2, ("broadcast",))


def test_gloo_sizes_are_capped_and_nccl_ones_are_not() -> None:
    big = [8, 64 << 20, 1 << 30, 2 << 30]
    assert probes.capped(big, "gloo") == (8, 64 << 20, probes.GLOO_MAX_BYTES)
    assert probes.capped(big, "nccl") == tuple(big)


def test_the_local_fabric_declares_the_probes() -> None:
    from podfleet.fabric.local.fabric import LocalFabric

    assert issubclass(LocalFabric, ComputeProbe) and issubclass(LocalFabric, CollectiveProbe)


def test_verify_and_the_real_drill_on_a_local_cluster(tmp_path) -> None:
    pytest.importorskip("torch")
    import time

    from podfleet.advisor import drill, verify
    from podfleet.advisor.checks import CheckStatus
    from podfleet.compose import build
    from podfleet.engine.timeline import Timeline
    from podfleet.store.memory import MemoryStore

    parts = build(MemoryStore(), Timeline(1, speed=1.0), telemetry_interval_s=0.5, workdir=str(tmp_path))
    plane = parts.plane
    plane.start()
    try:
        plane.call_sync(plane.create_cluster, {"name": "loc", "fabric": "local", "chips": 3})
        deadline = time.monotonic() + 60
        while plane.call_sync(plane.describe_cluster, "loc")["state"] == "deploying":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        opts = verify.VerifyOptions(max_size_bytes=64, ops=("all-reduce",), compute=False)
        inv, inter = verify.finish(plane.call_sync(verify.prepare, plane, "loc", opts))
        assert inv.status == CheckStatus.PASS and inv.figures["chips_found"] == 3
        assert inter.status == CheckStatus.PASS and inter.evidence[0].startswith("measured")
        assert [r["size_bytes"] for r in inter.figures["table"]] == [8, 64]
        assert all(r["wrong"] == 0 and r["ranks"] == 3 for r in inter.figures["table"])
        check = drill.run(plane.call_sync(drill.plan, plane, "loc"), plane=plane)
        assert check.status == CheckStatus.PASS, check.evidence
        assert check.figures["rehearsed"] is False and check.figures["infra_failures"] == 1
    finally:
        plane.stop()
