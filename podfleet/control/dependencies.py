"""Job dependencies and job arrays: which queued jobs may enter the scheduler's queue.

A job that waits for others (``after_ok``: each must succeed; ``after_any``: each must
end) or whose array already has ``array_limit`` members queued or running is held here,
out of the scheduler's queue, with its reason (``Dependency: ...``,
``JobArrayTaskLimit: ...``, Slurm's reason codes). A dependency that can never be met
(an after-ok job that failed or was stopped) fails the dependent, with the reason
(``DependencyNeverSatisfied: ...``). Held jobs are looked at again after any job ends.

Arrays (``--array 0-15%4``): one job per index, each with its array id, index and limit
in its spec; the array id (``arr-...``) names them all for describe, stop and wait.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from podfleet.control.jobstatus import Job
from podfleet.control.lifecycle import JobState
from podfleet.control.specs import JobSpec
from podfleet.errors import InfeasibleError, InvalidInputError, NotFoundError
from podfleet.wire import JsonObject

ARRAY_MAX = 1000  # members of one array
_ARRAY_RE = re.compile(r"^(\d+(-\d+)?)(,\d+(-\d+)?)*(%\d+)?$")


def parse_array(text: str) -> tuple[tuple[int, ...], int | None]:
    """``"0-15%4"`` -> indices 0..15, at most 4 at once; ``"1,3,8-9"`` -> 1, 3, 8, 9."""
    t = str(text).strip()
    if not _ARRAY_RE.match(t):
        raise InvalidInputError(f"array {text!r} must be indices and ranges like 0-15, 1,3,8-9, optionally %LIMIT "
                                "(e.g. 0-15%4)", field="array")
    body, _, limit_s = t.partition("%")
    out: set[int] = set()
    for part in body.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise InfeasibleError(f"array range {part!r} runs backwards", field="array")
        if b - a + 1 + len(out) > ARRAY_MAX:
            raise InfeasibleError(f"array {text!r} has more than {ARRAY_MAX} members", field="array")
        out.update(range(a, b + 1))
    limit = int(limit_s) if limit_s else None
    if limit is not None and limit < 1:
        raise InfeasibleError(f"array limit must be >= 1, got %{limit}", field="array")
    return tuple(sorted(out)), limit


class GateKind(StrEnum):
    GO = "go"
    WAIT = "wait"
    NEVER = "never"


@dataclass(frozen=True)
class Gate:
    kind: GateKind
    reason: str = ""


GO = Gate(GateKind.GO)


class JobLike(Protocol):
    """What the gate reads of a job."""

    @property
    def state(self) -> JobState: ...

    @property
    def ended(self) -> bool: ...


def dependency_gate(spec: JobSpec, find: Callable[[str], JobLike | None]) -> Gate:
    """The rule for a job's dependencies (``after_ok``, ``after_any`` in its spec)."""
    waiting: list[str] = []
    for dep in spec.after_ok or ():
        job = find(dep)
        if job is None:
            waiting.append(f"{dep} (not known)")
        elif job.state == JobState.SUCCEEDED:
            continue
        elif job.ended:
            return Gate(GateKind.NEVER, f"DependencyNeverSatisfied: {dep} ended {job.state.value} "
                                        "(after-ok needs it to succeed)")
        else:
            waiting.append(f"{dep} ({job.state.value})")
    for dep in spec.after_any or ():
        job = find(dep)
        if job is None:
            waiting.append(f"{dep} (not known)")
        elif not job.ended:
            waiting.append(f"{dep} ({job.state.value})")
    if waiting:
        kinds = "+".join(k for k, deps in (("after-ok", spec.after_ok), ("after-any", spec.after_any)) if deps)
        return Gate(GateKind.WAIT, f"Dependency: waiting for {', '.join(waiting)} ({kinds})")
    return GO


