"""A cluster's fabric readout: what the Prometheus collectors export, read from the fabric
by the engine thread and published whole, so a scrape (an API thread) never calls a fabric.

The values are the fabric's own, unrounded (the hardware snapshot rounds floats to three
decimals for its JSON; a scrape exports them as the device reported them). Published
on demand: a scrape asks the engine for a fresh readout of every live cluster
(``ControlPlane.metrics_readouts``), so a telemetry tick costs nothing while nobody scrapes,
and what a scrape exports is as of the scrape, as when the collectors read the fabric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from podfleet.fabric.base import ChipState, Fabric, LinkState, WorkerPlacement


@dataclass(frozen=True, eq=False)
class FabricReadout:
    """One cluster's fabric as of timeline time ``at`` (engine thread); read-only afterwards."""

    at: float
    chip_states: Sequence[ChipState]  # as the fabric gave them (some give a state's name: read with ChipState(s))
    chip_metrics: Mapping[str, np.ndarray]  # metric -> value per chip (or per chip and core), exact
    link_states: Sequence[LinkState]
    link_metrics: Mapping[str, np.ndarray]
    hosts: Sequence[str] = field(default=())  # where each chip's worker lives (fabrics that say)


EMPTY_READOUT = FabricReadout(-float("inf"), (), {}, (), {})


def read_fabric(fab: Fabric, at: float, placement: WorkerPlacement | None) -> FabricReadout:
    """Read ``fab`` now (engine thread). Arrays are copied: a fabric may move its own on."""
    return FabricReadout(
        at=at,
        chip_states=list(fab.chip_states()),
        chip_metrics={k: np.array(v, copy=True) for k, v in fab.chip_metrics().items()},
        link_states=list(fab.link_states()),
        link_metrics={k: np.array(v, copy=True) for k, v in fab.link_metrics().items()},
        hosts=list(placement.chip_hosts()) if placement is not None else (),
    )
