"""Automatic parallelism planner: how to lay out a model on N chips, and how fast it trains.

Public entry points (pure: no I/O, no clock):

- ``plan(model: str | ModelSpec, chips: int, *, topology: str | Topology | None = None,
  chip_type: str | None = None, seq_len=None, global_batch=None, tp=None, pp=None,
  dp=None, micro_batch=None, recompute=None, block_shape=None, zero_stage=None,
  interleave=None, sequence_parallel=None, dtype="bf16", top=10, exhaustive=False)
  -> PlanResult``. ``topology`` defaults to ``trn2-ultraserver`` (or the chip type's
  usual system: ``dgx-a100`` for ``a100``...); a bare name smaller than ``chips``
  becomes a fleet (``trn2-ultraserver:4``). Any of tp/pp/dp/micro_batch/recompute/
  zero_stage/interleave that is given is fixed; the rest is searched. Bad input raises
  ``InvalidInputError``/``UnknownNameError`` (e.g. ``tp*pp*dp (4*2*2 = 16) != chips
  (64)``); a model that fits no plan raises ``InfeasibleError`` naming the numbers.
- ``PlanResult``: ``.best`` (a ``Candidate``: ``.plan`` a validated ``Plan``,
  ``.estimate`` a ``StepEstimate`` with step_time_s, tokens_per_s, tflops_per_chip,
  mfu, hfu, memory, fits), ``.candidates`` (fitting plans, fastest first),
  ``.rejected`` (``Rejected(plan, reason)``), ``.to_dict()`` (the CLI/API payload:
  the best plan's fields at top level plus candidates and rejected).
- ``MODELS`` / ``get_model(name)`` / ``custom_model(layers, hidden, heads, vocab)``:
  the one registry of presets (``debug``, ``llama3-8b``, ``llama3-70b``,
  ``llama3-405b``, ``gpt3-175b`` and the ``megatron-*`` validation models).
- For a step time without searching, ``podfleet.perf.step_time_s(model, chips,
  topology, plan=..., slow_chip_factor=..., down_links=...)``.
"""

from __future__ import annotations

from podfleet.perf.flops import Recompute
from podfleet.perf.models import MODELS, ModelSpec, custom_model, get_model
from podfleet.perf.plan import Plan
from podfleet.planner.result import Candidate, PlanResult, Rejected
from podfleet.planner.search import plan

__all__ = [
    "MODELS", "Candidate", "ModelSpec", "Plan", "PlanResult", "Recompute", "Rejected",
    "custom_model", "get_model", "plan",
]
