"""The values operations tools return: acceptance checks and their verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class CheckStatus(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One acceptance check: ``figures`` are numbers measured (or modelled, and then
    ``evidence`` says so); ``evidence`` lists what the verdict rests on, one line each."""

    name: str
    status: CheckStatus
    figures: dict[str, Any] = field(default_factory=dict)
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["evidence"] = list(self.evidence)
        return d


def worst(statuses: Sequence[CheckStatus]) -> CheckStatus:
    if CheckStatus.FAIL in statuses:
        return CheckStatus.FAIL
    return CheckStatus.WARN if CheckStatus.WARN in statuses else CheckStatus.PASS


def verdict(cluster_id: str, checks: Sequence[Check]) -> dict[str, Any]:
    """``VerifyCluster``'s answer: passed unless a check failed (warnings pass)."""
    status = worst([c.status for c in checks])
    return {"cluster_id": cluster_id, "passed": status != CheckStatus.FAIL, "status": status.value,
            "checks": [c.to_dict() for c in checks]}
