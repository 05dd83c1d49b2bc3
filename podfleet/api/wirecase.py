"""One case on the wire: snake_case, with the camelCase spellings of earlier releases
accepted for one more release.

Field names are snake_case (``checkpoint_interval``, ``time_limit_s``, ``cluster_id``: the
units-in-names convention, and the spelling of most names already: 39 of the schemas' 50
multi-word property names, and every response field but ``nextToken``). The 13 camelCase
names (``wirenames.RENAMED``) still work in a request, in a body (``api/schemas`` renames
them while validating) or in a query string (``WireCase`` renames them before routing),
and the response then says so: ``Deprecation`` (RFC 9745: since when), a ``Link`` with
``rel="deprecation"`` to the OpenAPI document (which marks each old name deprecated), and
``Podfleet-Deprecated-Fields`` naming each old name and its new one. Given both spellings
of one field, the new one's value stands.
"""

from __future__ import annotations

from collections.abc import Collection
from contextvars import ContextVar
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from podfleet.api.wirenames import RENAMED

# When the camelCase spellings became deprecated (RFC 9745 wants a date, not a release).
DEPRECATED_SINCE = datetime(2026, 12, 7, tzinfo=UTC)
# The document that marks each old name deprecated (and names its new one); docs/api.md
# "Field names" says the same in prose.
DOC_LINK = "</openapi.json>"
FIELDS_HEADER = "Podfleet-Deprecated-Fields"

# The old names one request used, as (old, new): set per request by ``WireCase``, added to
# by the schemas' validation (run inside it, so the list object is shared).
_USED: ContextVar[list[tuple[str, str]] | None] = ContextVar("podfleet_deprecated_names", default=None)


def renamed(data: dict[str, object], known: Collection[str] | None = None) -> dict[str, object]:
    """``data`` with each old spelling replaced by its new one (only names in ``known``,
    when given: a model's own fields), noting each for the response's headers. Given both
    spellings, the new one's value stands: a null is an absent field, and a request the
    schema allows is never refused for it (a generated client may send both)."""
    if not any(k in RENAMED for k in data):
        return data
    out: dict[str, object] = {}
    for key, value in data.items():
        new = RENAMED.get(key)
        if new is None or (known is not None and new not in known):
            out[key] = value
            continue
        note(key, new)
        if data.get(new) is None:
            out[new] = value
    return out


def note(old: str, new: str) -> None:
    """Record that this request used ``old`` (deprecated) for ``new``."""
    used = _USED.get()
    if used is not None and (old, new) not in used:
        used.append((old, new))


def headers(used: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """The response headers that tell a client it used deprecated names, and which to use."""
    since = int(DEPRECATED_SINCE.timestamp())
    names = ", ".join(f"{old}={new}" for old, new in used)
    return [(b"deprecation", f"@{since}".encode()),
            (b"link", f'{DOC_LINK}; rel="deprecation"; type="application/json"'.encode()),
            (FIELDS_HEADER.lower().encode(), names.encode())]


class WireCase:
    """ASGI middleware: renames deprecated query parameters before routing and adds the
    deprecation headers to the response of a request that used any old name. Pure ASGI, so
    the request's context (and ``_USED``) is the one the route and its validation run in."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        used: list[tuple[str, str]] = []
        token = _USED.set(used)
        try:
            query = scope.get("query_string", b"")
            if query and any(old.encode() in query for old in RENAMED):
                scope = {**scope, "query_string": _renamed_query(query)}

            async def send_with_headers(message: Message) -> None:
                if message["type"] == "http.response.start" and used:
                    message = {**message, "headers": [*message.get("headers", []), *headers(used)]}
                await send(message)

            await self.app(scope, receive, send_with_headers)
        finally:
            _USED.reset(token)


def _renamed_query(query: bytes) -> bytes:
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    given = {k for k, _ in pairs}
    out = []
    for key, value in pairs:
        new = RENAMED.get(key)
        if new is not None:
            note(key, new)
            if new in given:  # both spellings: the new one's value stands, as in a body
                continue
            key = new
        out.append((key, value))
    return urlencode(out).encode("latin-1")
