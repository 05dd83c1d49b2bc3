"""Model presets a job may name: the one registry (``podfleet.perf.models``), or custom dims."""

from __future__ import annotations

from podfleet.errors import InfeasibleError, InvalidInputError, PodfleetError, UnknownNameError
from podfleet.perf.models import MODELS, ModelSpec, custom_model, get_model
from podfleet.wire import JsonObject

MODEL_DIM_FIELDS = ("layers", "hidden", "heads", "vocab", "seq_len")
SCRIPT_LABEL = "script"


def model_names() -> list[str]:
    return sorted(MODELS)


def resolve_model(name: str, dims: JsonObject | None) -> ModelSpec:
    """The model a job trains: a preset, or ``custom`` with ``model_dims``."""
    if name == "custom" or (dims and name not in MODELS):
        if not dims:
            raise InvalidInputError("model 'custom' needs model_dims", field="model_dims")
        missing = [f for f in MODEL_DIM_FIELDS[:4] if f not in dims]
        if missing:
            raise InvalidInputError(f"model_dims is missing {', '.join(missing)}", field="model_dims",
                                    allowed=list(MODEL_DIM_FIELDS))
        try:
            return custom_model(int(dims["layers"]), int(dims["hidden"]), int(dims["heads"]),
                                int(dims["vocab"]), seq_len=int(dims.get("seq_len", 2048)))
        except PodfleetError as exc:
            # An impossible combination (hidden not divisible by heads) stays a 422.
            kind = InfeasibleError if isinstance(exc, InfeasibleError) else InvalidInputError
            raise kind(f"model_dims: {exc.message}", field="model_dims") from None
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"model_dims: {exc}", field="model_dims") from None
    if name == SCRIPT_LABEL:  # JobSpec.parse's label for an entrypoint job without a model
        raise InvalidInputError("an --entrypoint script runs on a local, ray or neuron cluster; this cluster is "
                                "the twin (fabric sim), which trains model presets: give --model NAME",
                                field="entrypoint", allowed=[*model_names(), "custom"])
    if name not in MODELS:
        raise UnknownNameError("model", name, [*model_names(), "custom"], field="model")
    return get_model(name)


def check_model(name: str, dims: JsonObject | None) -> ModelSpec:
    return resolve_model(name, dims)
