"""FLOPs and parameter counts against the papers' closed forms and hand-computed cases."""

from __future__ import annotations

import pytest

from podfleet.perf import flops
from podfleet.perf.flops import Recompute
from podfleet.perf.models import MODELS, ModelSpec, get_model

GPT = [m for m in MODELS.values() if m.name.startswith("megatron-") or m.name == "gpt3-175b"]


def test_tiny_model_by_hand() -> None:
    # l=1, h=4, a=1, V=8, s=2: per token a layer does 24*h^2 = 384 matmul FLOPs and
    # 4*s*h = 32 attention FLOPs; logits 2*h*V = 64. Forward+backward = 3x, 2 tokens.
    m = ModelSpec("t", layers=1, hidden=4, heads=1, vocab=8, seq_len=2)
    assert flops.model_flops_per_step(m, 1) == 3 * 2 * (384 + 32 + 64) == 2880
    # Full recompute repeats the layer forward once: + 2 tokens * (384 + 32).
    assert flops.hardware_flops_per_step(m, 1, "full") == 2880 + 2 * 416
    assert flops.hardware_flops_per_step(m, 1, "selective") == 2880 + 2 * 3 * 32
    assert flops.hardware_flops_per_step(m, 1, "none") == 2880


@pytest.mark.parametrize("m", GPT, ids=lambda m: m.name)
def test_megatron_formulas(m: ModelSpec) -> None:
    B, s, l, h, V = 64, m.seq_len, m.layers, m.hidden, m.vocab  # noqa: E741 (the papers' names)
    model = 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * h * l))
    assert flops.model_flops_per_step(m, B) == pytest.approx(model, rel=1e-12)
    selective = 72 * B * s * l * h**2 * (1 + s / (3 * h) + V / (12 * h * l))
    assert flops.hardware_flops_per_step(m, B, Recompute.selective) == pytest.approx(selective, rel=1e-12)
    full = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))  # Narayanan Eq. 3
    assert flops.hardware_flops_per_step(m, B, Recompute.full) == pytest.approx(full, rel=1e-12)
    params = 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert m.params == pytest.approx(params + 2 * h, rel=1e-12)  # + the final LayerNorm


@pytest.mark.parametrize(
    ("model", "gpus", "batch", "step_s", "mfu", "hfu"),
    [  # Korthikanti et al. Table 5: selective + sequence parallel
        ("megatron-22b", 8, 4, 1.10, 0.415, 0.437),
        ("megatron-175b", 64, 64, 13.75, 0.514, 0.528),
        ("megatron-530b", 280, 280, 37.83, 0.560, 0.570),
        ("megatron-1t", 512, 512, 71.49, 0.563, 0.570),
    ],
)
def test_reported_mfu_and_hfu(model: str, gpus: int, batch: int, step_s: float, mfu: float, hfu: float) -> None:
    m = get_model(model)
    peak = 312e12
    assert flops.mfu(flops.model_flops_per_step(m, batch), step_s, gpus, peak) == pytest.approx(mfu, abs=0.006)
    hw = flops.hardware_flops_per_step(m, batch, "selective")
    assert flops.mfu(hw, step_s, gpus, peak) == pytest.approx(hfu, abs=0.006)


def test_llama_params_match_published_sizes() -> None:
    assert get_model("llama3-8b").params / 1e9 == pytest.approx(8.03, abs=0.02)
    assert get_model("llama3-70b").params / 1e9 == pytest.approx(70.6, abs=0.2)
    assert get_model("llama3-405b").params / 1e9 == pytest.approx(405.9, abs=0.5)
