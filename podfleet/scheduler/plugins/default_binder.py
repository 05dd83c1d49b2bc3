"""Bind: hand the placement to whoever launches workers (optional ``on_bind`` callback).

The control plane usually binds from the returned ``Decision`` instead; a callback is
for embedding (e.g. the trace replay launches its simulated jobs here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from podfleet.scheduler import status as st
from podfleet.scheduler.extension import CycleState, Handle
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest, Placement

NAME = "default_binder"


class DefaultBinder:
    name = NAME

    def __init__(self, on_bind: Callable[[JobRequest, Placement], None] | None = None) -> None:
        self.on_bind = on_bind

    def bind(self, state: CycleState, job: JobRequest, placement: Placement) -> Status:
        if self.on_bind is not None:
            self.on_bind(job, placement)
        return st.SUCCESS


def factory(handle: Handle, args: dict[str, Any]) -> DefaultBinder:
    return DefaultBinder(args.get("on_bind"))
