"""Ids by a unique prefix or tail (like git), on clusters and jobs."""

from __future__ import annotations

import pytest

from podfleet.control import ControlPlane
from podfleet.control.ids import resolve_ref
from podfleet.errors import NotFoundError
from tests.control.conftest import active_cluster


def test_prefix_tail_and_ambiguity() -> None:
    ids = {"job-aaa111": 1, "job-aab222": 2}
    assert resolve_ref("job-aaa", ids, "job") == "job-aaa111"
    assert resolve_ref("b222", ids, "job") == "job-aab222"
    assert resolve_ref("zzzz", ids, "job") == "zzzz"  # the caller says not found
    assert resolve_ref("job", ids, "job") == "job"  # under four characters: never a prefix
    with pytest.raises(NotFoundError, match="ambiguous: it matches job-aaa111, job-aab222"):
        resolve_ref("job-aa", ids, "job")


def test_plane_takes_prefixes(plane: ControlPlane) -> None:
    cl = active_cluster(plane, "node", type="trn2-node")
    job = plane.jobs.submit(cl["id"][:14], {"model": "debug", "chips": 4, "steps": 10**6}, actor="t")
    assert plane.describe_cluster(cl["id"][:14])["name"] == "node"
    assert plane.jobs.describe(job["id"][-6:])["id"] == job["id"]
    assert plane.jobs.stop(job["id"][:16], actor="t")["state"] == "STOPPED"
