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
    # A gang across pods of a fleet: its pods in rank order and their network blocks.
    pods: tuple[int, ...] = ()
    blocks: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"chips": list(self.chips), "shape": list(self.shape), "reason": self.reason}
        if self.pods:
            out.update(pods=list(self.pods), blocks=list(self.blocks))
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Allocation:
        return cls(tuple(int(c) for c in d["chips"]), tuple(int(k) for k in d["shape"]), str(d.get("reason", "")),
                   tuple(int(p) for p in d.get("pods") or ()), tuple(int(b) for b in d.get("blocks") or ()))
