"""Score: thermal and power headroom, now and as forecast.

Per chip, from telemetry arrays (``temperature_c``) and the demand forecast
(``forecast_power_w``: the predicted power of the jobs on and around each chip, from
``podfleet.scheduler.forecast``):

    temp_headroom  = clip((95 C - T) / (95 C - 35 C), 0, 1)
    neigh_headroom = 1 - mean forecast power of the chip and its torus neighbours / TDP
    pod_headroom   = 1 - forecast pod power / (chips x TDP)

score = 100 * (0.5 * mean temp_headroom + 0.3 * mean neigh_headroom + 0.2 * pod_headroom)
over the block's chips, so new jobs go where heat and power will be, not only are.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from podfleet.hardware.topology import GridTopology
from podfleet.scheduler import status as st
from podfleet.scheduler.extension import Candidates, CycleState, Handle
from podfleet.scheduler.state import AMBIENT_C, THROTTLE_C, PodState
from podfleet.scheduler.status import Status
from podfleet.scheduler.types import JobRequest

NAME = "thermal_headroom"


def headroom(temperature_c: np.ndarray, throttle_c: float = THROTTLE_C, ambient_c: float = AMBIENT_C) -> np.ndarray:
    """The rule: per-chip thermal headroom in [0, 1] (1 = at ambient, 0 = at throttle)."""
    h: np.ndarray = np.clip((throttle_c - np.asarray(temperature_c, float)) / (throttle_c - ambient_c), 0.0, 1.0)
    return h


@functools.lru_cache(maxsize=8)
def _neighbourhood(grid: GridTopology) -> np.ndarray:
    a = np.eye(grid.n_chips)
    for c in range(grid.n_chips):
        a[c, grid.neighbours(c)] = 1.0
    weights: np.ndarray = a / a.sum(axis=1, keepdims=True)
    return weights


def pod_chip_headroom(pod: PodState) -> np.ndarray:
    hit = pod.cache.get(NAME)
    if hit is not None and hit[0] == pod.telemetry_version:
        return hit[1]
    temp = headroom(pod.temperature_c)
    neigh = 1.0 - np.clip(_neighbourhood(pod.grid) @ pod.forecast_power_w / pod.tdp_w, 0.0, 1.0)
    pod_h = 1.0 - min(float(pod.forecast_power_w.sum()) / (pod.n_chips * pod.tdp_w), 1.0)
    out = 0.5 * temp + 0.3 * neigh + 0.2 * pod_h
    pod.cache[NAME] = (pod.telemetry_version, out)
    return out


class ThermalHeadroom:
    name = NAME

    def score(self, state: CycleState, job: JobRequest, cands: Candidates) -> tuple[Status, np.ndarray]:
        h = np.stack([pod_chip_headroom(cands.cluster.pods[int(p)]) for p in cands.pods])
        return st.SUCCESS, 100.0 * h[cands.pod_pos[:, None], cands.chips].mean(axis=1)


def factory(handle: Handle, args: dict[str, Any]) -> ThermalHeadroom:
    return ThermalHeadroom()
