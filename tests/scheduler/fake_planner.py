"""A stand-in planner for the co-optimisation hook: prefers 2x2x4 blocks."""

from __future__ import annotations

from podfleet.errors import InfeasibleError


def plan(model: str, chips: int, *, topology: object = None, block_shape: tuple[int, ...] | None = None) -> dict:
    if model == "too-big":
        raise InfeasibleError(f"{model} does not fit {chips} chips")
    return {"step_time_s": 1.0 if block_shape == (2, 2, 4) else 2.0, "shape": block_shape}
