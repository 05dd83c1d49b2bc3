"""/metrics reads fabric readouts the engine publishes (``control.readout``): a scrape on
an API thread calls no fabric method itself, what it exports is the fabric's exact value
(not the hardware snapshot's 3-decimal rounding), one engine read serves the whole scrape,
and a stopped engine still answers from the readouts last published."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from podfleet import compose
from podfleet.api.metrics import ApiMetrics
from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore

FABRIC_READS = ("chip_states", "chip_metrics", "link_states", "link_metrics")


@pytest.fixture
def plane() -> Iterator[ControlPlane]:
    p = compose.build(MemoryStore(), Timeline(seed=3, speed=1.0), telemetry_interval_s=0.2).plane
    p.start()
    try:
        yield p
    finally:
        p.stop()


def watch_reads(plane: ControlPlane, cid: str) -> list[tuple[str, int]]:
    """Record (method, thread id) of every read of the cluster's fabric from now on."""
    fab = plane.clusters[cid].fabric
    seen: list[tuple[str, int]] = []

    def wrap(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
        def read() -> Any:
            seen.append((name, threading.get_ident()))
            return fn()
        return read

    for name in FABRIC_READS:
        setattr(fab, name, wrap(name, getattr(fab, name)))
    return seen


def samples(text: str, name: str, cluster: str) -> dict[str, float]:
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return {s.labels["chip"]: s.value for s in fams[name].samples if s.labels.get("cluster") == cluster}


def test_a_served_scrape_reads_the_fabric_on_the_engine_thread_only_with_exact_values(plane: ControlPlane) -> None:
    view = plane.call_sync(plane.create_cluster, {"name": "pod", "type": "trn2-ultraserver"}, actor="t")
    rt = plane.clusters[view["id"]]
    seen = watch_reads(plane, view["id"])
    published: list[float] = []
    publish = rt.publish_readout
    rt.publish_readout = lambda t: published.append(t) or publish(t)  # type: ignore[method-assign]
    metrics = ApiMetrics(plane)
    text = generate_latest(metrics.registry).decode()
    assert {n for n, _ in seen} >= set(FABRIC_READS), "the scrape read nothing"
    # Every fabric read (the scrape's, and any tick's meanwhile) on the engine thread.
    assert {t for _, t in seen} == {plane.tl.engine_thread}
    assert len(published) == 1  # one engine read for the whole scrape (both collectors share it)
    readout = rt.readout
    temp = np.asarray(readout.chip_metrics["temperature_c"], np.float64)
    exported = samples(text, "podfleet_chip_temperature_celsius", "pod")
    assert exported == {str(c): float(v) for c, v in enumerate(temp.tolist())}
    assert any(v != round(v, 3) for v in exported.values()), "exact values, not the snapshot's rounding"


def test_a_scrape_after_the_engine_stopped_answers_from_the_last_readouts(plane: ControlPlane) -> None:
    plane.call_sync(plane.create_cluster, {"name": "pod", "type": "trn2-ultraserver"}, actor="t")
    metrics = ApiMetrics(plane)
    before = samples(generate_latest(metrics.registry).decode(), "podfleet_chip_up", "pod")
    plane.stop()
    after = samples(generate_latest(metrics.registry).decode(), "podfleet_chip_up", "pod")
    assert len(before) == 64 and after == before
