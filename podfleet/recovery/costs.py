"""What a recovery step costs on this job and this topology: pure functions over the
measured distributions and named assumptions of ``recovery.model`` (derivation in docs/health.md, "Recovery costs").

* the state a rank must get back: its parameters and optimizer state from the perf
  model (``perf.memory.memory_per_chip``) for the job's model and plan;
* the bandwidth of the copy: a peer replica moves chip to chip (NeuronLink inside a
  group, the slowest axis it crosses; the network tier between groups), a checkpoint
  comes from shared storage;
* when the failure is noticed: a hard failure by the heartbeat hang timeout, a
  degradation by the next health scan after the next telemetry sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from podfleet.errors import PodfleetError
from podfleet.hardware.topology import FleetTopology, GridTopology, Topology
from podfleet.perf import Plan
from podfleet.perf.memory import memory_per_chip
from podfleet.perf.models import MODELS, ModelSpec
from podfleet.perf.options import plan_from_options
from podfleet.recovery.model import Timings

HARD_CAUSES = ("chip-failure", "firmware-fault", "hbm-uncorrectable", "sram-uncorrectable")
DEGRADED_CAUSES = ("thermal-runaway",)


def _plan(model: ModelSpec, n: int, options: Mapping[str, Any], topology: Topology) -> Plan:
    return plan_from_options(model, n, options, topology)


def state_bytes_per_rank(model: str, n_ranks: int, options: Mapping[str, Any], topology: Topology) -> float | None:
    """Parameters + optimizer state one rank holds (gradients are recomputed, activations
    are rebuilt by the next step); None when perf does not know the model or plan."""
    m = MODELS.get(model)
    if m is None or n_ranks < 1:
        return None
    try:
        mem = memory_per_chip(m, _plan(m, n_ranks, options, topology))
    except (PodfleetError, ValueError, TypeError, ZeroDivisionError):
        return None
    return float(mem.params_bytes + mem.optimizer_bytes)


def copy_bw_bytes_per_s(topology: Topology, src: int, dst: int, fallback: float) -> float:
    """Bandwidth of one chip-to-chip copy: the network tier between groups of a fleet;
    inside a torus the slowest axis the dimension-order route crosses (a copy streams at
    the rate of its slowest hop)."""
    topo, a, b = topology, src, dst
    if isinstance(topo, FleetTopology):
        ga, a = topo.split(src)
        gb, b = topo.split(dst)
        if ga != gb:
            return float(topo.net_bw_per_chip_bytes_per_s)
        topo = topo.group
    if isinstance(topo, GridTopology):
        ca, cb = topo.coords(a), topo.coords(b)
        crossed = [ax.link_bw_bytes_per_s for ax, x, y in zip(topo.axes, ca, cb, strict=True) if x != y]
        return float(min(crossed)) if crossed else float(max(ax.link_bw_bytes_per_s for ax in topo.axes))
    return fallback


def detect_delay_s(cause: str, tm: Timings, rng: np.random.Generator) -> float:
    """How long after the fault the control plane knows (0 for its own actions).

    Hard failure: the worker's last heartbeat was a uniform phase ``U(0, heartbeat)``
    before the fault; the monitor notices once the silence passes the hang timeout, at
    its next poll, ``U(0, poll)`` later, and kills the hung worker
    (``fabric.local.monitor``); the fabric acts once it sees the process gone, a draw of
    the measured kill -> detection. Degradation: it shows in the next telemetry
    sample, ``U(0, telemetry)``, and the next health scan after that reads it,
    ``U(0, scan)``."""
    if cause in HARD_CAUSES:
        return tm.hang_timeout_s - float(rng.uniform(0.0, tm.heartbeat_interval_s)) \
            + float(rng.uniform(0.0, tm.monitor_poll_s)) + tm.draw_exit_detect_s(rng)
    if cause in DEGRADED_CAUSES:
        return float(rng.uniform(0.0, tm.telemetry_interval_s)) + float(rng.uniform(0.0, tm.scan_interval_s))
    return 0.0
