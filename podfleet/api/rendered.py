"""Response bodies made cheaply: rendered once per change, and compact JSON written by
pydantic-core's serialiser where it writes what ``json.dumps`` would.

Rendered once per change: the JSON bytes of a view kept while the view
is unchanged, so a read of something that did not move costs a dict comparison instead
of a pydantic validation and serialisation.

ListClusters at fleet size answers 101 clusters per call; validating and dumping them
through the ``Cluster`` model was about half of its CPU (a 1,024-pod fleet carries 1,024
spares and a per-pod scheduler table), though the clusters change far less often than
they are read. The bytes are made by the same steps FastAPI takes for a route's
``response_model`` (``TypeAdapter.validate_python``, then ``dump_json(by_alias=True)``),
so an answer is byte for byte what the route gave before (tests/api/test_rendered.py).
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import pydantic_core
from pydantic import BaseModel, TypeAdapter

from podfleet.wire import JsonObject


class RenderedViews:
    """JSON bytes of ``model`` for views keyed by id (a cluster's), rendered again only
    when the view is no longer equal to the one they were rendered from.

    The view is kept as a copy of its dicts and lists (``_copy_json``): views share dicts
    with the runtime (a deployment's steps, the scheduler figures), which may change in
    place; compared against the copy, such a change is seen. A view equal to the last one (``==``, C-level over nested
    dicts and lists) reuses the bytes; NaN never equals itself, so a view holding one is
    rendered every time, which is correct, merely slower."""

    def __init__(self, model: type[BaseModel], limit: int = 4096) -> None:
        self._adapter: TypeAdapter[Any] = TypeAdapter(model)
        self._hits: dict[str, tuple[JsonObject, bytes]] = {}
        self._limit = limit  # ids kept at most (deleted clusters' entries are dropped past it)
        self._lock = threading.Lock()  # several event loops may serve one app (tests)

    def render(self, key: str, view: JsonObject) -> bytes:
        hit = self._hits.get(key)
        if hit is not None and hit[0] == view:
            return hit[1]
        # Rendered from the copy that is kept, so the bytes are exactly what it holds even
        # if the engine moves a shared dict meanwhile. The route's own steps: a view the
        # model rejects raises as the route would have.
        kept = _copy_json(view)
        body = self._adapter.dump_json(self._adapter.validate_python(kept), by_alias=True)
        with self._lock:
            if len(self._hits) >= self._limit and key not in self._hits:
                self._hits.clear()
            self._hits[key] = (kept, body)
        return body


def _copy_json(v: Any) -> Any:
    """``v`` with every dict and list in it copied (what a view can change in place);
    other values are shared: scalars and tuples do not change. Several times cheaper than
    ``copy.deepcopy``, which keeps a memo of every object and dispatches per type."""
    if isinstance(v, dict):
        return {k: _copy_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy_json(x) for x in v] if any(isinstance(x, dict | list) for x in v) else v.copy()
    return v


_OPTIONAL_STR: TypeAdapter[str | None] = TypeAdapter(str | None)


def page_body(field: str, items: list[bytes], token: str | None) -> bytes:
    """``{"next_token":token,"nextToken":token,"<field>":[...items...]}``: what
    ``dump_json`` of a list model (``sdk.models.PageBody``: its token fields first, the
    deprecated spelling beside the new one for one release) gives, from items each already
    dumped (the same compact separators pydantic writes)."""
    tok = _OPTIONAL_STR.dump_json(token)
    return b"".join((b'{"next_token":', tok, b',"nextToken":', tok, b',"', field.encode(), b'":[',
                     b",".join(items), b"]}"))


# Where pydantic-core's floats may read differently from Python's: a one-digit negative
# exponent (1.5e-7; Python pads it, 1.5e-07), and a float below 1e-4 written out
# (0.00001; Python writes 1e-05). Seen anywhere (in a string too), json.dumps writes the
# body: slower, never different. Checked against 500,000 random floats.
_FLOAT_MAY_DIFFER = re.compile(rb"e-\d(?!\d)|\.0000")


def compact_json(obj: Any) -> bytes:
    """``json.dumps(obj, separators=(",", ":")).encode()``, by pydantic-core's serialiser:
    about four times faster on a page of 256 chips (each with 17 metrics, eight cores'
    utilization among them), which ``json.dumps`` took 1.5 ms of a page's 2.5 to write.
    Where the two could write differently the answer is ``json.dumps``' own: non-ASCII
    text (``json.dumps`` escapes it), a float written where the two write floats differently (``_FLOAT_MAY_DIFFER``),
    a value pydantic-core does not know (a numpy scalar). Both write the shortest digits
    that read back as the float, NaN and Infinity alike, and keep the key order."""
    try:
        out = pydantic_core.to_json(obj)
    except pydantic_core.PydanticSerializationError:
        out = None
    if out is None or not out.isascii() or _FLOAT_MAY_DIFFER.search(out):
        return json.dumps(obj, separators=(",", ":")).encode()
    return out
