"""InjectFault: which fault kinds take which target, said in the schema as the engine checks it."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field
from pydantic.config import JsonDict, JsonValue

from podfleet.api.schemas.base import RequestBody, old_spellings
from podfleet.control.faults import POD_LOSS
from podfleet.hardware.faults import FAULT_KINDS, LINK_FAULTS

FaultKindName = Literal[FAULT_KINDS]  # type: ignore[valid-type]
_LINK_KINDS: list[JsonValue] = [*sorted(str(k) for k in LINK_FAULTS)]
_CHIP_KINDS: list[JsonValue] = [*sorted(str(k) for k in FAULT_KINDS if k not in LINK_FAULTS)]
_NULL: JsonDict = {"type": "null"}


def _kind_takes(kinds: list[JsonValue], needs: tuple[str, ...], forbids: tuple[str, ...]) -> JsonDict:
    """if/then: faults of ``kinds`` need ``needs`` (not null) and take none of ``forbids``
    (absent or null), as ``control/faults.py`` checks."""
    props: JsonDict = {f: {"not": _NULL} for f in needs}
    props.update({f: _NULL for f in forbids})
    return {"if": {"required": ["kind"], "properties": {"kind": {"enum": kinds}}},
            "then": {"required": list(needs), "properties": props}}


_FAULT_TARGETS: list[JsonValue] = [
    _kind_takes(_LINK_KINDS, ("link",), ("chip", "rank", "job_id", "factor", "pod")),
    _kind_takes(_CHIP_KINDS, ("chip",), ("link", "rank", "job_id", "factor", "pod")),
    _kind_takes(["kill-worker"], ("rank",), ("chip", "link", "factor", "pod")),
    _kind_takes(["slow-worker"], ("rank", "factor"), ("chip", "link", "pod")),
    _kind_takes([POD_LOSS], ("pod",), ("chip", "link", "rank", "job_id", "factor")),
]


class InjectFaultRequest(RequestBody):
    model_config = ConfigDict(json_schema_extra={"allOf": old_spellings(_FAULT_TARGETS)})

    kind: FaultKindName | Literal["kill-worker", "slow-worker", "pod-loss"]
    chip: int | None = Field(None, ge=0, le=65535)
    pod: int | None = Field(None, ge=0, le=1023, description="pod-loss (twin fleet clusters): the pod that loses "
                                                            "power or its switch, every chip at once")
    link: str | None = Field(None, pattern=r"^\d{1,5}-\d{1,5}$", description="A-B: the link between chips A and B")
    rank: int | None = Field(None, ge=0, le=65535, description="kill-worker: the rank whose worker is killed")
    job_id: str | None = Field(None, min_length=1, max_length=64,
                              description="kill-worker, slow-worker: the job (optional when one job runs on the "
                                          "cluster)")
    factor: float | None = Field(None, ge=1.0, le=100.0,
                                 description="slow-worker: the rank computes this many times slower per sample "
                                             "(1 restores it)")
