"""One registry of model presets: a trainer preset is the same model to the planner,
the twin and the real PyTorch trainer."""

from __future__ import annotations

import pytest

from podfleet.errors import UnknownNameError
from podfleet.perf.models import MODELS, TRAINER_PRESETS
from podfleet.training.config import PRESET_NAMES
from podfleet.training.model import build_model, get_preset


@pytest.mark.parametrize("name", TRAINER_PRESETS)
def test_trainer_preset_is_the_registered_model(name: str) -> None:
    spec, cfg = MODELS[name], get_preset(name)
    assert (cfg.n_layer, cfg.d_model, cfg.n_head, cfg.vocab_size, cfg.max_seq_len) == (
        spec.layers, spec.hidden, spec.heads, spec.vocab, spec.seq_len)
    # The cost model counts exactly the parameters torch builds.
    assert build_model(name, seed=0).n_params() == spec.params


def test_only_trainer_presets_build_for_real() -> None:
    assert PRESET_NAMES == TRAINER_PRESETS
    assert "llama3-8b" in MODELS
    with pytest.raises(UnknownNameError, match="valid: debug, medium, small, tiny"):
        get_preset("llama3-8b")
