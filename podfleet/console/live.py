"""Fan-out of hardware snapshots to the console's live streams.

Every open cluster page holds a stream. Polling the snapshot per stream (a timer, a
store of reads and a disconnect probe, 20 times a second each) made the event loop's
work grow with the number of open pages while nothing changed; and each stream framed
the same 70 kB snapshot into its own event. Here the engine says when a cluster was
re-rendered (``ControlPlane.on_render``), one call into the event loop wakes every
stream of that cluster, and the event is framed once per snapshot for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import PacedEnvironment


@dataclass(frozen=True)
class Frame:
    snapshot: bytes  # the snapshot it frames (compared by identity: one object per render)
    event: bytes  # the whole server-sent event


def sample_wall_ms(plane: ControlPlane, rendered_at: float) -> int | None:
    """Wall-clock time (unix ms) of a snapshot rendered at timeline time ``rendered_at``:
    now, less its age on the timeline scaled to the wall (any ``--speed``). None in
    virtual time, where timeline time has no wall clock."""
    env = plane.tl.env
    if not isinstance(env, PacedEnvironment):
        return None
    return round((time.time() - (env.wall_now() - rendered_at) * env.factor) * 1000)


class SnapshotHub:
    """One per app: wakes the streams of a cluster when its snapshot is re-rendered and
    frames each snapshot once."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self._loop: asyncio.AbstractEventLoop | None = None
        self._streams = 0  # open streams (engine-thread reads are a hint: a miss costs one wait)
        self._changed: dict[str, asyncio.Event] = {}  # cluster id -> the event its streams wait on
        self._frames: dict[str, Frame] = {}  # cluster id -> its latest snapshot, framed
        plane.on_render(self._rendered)

    # --- engine thread ------------------------------------------------------------------
    def _rendered(self, cluster_id: str) -> None:
        loop = self._loop
        if loop is None or not self._streams:
            return
        # The loop is gone (server stopped): nobody is left to tell.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._wake, cluster_id)

    # --- event loop -----------------------------------------------------------------------
    def _wake(self, cluster_id: str) -> None:
        ev = self._changed.pop(cluster_id, None)
        if ev is not None:
            ev.set()

    def opened(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._streams += 1

    def closed(self) -> None:
        self._streams -= 1

    def changed(self, cluster_id: str) -> asyncio.Event:
        """The event set at the next re-render of the cluster (shared by its streams).
        Take it *before* reading the snapshot: a render in between then sets it."""
        ev = self._changed.get(cluster_id)
        if ev is None:
            ev = self._changed[cluster_id] = asyncio.Event()
        return ev

    def frame(self, cluster_id: str, snapshot: bytes, rendered_at: float) -> Frame:
        """The ``hardware`` event of ``snapshot`` (framed once; its id is the sample's
        wall-clock time in unix ms, by which the page measures its lag)."""
        f = self._frames.get(cluster_id)
        if f is None or f.snapshot is not snapshot:
            sampled = sample_wall_ms(self.plane, rendered_at)
            head = f"id: {sampled}\n".encode() if sampled is not None else b""
            f = self._frames[cluster_id] = Frame(snapshot, b"".join(
                (head, b"event: hardware\ndata: ", snapshot, b"\n\n")))
        return f

    def forget(self, cluster_id: str) -> None:
        self._frames.pop(cluster_id, None)
