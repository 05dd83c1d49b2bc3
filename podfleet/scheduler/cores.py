"""Chips -> NeuronCores: which logical cores each rank's worker gets.

Under the Neuron runtime's logical-core configuration (LNC), LNC=2 (the trn2 default)
pairs physical cores, so a trn2 chip's 8 NeuronCore-v3 expose 4 logical cores; trn1 has
2 cores and LNC=1. Logical cores are numbered chip-major (chip c owns cores
``c*k .. c*k+k-1``), the numbering ``NEURON_RT_VISIBLE_CORES`` uses on one instance.
Non-Neuron chips expose one device per chip.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from podfleet.errors import InvalidInputError
from podfleet.hardware.specs import get_chip

DEFAULT_LNC = {"trn2": 2, "trn1": 1}


@functools.lru_cache(maxsize=64)
def cores_per_chip(chip_type: str, lnc: int | None = None) -> int:
    spec = get_chip(chip_type)
    if spec.vendor != "aws":
        return 1
    lnc = DEFAULT_LNC.get(chip_type, 1) if lnc is None else lnc
    if lnc < 1 or spec.cores % lnc:
        raise InvalidInputError(
            f"lnc {lnc} must divide the {spec.cores} physical cores of a {chip_type} chip", field="lnc"
        )
    return spec.cores // lnc


def logical_cores(chip_type: str, chips: Sequence[int], lnc: int | None = None) -> tuple[tuple[int, ...], ...]:
    """For each rank (chip in rank order) the logical core ids its worker is given."""
    k = cores_per_chip(chip_type, lnc)
    return tuple(tuple(range(c * k, c * k + k)) for c in chips)


def visible_cores_env(cores: Sequence[int]) -> str:
    """``NEURON_RT_VISIBLE_CORES`` value: a range ``a-b`` when contiguous, else a list."""
    cs = sorted(cores)
    if cs and cs == list(range(cs[0], cs[-1] + 1)):
        return f"{cs[0]}-{cs[-1]}" if len(cs) > 1 else str(cs[0])
    return ",".join(map(str, cs))
