"""Training jobs on the twin: the default step-time model and the loss curve.

Default step time (``default_step_time``): the performance model (``podfleet.perf``,
see ``perfstep``) for any model it knows, with throttling and link health applied.
For a model it cannot describe (or when ``options["params"]`` forces it), the simple
model documented in docs/twin.md:

    compute_s = 6 * params * tokens_per_step / (chips * peak_bf16 * mfu) / slowest_clock
    comm_s    = 2 * (n - 1) / n * grad_bytes / ring_bw        (ring all-reduce of grads)
    step_s    = compute_s + (1 - overlap) * comm_s

``slowest_clock`` is the lowest clock factor among the job's chips (a throttled chip
holds back the whole gang). ``ring_bw`` is twice the slowest live link among the
job's chips (a bidirectional ring), halved again when any of those links is down (the
detour shares a neighbour's link), and capped by the fleet network's per-chip
bandwidth when the job spans groups. ``params`` comes from ``options["params"]`` or
the model name (``llama3-70b`` -> 70e9); ``tokens_per_step`` from
``options["tokens_per_step"]`` (default 4 Mi tokens). A pluggable
``step_time_fn(spec, fabric) -> seconds`` replaces this model (the perf model).

Rebalancing (``Rebalanceable``, see ``jobs``): with a work split, rank i computes
``w_i = share_i / mean(share)`` of an even share at its own clock, so the compute
phase is ``compute_s * slowest_clock * max_i(w_i / clock_i)`` (``rebalanced_compute``):
the slowest rank's share over its speed sets the step. With a ring order, the exposed
communication is stretched by the slowest live link *on the ring* instead of among all
the job's chips.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from podfleet.errors import InvalidInputError
from podfleet.fabric.base import RunState, WorkerGroupSpec
from podfleet.fabric.sim.context import StepModel

if TYPE_CHECKING:
    import simpy


StepTimeFn = Callable[[WorkerGroupSpec, StepModel], float]

DEFAULT_TOKENS_PER_STEP = 4 * 1024 * 1024
DEFAULT_MFU = 0.45
DEFAULT_OVERLAP = 0.8
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([bm])\b", re.IGNORECASE)


# The run states a twin's job passes through (``RunState`` is every fabric's vocabulary):
# its statistics count jobs by these.
SIM_RUN_STATES = (RunState.RUNNING, RunState.PAUSED, RunState.STOPPED, RunState.FINISHED)


def model_params(spec: WorkerGroupSpec) -> float:
    """Parameter count from options or the model name; ``debug`` models are 100M."""
    if "params" in spec.options:
        return float(spec.options["params"])
    m = _SIZE.search(spec.model.replace("-", " "))
    if m:
        return float(m.group(1)) * (1e9 if m.group(2).lower() == "b" else 1e6)
    return 1e8


def step_breakdown(spec: WorkerGroupSpec, fabric: StepModel) -> tuple[float, float, float]:
    """(compute_s, exposed communication s, step_s): the performance model (``perfstep``)
    for models it knows, else the simple model below."""
    from podfleet.fabric.sim.perfstep import (
        perf_breakdown,  # perf imports stay off the hot import path
    )

    if "params" not in spec.options:
        got = perf_breakdown(spec, fabric)
        if got is not None:
            return got
    return simple_breakdown(spec, fabric)


def tokens_per_step(spec: WorkerGroupSpec, fabric: StepModel) -> float:
    """Global batch x sequence length of the performance model's plan, else the option."""
    from podfleet.fabric.sim.perfstep import healthy_step

    if "tokens_per_step" in spec.options or "params" in spec.options:
        return float(spec.options.get("tokens_per_step", DEFAULT_TOKENS_PER_STEP))
    h = healthy_step(spec, fabric)
    return h.tokens_per_step if h is not None else float(DEFAULT_TOKENS_PER_STEP)


def simple_breakdown(spec: WorkerGroupSpec, fabric: StepModel) -> tuple[float, float, float]:
    """(compute_s, exposed communication s, step_s) of the simple model."""
    n = max(1, len(spec.chips))
    params = model_params(spec)
    tokens = float(spec.options.get("tokens_per_step", DEFAULT_TOKENS_PER_STEP))
    mfu = float(spec.options.get("mfu", DEFAULT_MFU))
    overlap = float(spec.options.get("overlap", DEFAULT_OVERLAP))
    peak = fabric.spec.peak_flops("bf16")
    clock = fabric.gang_clock_factor(spec.chips)
    compute_s = 6.0 * params * tokens / (n * peak * mfu) / clock
    if n == 1:
        return compute_s, 0.0, compute_s
    ring_bw = 2.0 * fabric.job_link_bw(spec.chips)
    exposed_s = (1.0 - overlap) * 2.0 * (n - 1) / n * 2.0 * params / ring_bw
    return compute_s, exposed_s, compute_s + exposed_s


def default_step_time(spec: WorkerGroupSpec, fabric: StepModel) -> float:
    return step_breakdown(spec, fabric)[2]


def check_shares(shares: Sequence[int], n_ranks: int) -> np.ndarray:
    """Per-rank work shares as an int array: one per rank, each >= 1."""
    arr = np.asarray(list(shares), dtype=np.int64)
    if arr.ndim != 1 or arr.size != n_ranks or (arr < 1).any():
        raise InvalidInputError(f"need {n_ranks} shares, each >= 1; got {list(shares)[:8]}", field="shares")
    return arr


def rebalanced_compute(compute_s: float, gang_clock: float, clocks: np.ndarray,
                       shares: np.ndarray | None) -> tuple[float, np.ndarray]:
    """(compute phase s, per-rank busy s) of a split job (see the module docstring).

    ``compute_s`` is the even split's compute at the slowest clock ``gang_clock``;
    ``clocks`` the ranks' clock factors. Without shares every rank has an even share."""
    base = compute_s * gang_clock  # the even share at full clock
    w = np.ones(len(clocks)) if shares is None else shares / shares.mean()
    busy = base * w / np.maximum(clocks, 1e-6)
    return float(busy.max()), busy


def loss_at(step: int, noise: float, *, floor: float = 1.7, scale: float = 9.0, alpha: float = 0.32) -> float:
    """A plausible pre-training curve: power-law decay toward ``floor``, noisy."""
    return floor + scale * (step + 1) ** (-alpha) * (1.0 + 0.02 * noise)


@dataclass
class JobRun:
    """Mutable run state of one job on the twin (the fabric's own record)."""

    spec: WorkerGroupSpec
    state: RunState = RunState.RUNNING
    step: int = 0
    loss: float = math.nan
    step_time_s: float = math.nan
    tokens_per_s: float = 0.0
    last_checkpoint: int = 0
    last_progress_step: int = 0
    last_progress_t: float = -math.inf
    pause_reason: str | None = None
    started_t: float = 0.0
    process: simpy.Process | None = None
    resume_evt: simpy.Event | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    shares: np.ndarray | None = None  # per-rank work split (Rebalanceable); None: even
    ring: tuple[int, ...] = ()  # gradient ring order over the chips (Rebalanceable); (): any
    log: deque[str] = field(default_factory=lambda: deque(maxlen=400))  # job events, oldest first

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def chips(self) -> tuple[int, ...]:
        return self.spec.chips

    def summary(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state.value,
            "step": self.step,
            "steps": self.spec.steps,
            "loss": None if math.isnan(self.loss) else round(self.loss, 5),
            "step_time_s": None if math.isnan(self.step_time_s) else self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "last_checkpoint": self.last_checkpoint,
            "chips": list(self.chips),
            "pause_reason": self.pause_reason,
        }
