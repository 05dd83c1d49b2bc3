"""Where a recovery's journal goes: ``RecoveryListener`` (the control plane's
``recovery.plane.PlaneListener`` saves it with the job) and ``MemoryJournal``, the
in-memory default used by the twin harness."""

from __future__ import annotations

from typing import Protocol

from podfleet.recovery.model import Recovery
from podfleet.wire import JsonObject


class RecoveryListener(Protocol):
    def recovery_changed(self, rec: Recovery) -> None: ...
    def job_recovered(self, job_id: str, chips: tuple[int, ...], rec: Recovery) -> None: ...
    def link_changed(self, link: int, state: str, rec: Recovery) -> None: ...


class MemoryJournal:
    """Default listener: keeps the latest journal of every recovery (a store stand-in)."""

    def __init__(self) -> None:
        self.records: dict[str, JsonObject] = {}
        self.links: dict[int, str] = {}

    def recovery_changed(self, rec: Recovery) -> None:
        self.records[rec.id] = rec.to_dict()

    def job_recovered(self, job_id: str, chips: tuple[int, ...], rec: Recovery) -> None:
        self.records[rec.id] = rec.to_dict()

    def link_changed(self, link: int, state: str, rec: Recovery) -> None:
        self.links[link] = state
