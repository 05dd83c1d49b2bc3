"""A job's allocation as the control plane records it (rank order, shape, reason).

Placement itself is the cluster's scheduler (``podfleet.scheduler``, driven by
``control.dispatch``), which replaced the first-fit placer that lived here; recovery
paths that move ranks keep using ``Allocation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podfleet.wire import JsonObject


@dataclass(frozen=True)
class Allocation:
    """Where a job runs (DescribeTrainingJob ``allocation``): its chips in rank order, the
    block's shape and why; a scheduler placement adds its pod, offset, cores and score.
    A waiting job's allocation has no chips and says what it waits for."""

    chips: tuple[int, ...]  # rank r runs on chips[r]
    shape: tuple[int, ...]  # block shape, or (n,) for a scattered set
    reason: str
    pod: int | None = None
    offset: tuple[int, ...] | None = None
    cores: tuple[tuple[int, ...], ...] | None = None
    score: float | None = None
    # A gang across pods of a fleet: its pods in rank order and their network blocks.
    pods: tuple[int, ...] = ()
    blocks: tuple[int, ...] = ()

    @classmethod
    def waiting(cls, reason: str) -> Allocation:
        return cls((), (), reason)

    def to_dict(self) -> JsonObject:
        d: JsonObject = {}
        if self.pod is not None:
            d["pod"] = self.pod
        d.update(chips=list(self.chips), shape=list(self.shape))
        if self.offset is not None:
            d["offset"] = list(self.offset)
        if self.cores is not None:
            d["cores"] = [list(c) for c in self.cores]
        if self.score is not None:
            d["score"] = self.score
        d["reason"] = self.reason
        if self.pods:
            d.update(pods=list(self.pods), blocks=list(self.blocks))
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Allocation:
        offset, cores, score = d.get("offset"), d.get("cores"), d.get("score")
        return cls(tuple(int(c) for c in d.get("chips") or ()), tuple(int(k) for k in d.get("shape") or ()),
                   str(d.get("reason", "")), None if d.get("pod") is None else int(d["pod"]),
                   None if offset is None else tuple(int(x) for x in offset),
                   None if cores is None else tuple(tuple(int(x) for x in c) for c in cores),
                   None if score is None else float(score),
                   tuple(int(p) for p in d.get("pods") or ()), tuple(int(b) for b in d.get("blocks") or ()))
