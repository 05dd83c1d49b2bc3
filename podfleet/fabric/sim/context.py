"""What every part of the twin shares: the clock, the hardware, its telemetry and the
event bus. The board, the fault process and the job runner each get this explicit
context (and each other's public methods), never a back-reference to ``SimFabric``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import FabricEvent
from podfleet.fabric.sim.links import LinkTable
from podfleet.fabric.sim.telemetry import ChipTelemetry
from podfleet.hardware.specs import ChipSpec
from podfleet.hardware.topology import Topology


class StepModel(Protocol):
    """What a step-time function reads of the twin (``step_time_fn(spec, model)``): the
    chip, the topology and the live clock and link health of a gang. The ``Board`` is
    one (so the job runner needs no back-reference to ``SimFabric``), and ``SimFabric``
    is another, for callers that time a step from outside."""

    @property
    def spec(self) -> ChipSpec: ...

    @property
    def topology(self) -> Topology: ...

    def gang_clock_factor(self, chips: Sequence[int]) -> float: ...

    def job_link_bw(self, chips: Sequence[int]) -> float: ...

    def job_nominal_link_bw(self, chips: Sequence[int]) -> float: ...


class EventBus:
    """Logs each event on the timeline and hands it to subscribers (engine thread)."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.subscribers: list[Callable[[FabricEvent], None]] = []

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> Callable[[], None]:
        self.subscribers.append(callback)
        return lambda: self.subscribers.remove(callback) if callback in self.subscribers else None

    def event(self, kind: str, *, chip: int | None = None, link: int | None = None,
              job_id: str | None = None, **detail: Any) -> FabricEvent:
        fields: dict[str, Any] = {}
        if chip is not None:
            fields["chip"] = chip
        if link is not None:
            fields["link"] = link
        if job_id is not None:
            fields["job_id"] = job_id
        self.tl.emit(kind, **fields, **detail)
        return self.deliver(FabricEvent(kind, self.tl.now, chip=chip, link=link, job_id=job_id, detail=detail))

    def deliver(self, ev: FabricEvent) -> FabricEvent:
        """To subscribers only (the caller logged its own, fuller record on the timeline)."""
        for cb in list(self.subscribers):
            cb(ev)
        return ev


@dataclass(frozen=True, eq=False)
class SimContext:
    tl: Timeline
    topology: Topology
    spec: ChipSpec
    links: LinkTable
    telemetry: ChipTelemetry
    bus: EventBus
    telemetry_interval_s: float

    @property
    def n_chips(self) -> int:
        return self.topology.n_chips

    @property
    def now(self) -> float:
        return self.tl.now
