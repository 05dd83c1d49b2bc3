"""What a command changes in memory follows its commit.

A command validates and persists inside ``plane.mutation`` (one store transaction with its
audit record) and applies its change to the scheduler and the plane's caches only once
that transaction has committed, so a failed commit leaves memory as it was. The queue,
reservation and priority-class commands all do it through ``mutate_then_apply``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from podfleet.wire import JsonObject

if TYPE_CHECKING:
    from podfleet.control.ports import PlaneCore

K = TypeVar("K")


def mutate_then_apply(
    plane: PlaneCore, op: str, actor: str, target: str,
    do: Callable[[], tuple[JsonObject, str, K]],
    apply: Callable[[K], JsonObject | None],
    *, body: JsonObject | None = None,
    undo: Callable[[K], None] | None = None,
) -> JsonObject:
    """Run ``do`` in ``plane.mutation(op, ...)``: it returns its answer, the audit target and
    what it changed (``K``). After the commit, ``apply(K)``: its answer, when not None,
    replaces ``do``'s. Where the mutation fails after ``do`` ran, ``undo(K)`` puts back what
    ``do`` had changed in memory already (then the error goes on)."""
    kept: list[K] = []

    def fn() -> tuple[JsonObject, str]:
        out, target_id, changed = do()
        kept.append(changed)
        return out, target_id

    try:
        out = plane.mutation(op, actor, target, fn, body=body)
    except Exception:
        if undo is not None:
            for changed in kept:
                undo(changed)
        raise
    for changed in kept:  # only after the commit
        out = apply(changed) or out
    return out
