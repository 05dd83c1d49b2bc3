"""Acceptance checks of a deployed cluster (``VerifyCluster``, ``podfleet verify``).

* ``inventory``: chip count, shape and each chip's neighbours as the fabric found them,
  against the cluster's spec (neuron-ls style); chip and link states.
* ``compute``: a timed matmul per chip and dtype (``ComputeProbe``: the twin's chip model
  at each chip's current clock, so throttling shows; worker fabrics run a real kernel on
  each worker's device), against the pod's median (a slow chip) and the chip's datasheet.
* ``interconnect``: collectives over the fabric's named groups and sizes 8 B up to
  ``max_size_bytes`` (``CollectiveProbe``), reported as nccl-tests does; the bus
  bandwidth at the largest size is compared with the healthy model of the same group
  (where the chip type has a datasheet) and every measured result must be right.

Two phases: ``prepare`` reads the cluster on the engine thread (the inventory, and the
probes the fabric hands back), ``finish`` runs the probes and judges on any thread (real
probes spawn processes for seconds). The drill (a chip failure under a probe job) is
``ops.drill``; it runs off the engine too.
Thresholds are parameters, stated with each verdict.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from podfleet.advisor.checks import Check, CheckStatus, worst
from podfleet.control.lifecycle import ClusterState
from podfleet.control.plane import ControlPlane
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import ConflictError, InvalidInputError
from podfleet.fabric.base import (
    COLLECTIVE_OPS,
    ChipState,
    CollectiveProbe,
    CollectiveRow,
    ComputeProbe,
    LinkState,
    MatmulRate,
    bus_factor,
)
from podfleet.hardware.catalog import TOPOLOGY_NAMES, get_topology
from podfleet.hardware.specs import CHIPS, ChipSpec
from podfleet.hardware.topology import Topology
from podfleet.perf.collective_probe import collective_times
from podfleet.perf.collectives import HEALTHY

SLOW_FAIL = 0.80  # a chip below 80% of the pod's median matmul rate fails
SLOW_WARN = 0.95
# The pod's median below 40% of the datasheet peak fails: a healthy Trainium's training
# GEMMs reach about 47% of its BF16 peak (perf fit on reference/validation_trn.md), an A100's 74%.
SPEC_FAIL = 0.40
LINK_FAIL = 0.50  # bus bandwidth below 50% of the healthy group's fails
LINK_WARN = 0.90
MAX_SIZE_BYTES = 1 << 30


def sizes_up_to(max_bytes: int) -> tuple[int, ...]:
    """8 B, 64 B, ... (x8) up to ``max_bytes``, which is always the last size."""
    if not 8 <= max_bytes <= MAX_SIZE_BYTES:
        raise InvalidInputError(f"max size must be 8 B to 1 GiB ({MAX_SIZE_BYTES}), got {max_bytes}",
                                field="max_size_bytes")
    out = []
    s = 8
    while s < max_bytes:
        out.append(s)
        s *= 8
    return (*out, max_bytes)


@dataclass(frozen=True)
class VerifyOptions:
    max_size_bytes: int = MAX_SIZE_BYTES
    ops: tuple[str, ...] = COLLECTIVE_OPS
    compute: bool = True
    interconnect: bool = True

    def __post_init__(self) -> None:
        bad = [op for op in self.ops if op not in COLLECTIVE_OPS]
        if bad or not self.ops:
            raise InvalidInputError(f"unknown collective {bad[0] if bad else '(none)'!r}; valid: "
                                    f"{', '.join(COLLECTIVE_OPS)}", field="ops")
        sizes_up_to(self.max_size_bytes)


def active(plane: ControlPlane, ref: str) -> ClusterRuntime:
    """The cluster, refused with a sentence unless it is active."""
    rt = plane.resolve(ref)
    if rt.state != ClusterState.ACTIVE:
        pct = rt.deployment.get("percent")
        more = f" ({pct}% deployed)" if rt.state == ClusterState.DEPLOYING and pct is not None else ""
        raise ConflictError(f"cluster {rt.rec.name} is {rt.state.value}{more}; run this once it is active",
                            field="cluster")
    return rt


def _adjacency(t: Topology) -> list[frozenset[int]]:
    return [frozenset(t.neighbours(c)) for c in range(t.n_chips)]


def inventory(rt: ClusterRuntime) -> Check:
    expected = get_topology(rt.spec.type) if rt.spec.type in TOPOLOGY_NAMES else rt.topology
    found = rt.fabric.topology
    chips = [ChipState(s) for s in rt.fabric.chip_states()]
    links = [LinkState(s) for s in rt.fabric.link_states()]
    by_chip = Counter(s.value for s in chips)
    by_link = Counter(s.value for s in links)
    figures = {"chips_expected": expected.n_chips, "chips_found": found.n_chips, "dims_expected": list(expected.dims),
               "dims_found": list(found.dims), "links_expected": len(expected.links), "links_found": len(found.links),
               "chips_by_state": dict(sorted(by_chip.items())), "links_by_state": dict(sorted(by_link.items())),
               "spares": list(rt.spares)}
    evidence: list[str] = []
    status = [CheckStatus.PASS]
    if found.n_chips != expected.n_chips:
        status.append(CheckStatus.FAIL)
        evidence.append(f"{found.n_chips} chips found, the spec ({rt.spec.type}) has {expected.n_chips}")
    elif found.dims != expected.dims or len(found.links) != len(expected.links):
        status.append(CheckStatus.FAIL)
        evidence.append(f"shape {list(found.dims)} with {len(found.links)} links found, the spec has "
                        f"{list(expected.dims)} with {len(expected.links)}")
    else:
        wrong = [c for c, (a, b) in enumerate(zip(_adjacency(found), _adjacency(expected), strict=True)) if a != b]
        figures["neighbours_mismatched"] = wrong
        if wrong:
            status.append(CheckStatus.FAIL)
            evidence.append(f"chips {wrong[:8]} have other neighbours than the spec's")
        else:
            evidence.append(f"{found.n_chips} chips, shape {list(found.dims)}, every chip's neighbours as the spec")
    failed = [i for i, s in enumerate(chips) if s == ChipState.FAILED]
    out = [i for i, s in enumerate(chips) if s in (ChipState.ISOLATED, ChipState.DEGRADED)]
    down = [i for i, s in enumerate(links) if s == LinkState.DOWN]
    degraded = [i for i, s in enumerate(links) if s == LinkState.DEGRADED]
    if failed or down:
        status.append(CheckStatus.FAIL)
        evidence.append(f"failed chips {failed}, links down {down}: run podfleet diagnose")
    if out or degraded:
        status.append(CheckStatus.WARN)
        evidence.append(f"chips isolated or degraded {out}, links degraded {degraded}")
    return Check("inventory", worst(status), figures, tuple(evidence))


@dataclass(frozen=True)
class ComputeWork:
    """The compute check's probes, taken on the engine thread, run anywhere."""

    spec: ChipSpec | None
    measured: int
    skipped_down: int
    probes: dict[str, Callable[[], list[MatmulRate]]]