def array_gate(spec: JobSpec, active: int) -> Gate:
    """The rule for an array member: at most ``array_limit`` members queued or running."""
    limit = spec.array_limit
    if limit is not None and active >= int(limit):
        return Gate(GateKind.WAIT, f"JobArrayTaskLimit: {active} of {limit} members of {spec.array_id} "
                                   "queued or running")
    return GO


def array_state(states: Iterable[JobState]) -> str:
    """One state for an array: RUNNING while any member runs or recovers, PENDING while
    the rest wait, else (all ended) FAILED, STOPPED or SUCCEEDED, worst first."""
    s = list(states)
    if any(x in (JobState.RUNNING, JobState.PLACING, JobState.CHECKPOINTING, JobState.RECOVERING) for x in s):
        return JobState.RUNNING.value
    if any(x == JobState.PENDING for x in s):
        return JobState.PENDING.value
    for end in (JobState.FAILED, JobState.STOPPED):
        if end in s:
            return end.value
    return JobState.SUCCEEDED.value


def array_view(array_id: str, members: Sequence[Job]) -> JsonObject:
    """DescribeJobArray: the array's state and counts from its ``members`` (in order)."""
    if not members:
        raise NotFoundError(f"job array {array_id} not found", field="array")
    counts: dict[str, int] = {}
    for j in members:
        counts[j.state.value] = counts.get(j.state.value, 0) + 1
    return {"id": array_id, "size": len(members), "limit": members[0].spec.array_limit,
            "state": array_state(j.state for j in members), "ended": all(j.ended for j in members),
            "counts": counts, "cluster_id": members[0].cluster_id,
            "jobs": [{"id": j.id, "index": j.spec.array_index, "state": j.state.value,
                      "reason": j.status.reason} for j in members]}


class Holds:
    """The jobs held out of their cluster's scheduler queue (engine thread), and the
    members of each array. Memory only: a reload holds them again from their specs."""

    def __init__(self, find: Callable[[str], JobLike | None]) -> None:
        self.find = find
        self.held: dict[str, str] = {}  # job id -> cluster id
        self.arrays: dict[str, list[str]] = {}  # array id -> member job ids, by index

    @staticmethod
    def gated(spec: JobSpec) -> bool:
        return bool(spec.after_ok or spec.after_any or spec.array_limit)

    def note(self, job_id: str, spec: JobSpec) -> None:
        arr = spec.array_id
        if arr:
            members = self.arrays.setdefault(str(arr), [])
            if job_id not in members:
                members.append(job_id)

    def check(self, job_id: str, spec: JobSpec, active: Callable[[str], bool]) -> Gate:
        """``active(member)``: whether that member is queued in the scheduler or runs."""
        gate = dependency_gate(spec, self.find)
        if gate.kind is not GateKind.GO:
            return gate
        arr = spec.array_id
        if arr and spec.array_limit:
            n = sum(1 for m in self.arrays.get(str(arr), ()) if m != job_id and active(m))
            return array_gate(spec, n)
        return GO

    def hold(self, job_id: str, cluster_id: str) -> None:
        self.held[job_id] = cluster_id

    def release(self, job_id: str) -> None:
        self.held.pop(job_id, None)

    def ordered(self) -> list[tuple[str, str]]:
        return sorted(self.held.items())  # ids are in submit order: array members by index

    def members(self, array_id: str) -> list[str]:
        return list(self.arrays.get(array_id, ()))

    def expand(self, refs: list[str], field: str, resolve_id: Callable[[str], str]) -> list[str]:
        """A submit's dependencies as job ids: an array id stands for all its members, a
        job ref (``resolve_id``: a unique prefix or tail) for its job; unknown ones refused."""
        out: list[str] = []
        for ref in refs:
            if ref.startswith("arr-"):
                members = self.members(ref)
                if not members:
                    raise NotFoundError(f"{field}: job array {ref} not found", field=field)
                out.extend(members)
                continue
            job_id = resolve_id(ref)  # unchanged when nothing matches
            if self.find(job_id) is None:
                raise NotFoundError(f"{field}: job {ref} not found", field=field)
            out.append(job_id)
        return list(dict.fromkeys(out))
