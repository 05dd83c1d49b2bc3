"""Search tensor/pipeline/data parallel degrees, micro-batch size and count,
interleaving, recomputation and ZeRO stage for a model on N chips of a topology.

The search enumerates every (tp, pp, dp) with tp | heads, pp | layers and
dp | global batch, every micro-batch up to ``MAX_MICRO_BATCH`` dividing the
per-replica batch (and the powers of two above it that divide it: a stack with a fixed
cost per micro-batch runs a small model fastest in a few large ones) and every
interleaving v | layers/pp. For each of those and each
ZeRO stage it tries recomputation from none to full and keeps the first that fits:
recomputation only ever adds time (it adds m*r to the pipeline and can hide at most r
of gradient reduction) while saving memory, so the first fitting mode is the fastest
one. Memory is checked before any time is estimated, and a plan whose compute alone
(a floor on its step time) is slower than the best plan so far is skipped.
``exhaustive=True`` turns both shortcuts off; a test checks that the best plans agree.
``candidates`` lists the fitting plans that were estimated, fastest first.
"""

from __future__ import annotations

from dataclasses import dataclass

from podfleet.errors import InfeasibleError, InvalidInputError, UnknownNameError
from podfleet.hardware.specs import ChipSpec, GiB, get_chip
from podfleet.hardware.topology import Topology
from podfleet.perf import default_global_batch
from podfleet.perf.compression import NONE, GradCompression, parse_grad_compression
from podfleet.perf.compute import layer_times
from podfleet.perf.efficiency import efficiency_for
from podfleet.perf.flops import Recompute
from podfleet.perf.layout import job_topology, resolve_topology
from podfleet.perf.memory import memory_per_chip
from podfleet.perf.models import ModelSpec, get_model
from podfleet.perf.plan import Plan
from podfleet.perf.step import estimate
from podfleet.planner.result import Candidate, PlanResult, Rejected

MAX_MICRO_BATCH = 16
RECOMPUTE_ORDER = (Recompute.none, Recompute.selective, Recompute.full)
DEFAULT_TOPOLOGY = {
    "trn2": "trn2-ultraserver",
    "trn1": "trn1-node",
    "a100": "dgx-a100",
    "h100": "dgx-h100",
    "h200": "hgx-h200",
}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class _Fixed:
    tp: int | None
    pp: int | None
    dp: int | None
    micro_batch: int | None
    recompute: Recompute | None
    zero_stage: int | None
    interleave: int | None
    sequence_parallel: bool | None


def _check_explicit(chips: int, fx: _Fixed) -> None:
    given = {k: v for k, v in (("tp", fx.tp), ("pp", fx.pp), ("dp", fx.dp)) if v is not None}
    for name, v in given.items():
        if not isinstance(v, int) or v < 1:
            raise InvalidInputError(f"{name} must be a positive integer, got {v!r}", field=name)
    prod = 1
    for v in given.values():
        prod *= v
    if len(given) == 3 and prod != chips:
        raise InfeasibleError(
            f"tp*pp*dp ({fx.tp}*{fx.pp}*{fx.dp} = {prod}) != chips ({chips})",
            field="chips",
        )
    if chips % prod:
        names = "*".join(given)
        raise InfeasibleError(f"{names} ({prod}) does not divide chips ({chips})", field="chips")


def _resolve(
    model: str | ModelSpec, chips: int, topology: str | Topology | None, chip_type: str | None,
    seq_len: int | None,
) -> tuple[ModelSpec, Topology]:
    spec = get_model(model) if isinstance(model, str) else model
    if seq_len is not None:
        if not isinstance(seq_len, int) or seq_len < 1:
            raise InvalidInputError(f"seq_len must be a positive integer, got {seq_len!r}", field="seq_len")
        spec = spec.with_seq_len(seq_len)
    if not isinstance(chips, int) or chips < 1:
        raise InvalidInputError(f"chips must be a positive integer, got {chips!r}", field="chips")
    if chip_type is not None:
        get_chip(chip_type)
        if chip_type not in DEFAULT_TOPOLOGY:
            raise UnknownNameError("chip type", chip_type, DEFAULT_TOPOLOGY, field="chip_type")
    if topology is None:
        topology = DEFAULT_TOPOLOGY[chip_type or "trn2"]
    parent = resolve_topology(topology, chips)
    if chip_type is not None and parent.chip_type != chip_type:
        raise InfeasibleError(
            f"chip type {chip_type!r} does not match topology {parent.name} ({parent.chip_type})",
            field="chip_type",
        )
    return spec, parent


