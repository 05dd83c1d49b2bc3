"""``NamedCommands``: what the commands over a cluster's named, persisted definitions
(queues, reservations) share: the records kept per (cluster id, name), and ``install``,
which gives a (new or reloaded) cluster's scheduler what the store holds for it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from podfleet.control.runtime import ClusterRuntime

if TYPE_CHECKING:
    from podfleet.control.ports import PlanePort


class NamedRecord(Protocol):
    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=NamedRecord)


class NamedCommands(ABC, Generic[R]):
    """A noun's commands; its subclass says what the store keeps (``_persisted``) and how
    one record reaches the scheduler (``_give``)."""

    def __init__(self, plane: PlanePort) -> None:
        self.plane = plane
        self._records: dict[tuple[str, str], R] = {}  # (cluster id, name) -> its record

    def install(self, rt: ClusterRuntime) -> None:
        """Give a (new or reloaded) cluster's scheduler its persisted definitions."""
        for rec in self._persisted(rt):
            self._give(rt, rec)
            self._records[(rt.id, rec.name)] = rec

    @abstractmethod
    def _persisted(self, rt: ClusterRuntime) -> list[R]:
        """What the store keeps for cluster ``rt``."""

    @abstractmethod
    def _give(self, rt: ClusterRuntime, rec: R) -> None:
        """Hand one record to cluster ``rt``'s scheduler."""

    def _named(self, rt: ClusterRuntime) -> list[str]:
        """The names kept for cluster ``rt``, sorted."""
        return sorted(n for (cid, n) in self._records if cid == rt.id)
