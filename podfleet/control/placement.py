"""A job's allocation as the control plane records it (rank order, shape, reason).

Placement itself is the cluster's scheduler (``podfleet.scheduler``, driven by
``control.dispatch``), which replaced the first-fit placer that lived here; recovery
paths that move ranks keep using ``Allocation``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Allocation:
    chips: tuple[int, ...]  # rank r runs on chips[r]
    shape: tuple[int, ...]  # block shape, or (n,) for a scattered set
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"chips": list(self.chips), "shape": list(self.shape), "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> Allocation:
        return cls(tuple(d["chips"]), tuple(d["shape"]), str(d.get("reason", "")))  # type: ignore[arg-type]
