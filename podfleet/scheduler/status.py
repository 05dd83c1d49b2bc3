"""The status value every extension-point hook returns (never an exception).

What the framework and queue do with each code:

==============================  ==========================================================
``SUCCESS``                     continue with the next plugin / extension point
``UNSCHEDULABLE``               not now: the job stays queued, ``reason`` is shown as its
                                pending reason, and preemption (PostFilter) may run
``UNSCHEDULABLE_AND_UNRESOLVABLE``  never on this cluster as configured: rejected at submit,
                                no preemption is tried
``WAIT``                        Permit only: the placement is held (chips stay reserved)
                                until ``Scheduler.victims_checkpointed`` completes it
``SKIP``                        the plugin does not apply to this job; it is left out of
                                the remaining points of this cycle (e.g. a Score)
``ERROR``                       unexpected (a bug or bad telemetry); the job stays queued
                                with the message as its reason and the cycle carries on
==============================  ==========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    WAIT = "Wait"
    SKIP = "Skip"
    ERROR = "Error"


@dataclass(frozen=True)
class Status:
    code: Code = Code.SUCCESS
    reason: str = ""
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR)

    def by(self, plugin: str) -> Status:
        """The same status attributed to ``plugin`` (the framework stamps it)."""
        return self if self.plugin else Status(self.code, self.reason, plugin)

    def __str__(self) -> str:
        return f"{self.code.value}: {self.reason}" if self.reason else self.code.value


SUCCESS = Status()
SKIP = Status(Code.SKIP)


def unschedulable(reason: str) -> Status:
    return Status(Code.UNSCHEDULABLE, reason)


def unresolvable(reason: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reason)


def wait(reason: str) -> Status:
    return Status(Code.WAIT, reason)


def error(reason: str) -> Status:
    return Status(Code.ERROR, reason)
