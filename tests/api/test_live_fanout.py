"""The console's live hardware streams: woken by the engine's re-render (no polling),
each snapshot framed once for every stream; and the server's GC settings."""

from __future__ import annotations

import asyncio
import gc
import time

from podfleet.api.server import GC_FULL_AFTER, quiet_gc
from podfleet.console.live import SnapshotHub
from tests.console.conftest import serve
from tests.control.conftest import active_cluster, make_plane


def test_a_render_wakes_the_streams_and_each_snapshot_is_framed_once() -> None:
    plane = make_plane()
    cid = active_cluster(plane)["id"]
    hub = SnapshotHub(plane)
    rt = plane.clusters[cid]

    async def go() -> None:
        hub.opened()
        try:
            changed = hub.changed(cid)
            assert hub.changed(cid) is changed  # one event for all of the cluster's streams
            assert not changed.is_set()
            plane.render(rt)  # the engine's re-render: tells the hub, which wakes the loop
            await asyncio.wait_for(changed.wait(), 5)
            assert hub.changed(cid) is not changed  # the next render has its own
            first = hub.frame(cid, rt.hardware_bytes, rt.rendered_at)
            assert hub.frame(cid, rt.hardware_bytes, rt.rendered_at) is first
            # Virtual time has no wall clock: no id, just the event.
            assert first.event == b"event: hardware\ndata: " + rt.hardware_bytes + b"\n\n"
            plane.render(rt)
            assert hub.frame(cid, rt.hardware_bytes, rt.rendered_at) is not first
        finally:
            hub.closed()

    asyncio.run(go())


def test_streams_get_every_tick_from_a_served_console() -> None:
    served = serve()
    s = next(served)
    try:
        with s.client("viewer") as c, c.stream("GET", "/console/stream/clusters/pod-0/hardware") as r:
            assert r.status_code == 200
            ids: list[int] = []
            t0 = time.monotonic()
            for line in r.iter_lines():
                if line.startswith("id: "):
                    ids.append(int(line[4:]))
                if len(ids) == 3 or time.monotonic() - t0 > 20:
                    break
        assert len(ids) == 3 and ids == sorted(ids) and len(set(ids)) == 3  # a new sample each tick
        assert abs(ids[-1] / 1000 - time.time()) < 10
    finally:
        served.close()


def test_quiet_gc_freezes_the_server_and_makes_full_collections_rare() -> None:
    before = gc.get_threshold()
    try:
        quiet_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (before[0], before[1], GC_FULL_AFTER)
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
