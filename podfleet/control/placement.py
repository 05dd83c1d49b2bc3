"""A job's allocation as the control plane records it (rank order, shape, reason).

Placement itself is the cluster's scheduler (``podfleet.scheduler``, driven by
``control.dispatch``), which replaced the first-fit placer that lived here; recovery
paths that move ranks keep using ``Allocation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Allocation:
    chips: tuple[int, ...]  # rank r runs on chips[r]
    shape: tuple[int, ...]  # block shape, or (n,) for a scattered set
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"chips": list(self.chips), "shape": list(self.shape), "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Allocation:
        return cls(tuple(int(c) for c in d["chips"]), tuple(int(k) for k in d["shape"]), str(d.get("reason", "")))
