"""The two-raylet Ray cluster that test_ray_recovery.py and test_ray_rank_move.py share
(clusters.py): started by the first test that asks for it, stopped after the last one in a
row that does, so it does not idle on CI's two cores through the other Ray tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fabric.ray.clusters import SHARED, SharedTwoRaylets


@pytest.fixture(scope="session")
def two_raylets_shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedTwoRaylets]:
    yield SHARED
    SHARED.close()


@pytest.fixture
def two_raylet_plane(two_raylets_shared: SharedTwoRaylets,
                     tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Any]:
    """``(ray_cluster, built)``: the shared cluster and the plane built on it, started."""
    return two_raylets_shared.get(lambda: tmp_path_factory.mktemp("raytwo"))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if "two_raylet_plane" in item.fixturenames and (
            nextitem is None or "two_raylet_plane" not in nextitem.fixturenames):
        SHARED.close()
