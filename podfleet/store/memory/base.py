"""``MemoryBase``: what every noun of the in-memory store keeps its records in, and its
transactions.

A noun's class names its containers in ``KEPT`` (attribute -> factory); the store makes
each once. ``transaction()`` rolls back every change its block made if the block raises;
nested use is a savepoint, as in the SQL store.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar


class MemoryBase:
    KEPT: ClassVar[dict[str, Callable[[], Any]]] = {}

    def __init__(self) -> None:
        self.url = "memory://"
        self._lock = threading.RLock()
        self._frames: list[dict[str, Any]] = []
        for cls in type(self).__mro__:
            for name, factory in vars(cls).get("KEPT", {}).items():
                setattr(self, name, factory())

    def ping(self) -> bool:
        return True  # in this process: there is nothing to be unreachable

    def close(self) -> None:
        pass

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            # A failing inner block rolls back its own writes only. A container is copied
            # only when the block first writes to it (``_touch``), so a transaction that
            # writes little costs little however large the store has grown (a rehearsal
            # keeps thousands of records).
            frame: dict[str, Any] = {}
            self._frames.append(frame)
            try:
                yield
            except BaseException:
                for name, kept in frame.items():
                    if isinstance(kept, int):
                        del getattr(self, name)[kept:]  # append-only: its length is its snapshot
                    else:
                        setattr(self, name, kept)
                raise
            finally:
                self._frames.pop()

    def _touch(self, name: str) -> None:
        """Before the first write to container ``name`` in each open transaction: keep what
        a rollback restores."""
        for frame in self._frames:
            if name not in frame:
                frame[name] = _snapshot(getattr(self, name))

    # The records kept by key: one copy in, one copy out, so a caller never holds the
    # store's own object.
    def _put(self, name: str, key: Any, rec: object) -> None:
        with self._lock:
            self._touch(name)
            getattr(self, name)[key] = copy.deepcopy(rec)

    def _get(self, name: str, key: Any) -> Any:
        with self._lock:
            rec = getattr(self, name).get(key)
            return copy.deepcopy(rec) if rec is not None else None

    def _delete(self, name: str, key: Any) -> bool:
        with self._lock:
            if key not in getattr(self, name):
                return False
            self._touch(name)
            del getattr(self, name)[key]
            return True

    def _select(self, name: str, where: Callable[[Any], bool] = lambda _r: True,
                order: Callable[[Any], Any] | None = None, limit: int | None = None) -> list[Any]:
        """Private copies of the records of ``name`` that ``where`` keeps, sorted by
        ``order`` (None: as kept), the first ``limit`` of them."""
        with self._lock:
            recs = [r for r in getattr(self, name).values() if where(r)]
            if order is not None:
                recs.sort(key=order)
            return [copy.deepcopy(r) for r in recs[:limit]]

    def _find(self, name: str, where: Callable[[Any], bool]) -> Any:
        """A private copy of the first record of ``name`` that ``where`` keeps, or None."""
        found = self._select(name, where, limit=1)
        return found[0] if found else None

    def _prune(self, name: str, old: Callable[[Any, Any], bool]) -> int:
        """Delete the records of ``name`` for which ``old(key, record)``; how many."""
        with self._lock:
            keys = [k for k, r in getattr(self, name).items() if old(k, r)]
            if keys:
                self._touch(name)
            for k in keys:
                del getattr(self, name)[k]
            return len(keys)


def _snapshot(container: Any) -> Any:
    """A rollback copy. Stored records are private deep copies that are replaced, never
    changed in place, so copying the containers (and the per-job checkpoint lists that
    are appended to) is enough; deep-copying the whole store per transaction made a
    long test run quadratic. A list is append-only (the audit trail): its length."""
    if isinstance(container, dict):
        return {k: list(v) if isinstance(v, list) else v for k, v in container.items()}
    return len(container)
