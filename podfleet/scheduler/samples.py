"""Telemetry samples as the figures read them: a chip's utilization ratio, and whether a
sample is the very one read last time.

Below both readers of one sample, the health scanner (``health.scan``) and the load
balancer (``control.balancing``), so neither imports the other: the balancer took these
from the health package before, an arrow from the control plane up into health.
Pure: numpy over the fabric's arrays, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def same_frozen(arrays: tuple[Any, ...], last: tuple[Any, ...]) -> bool:
    """The very arrays of the last scan, read-only (so not changed since): the twin and the
    neuron fabric replace a metric array when it changes, never write it."""
    n = len(arrays)
    if n != len(last):
        return False
    # Six times a tick (the scan, the balancer): the one- and two-array cases without a
    # ``zip`` and a loop, which cost more than the checks.
    if n == 1:
        a = arrays[0]
        return a is last[0] and isinstance(a, np.ndarray) and not a.flags.writeable
    if n == 2:
        a, b = arrays
        return a is last[0] and b is last[1] and isinstance(a, np.ndarray) and isinstance(b, np.ndarray) \
            and not a.flags.writeable and not b.flags.writeable
    for a, b in zip(arrays, last, strict=True):
        if a is not b or not isinstance(a, np.ndarray) or a.flags.writeable:
            return False
    return True


# The last read-only utilization array ``util_ratio`` was given, and its ratio (read-only).
_util_memo: list[Any] = [None, None]


def util_ratio(chip: Mapping[str, np.ndarray]) -> np.ndarray:
    """NeuronCore utilization per chip as a ratio (the mean over cores / 100).

    The health monitor and the balancer both read it from the same sample: for the very
    read-only array of the last call (a fabric replaces its arrays, never writes them)
    the last ratio is returned again, itself read-only."""
    src = chip["neuroncore_utilization"]
    memo = _util_memo
    if memo[0] is src:  # only ever a read-only array
        out: np.ndarray = memo[1]
        return out
    util = np.asarray(src)
    if util.ndim == 2:
        # ``util.mean(axis=1) / 100`` without the wrapper: the same sum and divisions,
        # summed in float64 without a float64 copy of the [chips, cores] array first.
        out = np.add.reduce(util, axis=1, dtype=np.float64)
        out /= util.shape[1]
        out /= 100.0
    else:
        out = np.asarray(util, np.float64) / 100.0
    if isinstance(src, np.ndarray) and not src.flags.writeable:  # as ``same_frozen``: a snapshot
        out.flags.writeable = False
        memo[0], memo[1] = src, out
    return out
