"""Priority classes: CreatePriorityClass, ListPriorityClasses, DeletePriorityClass.

A class names a priority value (0-100, like a bare ``priority``, which stays accepted)
and a preemption policy (Kubernetes' PriorityClass ``preemptionPolicy``): ``lower``
(its jobs may preempt lower-priority jobs) or ``never`` (they wait instead). A job
submitted with ``priority: NAME`` gets the class's value and policy, resolved at submit
and kept in its spec (``priority_class``, ``priority_preemption``), so a later change to
the class does not move jobs already queued.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from podfleet.control.aftercommit import mutate_then_apply
from podfleet.control.specs import MAX_PRIORITY
from podfleet.errors import ConflictError, InfeasibleError, InvalidInputError, NotFoundError
from podfleet.store.records import PriorityClassRecord
from podfleet.wire import JsonObject

if TYPE_CHECKING:
    from podfleet.control.ports import PlaneCore

PREEMPTION = ("lower", "never")
_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


class PriorityClasses:
    def __init__(self, plane: PlaneCore) -> None:
        self.plane = plane
        self.classes: dict[str, PriorityClassRecord] = {}

    def load(self) -> None:
        self.classes = {r.name: r for r in self.plane.store.list_priority_classes()}

    def create(self, body: JsonObject, *, actor: str = "system") -> JsonObject:
        def do() -> tuple[JsonObject, str, PriorityClassRecord]:
            rec = self._parse(body)
            if rec.name in self.classes:
                raise ConflictError(f"priority class {rec.name!r} already exists", field="name")
            self.plane.store.save_priority_class(rec)
            return self._view(rec), rec.name, rec

        def keep(rec: PriorityClassRecord) -> None:
            self.classes[rec.name] = rec

        return mutate_then_apply(self.plane, "CreatePriorityClass", actor, str(body.get("name", "")), do, keep,
                                 body=body)

    def delete(self, name: str, *, actor: str = "system") -> JsonObject:
        def do() -> tuple[JsonObject, str]:
            rec = self.classes.get(name)
            if rec is None:
                raise NotFoundError(f"priority class {name!r} not found", field="name")
            self.plane.store.delete_priority_class(name)
            return {**self._view(rec), "state": "deleted"}, name

        out = self.plane.mutation("DeletePriorityClass", actor, name, do)
        self.classes.pop(name, None)
        return out

    def list_all(self) -> list[JsonObject]:
        return [self._view(r) for _, r in sorted(self.classes.items())]

    def resolve(self, body: JsonObject) -> JsonObject:
        """A submit body with ``priority: NAME`` turned into the class's value and policy."""
        p = body.get("priority")
        if not isinstance(p, str):
            return body
        if p.isdigit():
            return {**body, "priority": int(p)}
        rec = self.classes.get(p)
        if rec is None:
            valid = ", ".join(sorted(self.classes)) or "none defined"
            raise InfeasibleError(f"unknown priority class {p!r}; valid: {valid}", field="priority",
                                  allowed=sorted(self.classes))
        return {**body, "priority": rec.value, "priority_class": rec.name, "priority_preemption": rec.preemption}

    # --- helpers ------------------------------------------------------------------------
    def _parse(self, body: JsonObject) -> PriorityClassRecord:
        extra = sorted(set(body) - {"name", "value", "preemption"})
        if extra:
            raise InvalidInputError(f"unknown priority class field {extra[0]!r} (known: name, value, preemption)",
                                    field=extra[0])
        name, value, pre = body.get("name"), body.get("value"), body.get("preemption", "lower")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidInputError(f"priority class name {name!r} must start with a-z and be 1-63 chars of a-z, "
                                    "0-9 and '-'", field="name")
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_PRIORITY:
            raise InvalidInputError(f"value must be an integer 0-{MAX_PRIORITY}, got {value!r}", field="value",
                                    allowed=f"0-{MAX_PRIORITY}")
        if pre not in PREEMPTION:
            raise InvalidInputError(f"preemption {pre!r} is not one of {', '.join(PREEMPTION)}", field="preemption",
                                    allowed=list(PREEMPTION))
        return PriorityClassRecord(name, value, pre, self.plane.now())

    @staticmethod
    def _view(rec: PriorityClassRecord) -> JsonObject:
        return {"name": rec.name, "value": rec.value, "preemption": rec.preemption, "created_at": rec.created_at}