def plan(
    model: str | ModelSpec,
    chips: int,
    *,
    topology: str | Topology | None = None,
    chip_type: str | None = None,
    seq_len: int | None = None,
    global_batch: int | None = None,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    micro_batch: int | None = None,
    recompute: Recompute | str | None = None,
    block_shape: tuple[int, ...] | None = None,
    zero_stage: int | None = None,
    interleave: int | None = None,
    sequence_parallel: bool | None = None,
    dtype: str = "bf16",
    top: int = 10,
    exhaustive: bool = False,
    grad_compression: str | GradCompression | None = None,
) -> PlanResult:
    """The fastest fitting plans. ``grad_compression`` (``perf.compression``): estimate
    every candidate with that gradient compression; the result then also holds the best
    plan's uncompressed estimate, so what compression changes is visible."""
    comp = parse_grad_compression(grad_compression)
    spec, parent = _resolve(model, chips, topology, chip_type, seq_len)
    topo = job_topology(parent, chips, tuple(block_shape) if block_shape else None)
    rc = Recompute(recompute) if recompute is not None else None
    fx = _Fixed(tp, pp, dp, micro_batch, rc, zero_stage, interleave, sequence_parallel)
    _check_explicit(chips, fx)
    gb = global_batch if global_batch is not None else default_global_batch(spec, chips)
    if not isinstance(gb, int) or gb < 1:
        raise InvalidInputError(f"global_batch must be a positive integer, got {gb!r}", field="global_batch")
    chip = get_chip(topo.chip_type)
    candidates: list[Candidate] = []
    rejected: list[Rejected] = []
    evaluated = 0
    incumbent = [float("inf")]  # best step time found so far, for pruning
    for t in [tp] if tp else _divisors(chips):
        if spec.heads % t:
            if tp:
                Plan(t, 1, 1, 1, 1).check(spec)  # raises with the numbers
            continue
        for p in [pp] if pp else _divisors(chips // t):
            if chips % (t * p):
                continue
            d = chips // (t * p)
            if dp and d != dp:
                continue
            base = {"tp": t, "pp": p, "dp": d}
            if spec.layers % p:
                if pp:
                    Plan(t, p, d, 1, 1).check(spec)
                continue
            if gb % d:
                rejected.append(Rejected(base, f"global batch ({gb}) is not divisible by dp ({d})"))
                continue
            found, n_eval, why, mem = _search_tpd(
                spec, topo, chip, t, p, d, gb, fx, dtype, exhaustive, incumbent, comp
            )
            evaluated += n_eval
            candidates.extend(found)
            if not found:
                rejected.append(Rejected(base, why, mem))
    if not candidates:
        raise InfeasibleError(_no_fit_message(spec, chips, topo, gb, rejected), field="chips")
    candidates.sort(key=Candidate.sort_key)
    best = candidates[0]
    plain = (estimate(spec, best.plan, topo, chip=chip, dtype=dtype, memory=best.estimate.memory)
             if comp != NONE else None)
    return PlanResult(
        model=spec.name, chips=chips, topology=parent.name, chip_type=topo.chip_type,
        seq_len=spec.seq_len, global_batch=gb, candidates=tuple(candidates[:top] if top else candidates),
        rejected=tuple(rejected), evaluated=evaluated, grad_compression=comp.name, uncompressed=plain,
    )


def _search_tpd(
    spec: ModelSpec, topo: Topology, chip: ChipSpec, t: int, p: int, d: int, gb: int, fx: _Fixed,
    dtype: str, exhaustive: bool, incumbent: list[float], comp: GradCompression = NONE,
) -> tuple[list[Candidate], int, str, float | None]:
    per_replica = gb // d
    if fx.micro_batch:
        if per_replica % fx.micro_batch:
            why = (
                f"per-replica batch ({gb}/{d} = {per_replica}) is not divisible by "
                f"micro_batch ({fx.micro_batch})"
            )
            return [], 0, why, None
        mbs = [fx.micro_batch]
    else:
        mbs = [b for b in _divisors(per_replica) if b <= MAX_MICRO_BATCH]
        # And the powers of two above: where the stack pays a fixed cost per micro-batch
        # (Neuron), a small model runs fastest in few large ones.
        big = 2 * MAX_MICRO_BATCH
        while big <= per_replica and per_replica % big == 0:
            mbs.append(big)
            big *= 2
    per_stage = spec.layers // p
    if fx.interleave:
        if per_stage % fx.interleave or (fx.interleave > 1 and p == 1):
            why = f"interleave ({fx.interleave}) must divide layers per stage ({per_stage}) with pp > 1"
            return [], 0, why, None
        vs = [fx.interleave]
    else:
        vs = [v for v in _divisors(per_stage) if v == 1 or p > 1]
    zeros = [fx.zero_stage] if fx.zero_stage is not None else ([0, 1, 2, 3] if d > 1 else [0])
    rcs = [fx.recompute] if fx.recompute else list(RECOMPUTE_ORDER)
    sp = fx.sequence_parallel if fx.sequence_parallel is not None else t > 1
    out: list[Candidate] = []
    n_eval = 0
    min_mem = None
    for b in mbs:
        m = per_replica // b
        if not exhaustive and min_mem is not None and not out and b > min_mem[1].micro_batch:
            break  # nothing fitted at a smaller micro-batch; activations only grow with it
        for v in vs:
            if v > 1 and m % p:
                continue
            # ZeRO stages leanest first: if no recompute mode fits at stage z, none fits
            # at a lower stage (more memory), so stop there.
            for z in sorted(zeros, reverse=True):
                fitted = False
                for rc in rcs:
                    plan = Plan(t, p, d, b, m, rc, z, v, sp)
                    memory = memory_per_chip(spec, plan)
                    mem = memory.total_bytes
                    if mem > chip.hbm_bytes:
                        if min_mem is None or mem < min_mem[0]:
                            min_mem = (mem, plan)
                        continue
                    fitted = True
                    if not exhaustive and _lower_bound_s(spec, plan, chip, dtype) > incumbent[0]:
                        break  # slower than the best so far whatever its communication
                    n_eval += 1
                    est = estimate(spec, plan, topo, chip=chip, dtype=dtype, memory=memory, compression=comp)
                    incumbent[0] = min(incumbent[0], est.step_time_s)
                    out.append(Candidate(plan, est))
                    if not exhaustive:
                        break
                if not fitted and not exhaustive:
                    break
    if out:
        return out, n_eval, "", None
    if min_mem is None:
        return [], n_eval, "no micro-batch / interleaving combination is valid for this batch", None
    mem, best = min_mem
    why = (
        f"needs {mem / GiB:.1f} GiB per chip > HBM {chip.hbm_bytes / GiB:.1f} GiB even at "
        f"micro_batch {best.micro_batch}, recompute {best.recompute}, zero_stage {best.zero_stage}"
    )
    return [], n_eval, why, mem


def _lower_bound_s(spec: ModelSpec, plan: Plan, chip: ChipSpec, dtype: str) -> float:
    """Compute time alone (no communication, bubble or logits): a floor on the step."""
    sp = plan.sequence_parallel and plan.tp > 1
    eff = efficiency_for(chip.name)
    lt = layer_times(spec, plan.tp, sp, plan.micro_batch, chip, eff, dtype)
    per_mb = lt.fwd_s + lt.bwd_s
    if plan.recompute == Recompute.full:
        per_mb += lt.fwd_s
    elif plan.recompute == Recompute.selective and not spec.flash_attention:
        per_mb += lt.attn_core_fwd_s
    # The stack's per-micro-batch cost is paid whatever the communication.
    return plan.num_micro_batches * (spec.layers / plan.pp * per_mb + plan.interleave * eff.microbatch_s)


def _no_fit_message(spec: ModelSpec, chips: int, topo: Topology, gb: int, rejected: list[Rejected]) -> str:
    chip = get_chip(topo.chip_type)
    states = spec.params * 16 / GiB
    total = chips * chip.hbm_bytes / GiB
    sized = [r for r in rejected if r.memory_per_chip_bytes is not None]
    if sized:
        r = min(sized, key=lambda r: r.memory_per_chip_bytes or 0.0)
        p = r.plan
        reasons = f"the leanest plan (tp={p['tp']} pp={p['pp']} dp={p['dp']}) {r.reason}"
    else:
        reasons = "; ".join(sorted({r.reason for r in rejected})[:2]) or "no valid tp/pp/dp"
    return (
        f"{spec.name} ({spec.params / 1e9:.1f}B params, {states:,.0f} GiB of weights, grads and "
        f"Adam state) does not fit on {chips} {chip.name} chips ({total:,.0f} GiB HBM) with "
        f"global batch {gb}: {reasons}"
    )
