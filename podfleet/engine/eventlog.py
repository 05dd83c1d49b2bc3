"""Append-only event log of the timeline, exportable as JSONL.

Records are plain dicts ``{"seq", "t", "kind", ...fields}``; ``to_jsonl`` writes them
with sorted keys so the same seed gives a byte-identical file.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

# A record is a JSON object: its fields are whatever the emitter gave, read back by name.
Record = dict[str, Any]


class EventLog:
    def __init__(self, keep: int | None = None) -> None:
        # ``keep`` bounds memory for long serving runs; None keeps everything (tests, sims).
        self._records: deque[Record] = deque(maxlen=keep)
        self._seq = 0
        self._subscribers: list[Callable[[Record], None]] = []

    def append(self, t: float, kind: str, fields: Mapping[str, object]) -> Record:
        self._seq += 1
        rec: Record = {"seq": self._seq, "t": t, "kind": kind, **fields}
        self._records.append(rec)
        for cb in self._subscribers:
            cb(rec)
        return rec

    def subscribe(self, callback: Callable[[Record], None]) -> Callable[[], None]:
        """Call ``callback`` for every new record (on the engine thread); returns an unsubscribe."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def __len__(self) -> int:
        return self._seq

    def __iter__(self) -> Iterator[Record]:
        return iter(list(self._records))

    def filter(self, kind: str | None = None, **match: object) -> list[Record]:
        return [
            r
            for r in self._records
            if (kind is None or r["kind"] == kind) and all(r.get(k) == v for k, v in match.items())
        ]

    @staticmethod
    def dumps(records: Iterable[Record]) -> str:
        return "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in records)

    def to_jsonl(self, path: str | Path) -> None:
        Path(path).write_text(self.dumps(self._records))
