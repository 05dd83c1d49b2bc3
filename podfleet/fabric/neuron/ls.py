"""``neuron-ls -j`` (``--json-output``): the device inventory and its NeuronLink wiring.

Schema: neuron-docs ``tools/neuron-sys-tools/neuron-ls.rst`` (aws-neuron/aws-neuron-sdk),
the ``neuron-ls -j`` example: a list with one object per device carrying
``neuron_device``, ``bdf``, ``connected_to``, ``nc_count``, ``logical_neuroncore_config``,
``memory_size``, ``neuron_processes`` (pid, command, neuron_runtime_version); newer
releases add ``neuroncore_ids``, ``instance_type``, ``instance_id``, ``cpu_affinity`` and
``numa_node``. ``connected_to`` is null on single-device instances (trn2.3xlarge).

``connected_to`` lists neighbours in the order up, left, down, right of a wrapping
4x4 grid with id = row*4 + col (device 0 -> 12, 3, 4, 1), which is exactly
``GridTopology.neighbours`` order for ``trn2-node``; ``build_topology`` checks the
wiring against the grid rather than trusting the instance type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from podfleet.errors import InvalidInputError
from podfleet.fabric.neuron._fields import (
    arr,
    device_entry,
    document,
    integer,
    malformed,
    num,
    text,
)
from podfleet.hardware.catalog import custom_grid, get_topology
from podfleet.hardware.topology import GridTopology, Topology

SRC = "neuron-ls"

# neuron_hardware_info.neuron_device_type -> podfleet chip spec name.
DEVICE_TYPES = {"trainium2": "trn2", "trainium": "trn1", "trainium1": "trn1"}


@dataclass(frozen=True)
class NeuronProcess:
    pid: int | None
    command: str
    runtime_version: str


@dataclass(frozen=True)
class NeuronDevice:
    index: int
    bdf: str
    connected_to: tuple[int, ...]
    nc_count: int | None  # logical NeuronCores (4 per Trn2 device at LNC=2)
    logical_core_config: int | None
    memory_bytes: float | None
    core_ids: tuple[int, ...]  # neuroncore_ids; empty when this neuron-ls omits them
    processes: tuple[NeuronProcess, ...]


@dataclass(frozen=True)
class NeuronInventory:
    devices: tuple[NeuronDevice, ...]
    instance_type: str = ""

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def core_to_device(self, cores_per_device: int | None = None) -> dict[int, int]:
        """Global NeuronCore index -> device index.

        Uses ``neuroncore_ids`` when present; otherwise cores are numbered densely,
        device by device (``index * nc_count + k``), which is how the runtime numbers
        them (``NEURON_RT_VISIBLE_CORES``).
        """
        out: dict[int, int] = {}
        for d in self.devices:
            ids = d.core_ids
            if not ids:
                per = d.nc_count or cores_per_device
                if not per:
                    continue
                ids = tuple(range(d.index * per, (d.index + 1) * per))
            for c in ids:
                out[c] = d.index
        return out


def parse_neuron_ls(raw: str | bytes | Sequence[Any]) -> NeuronInventory:
    """Parse ``neuron-ls -j`` output. Raises ``InvalidInputError`` naming the bad path."""
    doc: list[Any] = document(SRC, raw, list, "a JSON list of devices")
    devices: list[NeuronDevice] = []
    instance_type = ""
    for i, d in enumerate(doc):
        path = f"[{i}]"
        d, index = device_entry(SRC, d, "neuron_device", path)
        procs = []
        for j, p in enumerate(arr(SRC, d, "neuron_processes", path)):
            ppath = f"{path}.neuron_processes[{j}]"
            if not isinstance(p, Mapping):
                raise malformed(SRC, ppath, "an object", p)
            procs.append(
                NeuronProcess(
                    integer(SRC, p, "pid", ppath),
                    text(SRC, p, "command", ppath),
                    text(SRC, p, "neuron_runtime_version", ppath),
                )
            )
        devices.append(
            NeuronDevice(
                index=index,
                bdf=text(SRC, d, "bdf", path),
                connected_to=_ints(d, "connected_to", path),
                nc_count=integer(SRC, d, "nc_count", path),
                logical_core_config=integer(SRC, d, "logical_neuroncore_config", path),
                memory_bytes=num(SRC, d, "memory_size", path),
                core_ids=_ints(d, "neuroncore_ids", path),
                processes=tuple(procs),
            )
        )
        instance_type = instance_type or text(SRC, d, "instance_type", path)
    seen: set[int] = set()
    for dev in devices:
        if dev.index in seen:
            raise InvalidInputError(
                f"malformed {SRC} document: device {dev.index} is listed twice", field="neuron_device"
            )
        seen.add(dev.index)
    n = len(devices)
    if seen and seen != set(range(n)):
        raise InvalidInputError(
            f"malformed {SRC} document: device ids must be 0-{n - 1}, got {sorted(seen)}",
            field="neuron_device",
        )
    for dev in devices:
        bad = [c for c in dev.connected_to if not 0 <= c < n or c == dev.index]
        if bad:
            raise InvalidInputError(
                f"malformed {SRC} document: device {dev.index} connected_to {bad} "
                f"(valid peers are 0-{n - 1}, not itself)",
                field="connected_to",
            )
    return NeuronInventory(tuple(sorted(devices, key=lambda d: d.index)), instance_type)


def _ints(d: Mapping[str, Any], key: str, path: str) -> tuple[int, ...]:
    out = []
    for j, v in enumerate(arr(SRC, d, key, path)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise malformed(SRC, f"{path}.{key}[{j}]", "an integer", v)
        out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class Wiring:
    """A topology matched to neuron-ls's ``connected_to``, with what did not match."""

    topology: Topology
    missing: frozenset[tuple[int, int]]  # links the grid has but neuron-ls does not report
    order_ok: bool  # every device lists its neighbours in the grid's up/left/down/right order


