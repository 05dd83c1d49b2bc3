"""Named topologies. ``get_topology("trn2-ultraserver")``; a fleet of N groups is
``"trn2-ultraserver:1024"`` or ``"dgx-a100:128"``; ``custom_grid`` builds any torus/mesh.

Per-link bandwidths are not published for Trainium (reference/trn2.md); we take the
consistent reading given there and keep it a parameter: 1,024 GB/s per chip inside a
trn2 instance over 4 x/y links = 256 GB/s per link; 256 GB/s per chip between
instances over 2 z links = 128 GB/s per z link.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from podfleet.errors import InfeasibleError, InvalidInputError, UnknownNameError
from podfleet.hardware.specs import GB, GiB, get_chip
from podfleet.hardware.topology import (
    AXIS_NAMES,
    Axis,
    FleetTopology,
    GridTopology,
    NetworkLevel,
    SwitchedTopology,
    Topology,
)

TRN2_XY_LINK = 256 * GB
TRN2_Z_LINK = 128 * GB
TRN2_HOP_LATENCY_S = 1.5e-6  # 1-2 us per hop inside a node (intranode-collective-comm.rst)
TRN2_Z_HOP_LATENCY_S = 2.0e-6  # not published; a parameter
TRN1_LINK = 384 * GiB / 4
EFA_LATENCY_S = 15e-6  # HBM-to-HBM between servers over EFA (internode-collective-comm.rst)
IB_LATENCY_S = 5e-6
NVLINK_LATENCY_S = 1e-6


@dataclass(frozen=True)
class NetworkTier:
    """The slower tier that joins groups of this kind into a fleet."""

    name: str
    bw_per_chip_bytes_per_s: float
    latency_s: float


def _trn2_node() -> Topology:
    axes = [Axis(n, 4, True, TRN2_XY_LINK, TRN2_HOP_LATENCY_S) for n in "xy"]
    return GridTopology("trn2-node", "trn2", axes)


def _trn2_ultraserver() -> Topology:
    axes = [Axis(n, 4, True, TRN2_XY_LINK, TRN2_HOP_LATENCY_S) for n in "xy"]
    axes.append(Axis("z", 4, True, TRN2_Z_LINK, TRN2_Z_HOP_LATENCY_S))
    return GridTopology("trn2-ultraserver", "trn2", axes)


def _trn1_node() -> Topology:
    axes = [Axis(n, 4, True, TRN1_LINK, TRN2_HOP_LATENCY_S) for n in "xy"]
    return GridTopology("trn1-node", "trn1", axes)


def _dgx(name: str, chip: str) -> Callable[[], Topology]:
    def build() -> Topology:
        return SwitchedTopology(name, chip, 8, get_chip(chip).link_bw_bytes_per_s, NVLINK_LATENCY_S)

    return build


BUILDERS: dict[str, Callable[[], Topology]] = {
    "trn2-node": _trn2_node,
    "trn2-ultraserver": _trn2_ultraserver,
    "trn1-node": _trn1_node,
    "dgx-a100": _dgx("dgx-a100", "a100"),
    "dgx-h100": _dgx("dgx-h100", "h100"),
    "hgx-h200": _dgx("hgx-h200", "h200"),
}

# EFAv3 3.2 Tbps per trn2 instance (16 chips) = 25 GB/s per chip; trn1.32xlarge 800 Gbps;
# DGX A100 8x200 Gb/s HDR = 25 GB/s per GPU; DGX H100 8x400 Gb/s = 50 GB/s per GPU.
NETWORKS: dict[str, NetworkTier] = {
    "trn2-node": NetworkTier("efa-v3", 3.2e12 / 8 / 16, EFA_LATENCY_S),
    "trn2-ultraserver": NetworkTier("efa-v3", 3.2e12 / 8 / 16, EFA_LATENCY_S),
    "trn1-node": NetworkTier("efa-v2", 800e9 / 8 / 16, EFA_LATENCY_S),
    "dgx-a100": NetworkTier("ib-hdr", 200e9 / 8, IB_LATENCY_S),
    "dgx-h100": NetworkTier("ib-ndr", 400e9 / 8, IB_LATENCY_S),
    "hgx-h200": NetworkTier("ib-ndr", 400e9 / 8, IB_LATENCY_S),
}

TOPOLOGY_NAMES = tuple(BUILDERS)

# The network above a pod, level by level (reference/trn2.md). Inside a block (the pods
# behind one spine switch) a chip gets its share of the instance's EFA: EFAv3 3.2 Tbps
# per 16-chip instance = 25 GB/s per chip, 15 us HBM-to-HBM (internode-collective-comm.rst).
# Across blocks the spine tier's oversubscription and extra switch latency are not
# published for UltraClusters: 2:1 and +5 us are assumptions, kept parameters here.
FLEET_BLOCK_OVERSUBSCRIPTION = 2.0
FLEET_EXTRA_LATENCY_S = 5e-6
DEFAULT_PODS_PER_BLOCK = 16  # a parameter: the pods one spine serves is not published
MAX_FLEET_PODS = 1024


def network_levels(base: str) -> tuple[NetworkLevel, ...]:
    """The levels above one ``base`` group, innermost first: block, then fleet."""
    net = NETWORKS[base]
    src = "reference/trn2.md: EFA per instance / chips per instance; 15 us (internode-collective-comm.rst)"
    return (
        NetworkLevel("block", net.bw_per_chip_bytes_per_s, net.latency_s, src),
        NetworkLevel("fleet", net.bw_per_chip_bytes_per_s / FLEET_BLOCK_OVERSUBSCRIPTION,
                     net.latency_s + FLEET_EXTRA_LATENCY_S,
                     f"assumption: {FLEET_BLOCK_OVERSUBSCRIPTION:g}:1 spine oversubscription, "
                     f"+{FLEET_EXTRA_LATENCY_S * 1e6:g} us per spine crossing (not published)"),
    )


def pod_level(group: Topology) -> NetworkLevel:
    """The innermost level: one pod's own interconnect (per chip, the pod's bisection share)."""
    if isinstance(group, GridTopology):
        bw = sum(a.link_bw_bytes_per_s * (2 if a.wrap and a.size > 2 else 1) for a in group.axes if a.size > 1)
        lat = max(a.hop_latency_s for a in group.axes)
    else:
        bw, lat = group.bisection_bw_bytes_per_s * 2 / max(group.n_chips, 1), NVLINK_LATENCY_S
    return NetworkLevel("pod", bw, lat, "reference/trn2.md: NeuronLink per chip; 1-2 us per hop")


def fleet_topology(base: str, pods: int, pods_per_block: int | None = None) -> FleetTopology:
    """``pods`` groups of ``base`` joined by EFA, in blocks of ``pods_per_block`` behind a spine."""
    if base not in BUILDERS:
        raise UnknownNameError("topology", base, TOPOLOGY_NAMES, field="type")
    if not isinstance(pods, int) or not 1 <= pods <= MAX_FLEET_PODS:
        raise InvalidInputError(f"pods must be 1-{MAX_FLEET_PODS}, got {pods!r}", field="pods",
                                allowed=f"1-{MAX_FLEET_PODS}")
    k = min(DEFAULT_PODS_PER_BLOCK, pods) if pods_per_block is None else pods_per_block
    if not isinstance(k, int) or not 1 <= k <= pods:
        # Past the pods, a valid number the other field rules out: a 422 (the schema can
        # bound it only by the largest fleet).
        err = InfeasibleError if isinstance(k, int) and k > pods else InvalidInputError
        raise err(f"pods_per_block must be 1-{pods} (the pods), got {k!r}", field="pods_per_block",
                  allowed=f"1-{pods}")
    key = f"{base}:{pods}/{k}"
    cached = _cache.get(key)
    if isinstance(cached, FleetTopology):
        return cached
    net = NETWORKS[base]
    name = f"{base}:{pods}"
    group = BUILDERS[base]()
    topo = FleetTopology(name, group, pods, net.bw_per_chip_bytes_per_s, net.latency_s,
                         pods_per_block=k, levels=(pod_level(group), *network_levels(base)))
    _cache[key] = topo
    return topo

_cache: dict[str, Topology] = {}


def get_topology(name: str) -> Topology:
    """A named topology, or ``NAME:COUNT`` for a fleet of COUNT such groups."""
    if name in _cache:
        return _cache[name]
    base, sep, count_s = name.partition(":")
    if base not in BUILDERS:
        raise UnknownNameError(
            "topology", name, [*TOPOLOGY_NAMES, "NAME:COUNT (fleet)"], field="topology"
        )
    topo = BUILDERS[base]()
    if sep:
        try:
            count = int(count_s)
        except ValueError:
            count = 0
        if count < 1:
            raise InvalidInputError(
                f"fleet size in {name!r} must be a positive integer, e.g. {base}:4",
                field="topology",
            )
        topo = fleet_topology(base, count) if count <= MAX_FLEET_PODS else FleetTopology(
            name, topo, count, NETWORKS[base].bw_per_chip_bytes_per_s, NETWORKS[base].latency_s,
            levels=(pod_level(topo), *network_levels(base)))
    _cache[name] = topo
    return topo


MAX_AXIS_CHIPS = 64  # chips along one axis of a custom grid


def custom_grid(
    dims: Sequence[int],
    chip_type: str = "trn2",
    *,
    link_bw_bytes_per_s: Sequence[float] | float = TRN2_XY_LINK,
    wrap: Sequence[bool] | bool = True,
    hop_latency_s: float = TRN2_HOP_LATENCY_S,
    name: str = "custom",
) -> GridTopology:
    """A torus/mesh of any dims (1-6 axes), validated with messages that quote the numbers."""
    get_chip(chip_type)
    dims = list(dims)
    if not 1 <= len(dims) <= len(AXIS_NAMES):
        raise InvalidInputError(
            f"dims must have 1-{len(AXIS_NAMES)} axes, got {len(dims)}", field="dims"
        )
    if any((not isinstance(d, int)) or d < 1 or d > MAX_AXIS_CHIPS for d in dims):
        raise InvalidInputError(f"each dim must be an integer 1-{MAX_AXIS_CHIPS}, got {dims}", field="dims")
    bws = [link_bw_bytes_per_s] * len(dims) if isinstance(link_bw_bytes_per_s, int | float) else list(link_bw_bytes_per_s)
    wraps = [wrap] * len(dims) if isinstance(wrap, bool) else list(wrap)
    if len(bws) != len(dims) or len(wraps) != len(dims):
        raise InvalidInputError("link bandwidth and wrap must give one value per axis", field="dims")
    if any(b <= 0 for b in bws):
        raise InvalidInputError(f"link bandwidth must be positive, got {bws}", field="link_bw")
    axes = [
        Axis(AXIS_NAMES[k], d, w, float(b), hop_latency_s)
        for k, (d, w, b) in enumerate(zip(dims, wraps, bws, strict=True))
    ]
    return GridTopology(name, chip_type, axes)
