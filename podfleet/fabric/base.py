"""The ``Fabric`` protocol and the chip / link state machines every fabric shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from podfleet.hardware.topology import Topology
from podfleet.states import check_transition


class ChipState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    FAILED = "failed"
    ISOLATED = "isolated"
    UPDATING = "updating"


CHIP_TRANSITIONS: dict[ChipState, frozenset[ChipState]] = {
    ChipState.HEALTHY: frozenset({ChipState.DEGRADED, ChipState.FAILED, ChipState.ISOLATED, ChipState.UPDATING}),
    ChipState.DEGRADED: frozenset({ChipState.HEALTHY, ChipState.FAILED, ChipState.ISOLATED, ChipState.UPDATING}),
    ChipState.FAILED: frozenset({ChipState.ISOLATED}),
    # An isolated chip comes back only after repair / replacement (or a good update).
    ChipState.ISOLATED: frozenset({ChipState.HEALTHY, ChipState.UPDATING}),
    ChipState.UPDATING: frozenset({ChipState.HEALTHY, ChipState.FAILED, ChipState.ISOLATED}),
}


def check_chip_transition(src: ChipState, dst: ChipState) -> None:
    check_transition("chip", CHIP_TRANSITIONS, src, dst)


class LinkState(StrEnum):
    UP = "up"
    DEGRADED = "degraded"
    DOWN = "down"


LINK_TRANSITIONS: dict[LinkState, frozenset[LinkState]] = {
    LinkState.UP: frozenset({LinkState.DEGRADED, LinkState.DOWN}),
    LinkState.DEGRADED: frozenset({LinkState.UP, LinkState.DOWN}),
    LinkState.DOWN: frozenset({LinkState.UP, LinkState.DEGRADED}),
}


def check_link_transition(src: LinkState, dst: LinkState) -> None:
    check_transition("link", LINK_TRANSITIONS, src, dst)


class ExitCause(StrEnum):
    """Why a real worker exited, as every real fabric classifies it. The control plane
    charges only USER_CODE against a job's retry budget."""

    OK = "ok"
    INFRA = "infra"  # killed, hung, node or actor lost: not the job's fault
    USER_CODE = "user-code"  # an exception or crash in the job's code: uses the retry budget
    BAD_INPUT = "bad-input"  # missing entrypoint, wrong key, unwritable dir: retrying won't help
    PEER_LOST = "peer-lost"  # a survivor whose collective broke after a peer died
    STOPPED = "stopped"  # we stopped it (job stop, or the rest of a gang being recovered)


@dataclass(frozen=True)
class WorkerGroupSpec:
    """What a fabric needs to launch one job's gang of workers."""

    job_id: str
    chips: tuple[int, ...]  # rank r runs on chips[r]
    model: str
    steps: int
    checkpoint_interval: int = 0
    entrypoint: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FabricEvent:
    """Something a fabric reports upward: a fault, a worker exit, progress."""

    kind: str  # e.g. "chip-failed", "link-down", "worker-exited", "progress", "hang"
    t: float
    chip: int | None = None
    link: int | None = None
    job_id: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Fabric(Protocol):
    kind: str  # "sim", "local", "ray"
    topology: Topology

    def attach(self, timeline: Any) -> None:
        """Register this fabric's processes (telemetry sampling, faults) on the timeline."""

    def chip_states(self) -> list[ChipState]: ...

    def set_chip_state(self, chip: int, state: ChipState, reason: str) -> None: ...

    def link_states(self) -> list[LinkState]: ...

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        """Latest telemetry: metric name -> array over chips (or [chips, cores])."""

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        """Latest link telemetry: metric name -> array over links."""

    def launch(self, group: WorkerGroupSpec) -> None: ...

    def stop(self, job_id: str) -> None: ...

    def subscribe(self, callback: Callable[[FabricEvent], None]) -> None: ...
