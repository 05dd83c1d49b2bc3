"""Prefixed, time-ordered ids (``cl-…``, ``job-…``): sorting by id is sorting by creation,
which is what list pagination (``next_token`` = last id seen) relies on."""

from __future__ import annotations

import secrets
import time
from collections.abc import Collection

from podfleet.errors import NotFoundError

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


def resolve_ref(ref: str, ids: Collection[str], noun: str, *, min_len: int = 4) -> str:
    """``ref`` as a full id: itself when it is one, else the one id it starts (like git)
    or ends (the random tail) uniquely; unchanged when none matches (the caller says
    not found). Two or more matches are refused, naming some of them."""
    if ref in ids or len(ref) < min_len:  # the common case: no scan
        return ref
    hits = sorted({i for i in list(ids) if i.startswith(ref) or i.endswith(ref)})
    if len(hits) > 1:
        shown = ", ".join(hits[:5]) + (f" and {len(hits) - 5} more" if len(hits) > 5 else "")
        # Not found as one resource (404, like an unknown id), with the ids it matched.
        raise NotFoundError(f"{noun} {ref!r} is ambiguous: it matches {shown}; give more characters",
                            field=noun)
    return hits[0] if hits else ref
