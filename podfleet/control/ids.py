"""Prefixed, time-ordered ids (``cl-…``, ``job-…``): sorting by id is sorting by creation,
which is what list pagination (``nextToken`` = last id seen) relies on."""

from __future__ import annotations

import secrets
import time

_last_ms = 0
_counter = 0


def new_id(prefix: str) -> str:
    global _last_ms, _counter
    ms = int(time.time() * 1000)
    if ms <= _last_ms:  # same millisecond (or a clock step back): keep the order
        ms = _last_ms
        _counter += 1
    else:
        _counter = 0
    _last_ms = ms
    return f"{prefix}-{ms:011x}{_counter:03x}{secrets.token_hex(3)}"
