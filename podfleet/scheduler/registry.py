"""Plugin registry: name -> factory(handle, args). Which run, with which weights, is config."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from podfleet.errors import UnknownNameError
from podfleet.scheduler.extension import Handle, Plugin
from podfleet.scheduler.plugins import (
    borrow_packing,
    default_binder,
    fragmentation,
    gang_permit,
    hbm_fit,
    health_gate,
    preemption,
    queue_admission,
    reclaim,
    reservation,
    reservation_window,
    spare_guard,
    thermal_headroom,
    topology_block,
)

Factory = Callable[[Handle, dict[str, Any]], Plugin]

REGISTRY: dict[str, Factory] = {
    m.NAME: m.factory
    for m in (
        queue_admission,
        health_gate,
        spare_guard,
        hbm_fit,
        topology_block,
        fragmentation,
        thermal_headroom,
        borrow_packing,
        preemption,
        reclaim,
        reservation,
        reservation_window,
        gang_permit,
        default_binder,
    )
}


def register(name: str, factory: Factory) -> None:
    """Add an out-of-tree plugin."""
    REGISTRY[name] = factory


def build_plugin(name: str, handle: Handle, args: dict[str, Any]) -> Plugin:
    if name not in REGISTRY:
        raise UnknownNameError("scheduler plugin", name, REGISTRY, field="plugins")
    return REGISTRY[name](handle, dict(args))
