"""DescribeCluster and ListClusters from rendered bytes (``api.rendered``): byte for byte
what the routes' ``response_model`` serialisation gave, and never stale."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI

from podfleet.api.rendered import RenderedViews, compact_json, page_body
from podfleet.api.schemas import Cluster, ClusterList
from podfleet.control.hardwareviews import ChipFilter
from tests.control.conftest import active_cluster, make_plane


def _as_fastapi_renders(views: list[dict[str, Any]], nxt: str | None) -> tuple[bytes, bytes]:
    """The list and its first cluster as FastAPI serialises a returned dict through the
    route's ``response_model`` (what the routes did before they returned bytes)."""
    app = FastAPI()

    @app.get("/list", response_model=ClusterList)
    async def listing() -> dict[str, Any]:
        return {"clusters": views, "next_token": nxt}

    @app.get("/one", response_model=Cluster)
    async def one() -> dict[str, Any]:
        return views[0]

    async def get() -> tuple[bytes, bytes]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return (await c.get("/list")).content, (await c.get("/one")).content

    return asyncio.run(get())


def test_rendered_bodies_are_byte_for_byte_the_response_models() -> None:
    plane = make_plane()
    active_cluster(plane, "fleet", pods=2, pods_per_block=2, spares=1)
    active_cluster(plane, "pod", spares=2)
    plane.jobs.submit(plane.resolve("fleet").id, {"model": "tiny", "chips": 32, "steps": 1000}, actor="test")
    plane.tl.run(plane.tl.now + 5)
    views, _ = plane.list_clusters()
    cache = RenderedViews(Cluster)
    for nxt in (None, views[0]["id"]):
        old_list, old_one = _as_fastapi_renders(views, nxt)
        new_list = page_body("clusters", [cache.render(v["id"], v) for v in views], nxt)
        assert new_list == old_list
        assert cache.render(views[0]["id"], views[0]) == old_one
    assert b'"scheduler":{' in old_list and b'"spares":[' in old_list  # real views, not empty ones


def test_a_view_changed_in_place_is_rendered_again() -> None:
    # A runtime may change a dict its views share (a deployment's steps); the kept copy
    # tells the change from the last render.
    cache = RenderedViews(Cluster)
    steps = [{"name": "chips", "state": "running"}]
    view = {"id": "c1", "name": "a", "state": "deploying", "deployment": {"state": "running", "percent": 5,
                                                                          "steps": steps}}
    first = cache.render("c1", view)
    assert cache.render("c1", dict(view)) is first  # equal: the same bytes, not rendered again
    steps[0]["state"] = "succeeded"
    second = cache.render("c1", view)
    assert b'"succeeded"' in second and second != first
    assert b'"state":"active"' in cache.render("c1", {**view, "state": "active"})
    # Another cluster's view under the same key (the key only finds; equality decides).
    assert b'"name":"b"' in cache.render("c1", {**view, "name": "b"})


def test_compact_json_writes_what_json_dumps_writes() -> None:
    plane = make_plane()
    active_cluster(plane, "fleet", pods=2, pods_per_block=2, spares=1)
    rt = plane.resolve("fleet")
    plane.render(rt)
    body = plane.hardware_page("fleet", ChipFilter(pod=1), 100, None)
    assert len(body["chips"]) == 64 and body["chips"][0]["metrics"]
    odd: list[Any] = [1.5e-07, 1e-05, 1e-100, 1e16, 2.5e15, 0.001, float("nan"), float("-inf"), "é", "\u2603",
                      {"e-1": "e-5"}, (1, 2), 10**30, True, None, 123.0001, -1e-6]
    for obj in [body, *odd, {"values": odd[:10]}]:
        assert compact_json(obj) == json.dumps(obj, separators=(",", ":")).encode(), obj
    for obj in (np.int64(3), {"v": np.bool_(True)}):  # what json.dumps cannot write, neither does it
        with pytest.raises(TypeError):
            compact_json(obj)