def compute_work(rt: ClusterRuntime) -> ComputeWork | Check:
    fab = rt.fabric
    if not isinstance(fab, ComputeProbe):
        return Check("compute", CheckStatus.WARN, {}, ("this fabric cannot time a matmul (no ComputeProbe)",))
    states = [ChipState(s) for s in fab.chip_states()]
    live = [i for i, s in enumerate(states) if s not in (ChipState.FAILED, ChipState.ISOLATED)]
    return ComputeWork(CHIPS.get(fab.topology.chip_type), len(live), len(states) - len(live),
                       {d: fab.matmul_probe(live, d) for d in fab.matmul_dtypes()} if live else {})


def compute(work: ComputeWork) -> Check:
    spec = work.spec
    figures: dict[str, object] = {"chips_measured": work.measured, "chips_skipped_down": work.skipped_down}
    evidence: list[str] = []
    status = [CheckStatus.PASS]
    for dtype, probe in work.probes.items():
        rates = probe()
        if not rates:
            continue
        tf = [r.tflops for r in rates]
        median = statistics.median(tf)
        slow = [r for r in rates if r.tflops < SLOW_WARN * median]
        fig: dict[str, object] = {"median_tflops": round(median, 3), "min_tflops": round(min(tf), 3),
                                  "max_tflops": round(max(tf), 3),
                                  "slow_chips": [{"chip": r.chip, "tflops": round(r.tflops, 3),
                                                  "clock_factor": round(r.clock_factor, 3)} for r in slow],
                                  "wrong": sum(r.wrong for r in rates)}
        if spec is not None and dtype in spec.tflops:
            fig["peak_tflops"] = spec.tflops[dtype]
            fig["fraction_of_peak"] = round(median / spec.tflops[dtype], 4)
            if median < SPEC_FAIL * spec.tflops[dtype]:
                status.append(CheckStatus.FAIL)
                evidence.append(f"{dtype}: median {median:.4g} TFLOP/s is under {SPEC_FAIL:.0%} of the "
                                f"{spec.name} peak {spec.tflops[dtype]:g}")
        figures[dtype] = fig
        for r in slow:
            bad = r.tflops < SLOW_FAIL * median
            status.append(CheckStatus.FAIL if bad else CheckStatus.WARN)
            why = f" (clock at {r.clock_factor:.0%}: throttled)" if r.clock_factor < 0.99 else ""
            evidence.append(f"{dtype}: chip {r.chip} at {r.tflops:.4g} TFLOP/s, {r.tflops / median:.0%} of the "
                            f"pod's median{why}")
        if fig["wrong"]:
            status.append(CheckStatus.FAIL)
            evidence.append(f"{dtype}: {fig['wrong']} result elements wrong")
        if not slow:
            evidence.append(f"{dtype}: {len(rates)} chips within {1 - SLOW_WARN:.0%} of the median "
                            f"{median:.4g} TFLOP/s")
    return Check("compute", worst(status), figures, tuple(evidence))