def edges(inv: NeuronInventory) -> frozenset[tuple[int, int]]:
    """Undirected links reported by neuron-ls (a link counts if either end lists it)."""
    return frozenset(
        (min(d.index, p), max(d.index, p)) for d in inv.devices for p in d.connected_to
    )


def build_topology(inv: NeuronInventory, chip_type: str = "trn2") -> Wiring:
    """The grid that neuron-ls's wiring describes.

    Tries the catalogued node (``trn2-node`` / ``trn1-node``) first, then every 1-D or
    2-D torus of the device count, and keeps the one that explains every reported link
    with the fewest links missing. A link missing from ``connected_to`` is reported (it
    may be down), not fatal, as long as at most a quarter of the grid's links are
    missing; wiring that fits no grid is an ``InvalidInputError``.
    """
    n = inv.n_devices
    if n == 0:
        raise InvalidInputError("neuron-ls reports no Neuron devices", field="neuron_device")
    reported = edges(inv)
    candidates: list[GridTopology] = []
    node = {"trn2": "trn2-node", "trn1": "trn1-node"}.get(chip_type)
    if node is not None:
        topo = get_topology(node)
        if topo.n_chips == n and isinstance(topo, GridTopology):
            candidates.append(topo)
    candidates.append(custom_grid([n], chip_type, name=f"neuron-{n}"))
    for rows in range(2, math.isqrt(n) + 1):
        if n % rows == 0:
            candidates.append(custom_grid([n // rows, rows], chip_type, name=f"neuron-{n // rows}x{rows}"))
    best: Wiring | None = None
    for topo in candidates:
        grid = frozenset((min(lk.src, lk.dst), max(lk.src, lk.dst)) for lk in topo.links)
        if not reported <= grid:
            continue
        missing = grid - reported
        if len(missing) * 4 > len(grid):
            continue
        order_ok = all(
            list(d.connected_to) == [c for c in topo.neighbours(d.index) if c in d.connected_to]
            for d in inv.devices
        )
        if best is None or len(missing) < len(best.missing):
            best = Wiring(topo, missing, order_ok)
    if best is None:
        raise InvalidInputError(
            f"neuron-ls wiring of {n} devices ({len(reported)} links) fits no ring or 2-D torus; "
            f"device 0 is connected to {list(inv.devices[0].connected_to)}",
            field="connected_to",
        )
    return best


def chip_type_of(device_type: str, default: str = "trn2") -> str:
    """neuron-monitor's ``neuron_device_type`` as a podfleet chip name."""
    return DEVICE_TYPES.get(device_type.lower(), default) if device_type else default
