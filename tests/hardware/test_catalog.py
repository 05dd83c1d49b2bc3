"""Chip catalog, named topologies, and bad input: unknown names list the valid ones."""

from __future__ import annotations

import pytest

from podfleet.errors import InfeasibleError, InvalidInputError, UnknownNameError
from podfleet.hardware.catalog import (
    NETWORKS,
    TOPOLOGY_NAMES,
    custom_grid,
    fleet_topology,
    get_topology,
)
from podfleet.hardware.specs import CHIPS, GB, TB, GiB, get_chip


def test_catalog_has_the_required_chips_with_sources() -> None:
    assert {"trn2", "trn1", "h100", "h200", "a100"} <= CHIPS.keys()
    for spec in CHIPS.values():
        assert spec.source
        assert spec.tflops["bf16"] > 0
        assert spec.hbm_bytes > 0 and spec.hbm_bw_bytes_per_s > 0
        assert spec.link_bw_bytes_per_s > 0 and spec.tdp_w > 0 and spec.cores > 0


def test_trn2_figures_match_reference() -> None:
    trn2 = get_chip("trn2")
    assert trn2.peak_flops("bf16") == 667e12
    assert trn2.peak_flops("fp8") == 1299e12
    assert trn2.hbm_bytes == 96 * GiB
    assert trn2.hbm_bw_bytes_per_s == 2.9 * TB
    assert trn2.cores == 8
    assert trn2.link_bw_bytes_per_s == 1280 * GB


def test_unknown_chip_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError) as exc:
        get_chip("tpu-v5")
    msg = exc.value.message
    assert "'tpu-v5'" in msg
    for name in CHIPS:
        assert name in msg
    assert exc.value.field == "chip_type"
    assert exc.value.exit_code == 2


def test_unknown_dtype_lists_valid_ones() -> None:
    with pytest.raises(UnknownNameError, match="valid: bf16, fp16, fp32, tf32"):
        get_chip("a100").peak_flops("fp8")


def test_unknown_topology_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError) as exc:
        get_topology("trn3-pod")
    for name in TOPOLOGY_NAMES:
        assert name in exc.value.message
    assert "NAME:COUNT" in exc.value.message
    assert exc.value.field == "topology"


@pytest.mark.parametrize("name", ["trn2-node:0", "trn2-node:-1", "trn2-node:abc", "trn2-node:"])
def test_bad_fleet_size(name: str) -> None:
    with pytest.raises(InvalidInputError, match="positive integer"):
        get_topology(name)


def test_unknown_fleet_base() -> None:
    with pytest.raises(UnknownNameError):
        get_topology("nope:4")


def test_named_topologies_all_build() -> None:
    for name in TOPOLOGY_NAMES:
        topo = get_topology(name)
        assert topo is get_topology(name)  # cached
        assert topo.summary()["chips"] == topo.n_chips
        assert name in NETWORKS


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"dims": []}, "1-6 axes"), ({"dims": [1] * 7}, "1-6 axes"), ({"dims": [4, 0]}, r"\[4, 0\]"),
     ({"dims": [65]}, "1-64"), ({"dims": [4, 4], "wrap": [True]}, "one value per axis"),
     ({"dims": [4], "link_bw_bytes_per_s": -1.0}, "positive")],
)
def test_custom_grid_bad_input(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        custom_grid(**kwargs)


def test_custom_grid_unknown_chip() -> None:
    with pytest.raises(UnknownNameError, match="trn2"):
        custom_grid([4], "gaudi")


def test_custom_grid_per_axis_bandwidth() -> None:
    g = custom_grid([4, 4, 2], link_bw_bytes_per_s=[1.0, 2.0, 3.0], wrap=[True, False, True])
    assert {ln.axis: ln.bw_bytes_per_s for ln in g.links} == {0: 1.0, 1: 2.0, 2: 3.0}
    assert g.kind == "mesh"


def test_more_pods_per_block_than_pods_is_infeasible_not_malformed() -> None:
    # 169 is a valid pods_per_block (the schema's 1-1024) that a fleet of 2 rules out: a 422.
    with pytest.raises(InfeasibleError, match=r"must be 1-2 \(the pods\), got 169"):
        fleet_topology("trn2-ultraserver", 2, 169)
    with pytest.raises(InvalidInputError) as info:
        fleet_topology("trn2-ultraserver", 2, 0)
    assert not isinstance(info.value, InfeasibleError)