def _largest(rows: Sequence[CollectiveRow]) -> dict[str, CollectiveRow]:
    out: dict[str, CollectiveRow] = {}
    for r in rows:
        if r.op not in out or r.size_bytes > out[r.op].size_bytes:
            out[r.op] = r
    return out


@dataclass(frozen=True)
class InterconnectWork:
    topology: Topology
    sizes: tuple[int, ...]
    ops: tuple[str, ...]
    groups: dict[str, tuple[tuple[int, ...], Callable[[], list[CollectiveRow]]]]


def interconnect_work(rt: ClusterRuntime, opts: VerifyOptions) -> InterconnectWork | Check:
    fab = rt.fabric
    if not isinstance(fab, CollectiveProbe):
        return Check("interconnect", CheckStatus.WARN, {}, ("this fabric cannot run collectives (no CollectiveProbe)",))
    sizes = sizes_up_to(opts.max_size_bytes)
    groups = {g: (chips, fab.collective_probe(g, opts.ops, sizes)) for g, chips in fab.collective_groups().items()}
    return InterconnectWork(fab.topology, sizes, opts.ops, groups)


def interconnect(work: InterconnectWork) -> Check:
    topo, sizes = work.topology, work.sizes
    table: list[dict[str, object]] = []
    summary: dict[str, dict[str, float]] = {}
    expected: dict[str, dict[str, float]] = {}
    evidence: list[str] = []
    status = [CheckStatus.PASS]
    for group, (chips, probe) in work.groups.items():
        rows = probe()
        table.extend(asdict(r) for r in rows)
        top = _largest(rows)
        summary[group] = {op: round(r.busbw_gbps, 3) for op, r in top.items()}
        missing = [op for op in work.ops if op not in top and not (op == "send-recv" and len(chips) < 2)]
        if missing:
            status.append(CheckStatus.WARN)
            evidence.append(f"{group}: the backend did not run {', '.join(missing)}")
        wrong = sum(r.wrong for r in rows if r.wrong > 0)
        if wrong:
            status.append(CheckStatus.FAIL)
            evidence.append(f"{group}: {wrong} elements came back wrong")
        if topo.chip_type not in CHIPS:
            continue
        # The same group on healthy links, by the link model of this topology: the spec.
        ref = {op: size / t / 1e9 * bus_factor(op, len(chips))
               for op, size, t in collective_times(topo, chips, list(top), [sizes[-1]], HEALTHY)}
        expected[group] = {op: round(bw, 3) for op, bw in ref.items()}
        for op, r in top.items():
            ratio = r.busbw_gbps / ref[op] if ref[op] > 0 else 1.0
            if ratio < LINK_WARN:
                status.append(CheckStatus.FAIL if ratio < LINK_FAIL else CheckStatus.WARN)
                evidence.append(f"{group} {op}: busbw {r.busbw_gbps:.4g} GB/s at {r.size_bytes} B is {ratio:.0%} "
                                f"of the healthy {ref[op]:.4g} GB/s")
    modelled = all(r["wrong"] == -1 for r in table)
    evidence.insert(0, "modelled from the twin's link model (no data moved)" if modelled else
                    f"measured: {len(table)} rows, every result checked")
    per_group = {g: v.get("all-reduce") for g, v in summary.items()}
    evidence.append("all-reduce busbw at the largest size by group: "
                    + ", ".join(f"{g} {v:.4g} GB/s" for g, v in per_group.items() if v is not None))
    figures = {"sizes_bytes": list(sizes), "ops": list(work.ops), "busbw_gbps_at_largest": summary,
               "expected_busbw_gbps": expected, "table": table}
    return Check("interconnect", worst(status), figures, tuple(evidence))


@dataclass(frozen=True)
class Prepared:
    """What the engine thread read; ``finish`` measures and judges on any thread."""

    cluster_id: str
    inventory: Check
    compute: ComputeWork | Check | None
    interconnect: InterconnectWork | Check | None


def prepare(plane: ControlPlane, ref: str, opts: VerifyOptions) -> Prepared:
    """Engine thread: the inventory, and the probes to run (nothing slow happens here)."""
    rt = active(plane, ref)
    return Prepared(rt.id, inventory(rt), compute_work(rt) if opts.compute else None,
                    interconnect_work(rt, opts) if opts.interconnect else None)


def finish(p: Prepared) -> list[Check]:
    """Run the probes (seconds on worker fabrics: call it off the engine) and judge."""
    checks = [p.inventory]
    if p.compute is not None:
        checks.append(p.compute if isinstance(p.compute, Check) else compute(p.compute))
    if p.interconnect is not None:
        checks.append(p.interconnect if isinstance(p.interconnect, Check) else interconnect(p.interconnect))
    return checks


def run_checks(plane: ControlPlane, ref: str, opts: VerifyOptions) -> tuple[str, list[Check]]:
    """Both phases at once (virtual-time callers on the engine thread): (cluster id, checks)."""
    p = prepare(plane, ref, opts)
    return p.cluster_id, finish(p)
