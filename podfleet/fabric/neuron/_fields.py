"""Typed access to fields of a parsed JSON document, with errors that name the path.

Neuron tools add fields between releases and omit metric groups that are not
configured, so the rule is: an unknown field is ignored, a missing field gives the
default, and a field of the wrong type is a malformed document (``InvalidInputError``
naming the JSON path, e.g. ``neuron_runtime_data[0].report.memory_used.period``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from podfleet.errors import InvalidInputError


def _type_name(v: object) -> str:
    return "null" if v is None else type(v).__name__


def malformed(source: str, path: str, expected: str, got: object) -> InvalidInputError:
    shown = repr(got)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return InvalidInputError(
        f"malformed {source} document: {path} must be {expected}, got {_type_name(got)} {shown}",
        field=path,
    )


def document(source: str, doc: object, kind: type, expected: str) -> Any:
    """A whole document: JSON text decoded (or an already-decoded value) whose top level is
    a ``kind`` (``expected`` says which, in the error)."""
    if isinstance(doc, str | bytes):
        try:
            doc = json.loads(doc)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"malformed {source} document: not JSON ({exc})", field="document") from None
    if not isinstance(doc, kind):
        raise malformed(source, "document", expected, doc)
    return doc


def _field(source: str, parent: Mapping[str, Any], key: str, path: str, kind: type | tuple[type, ...],
           expected: str) -> Any:
    """``parent[key]`` if it is a ``kind`` (never a bool where a number is wanted: ``true``
    is not a count), None when absent or null."""
    v = parent.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, kind):
        raise malformed(source, f"{path}.{key}" if path else key, expected, v)
    return v


def obj(source: str, parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    """An object field, or None when absent / null."""
    v: Mapping[str, Any] | None = _field(source, parent, key, path, Mapping, "an object")
    return v


def arr(source: str, parent: Mapping[str, Any], key: str, path: str) -> list[Any]:
    """A list field; absent / null gives an empty list."""
    return _field(source, parent, key, path, list, "a list") or []


def num(
    source: str, parent: Mapping[str, Any], key: str, path: str, default: float | None = None
) -> float | None:
    """A number field, as a float."""
    v = _field(source, parent, key, path, (int, float), "a number")
    return default if v is None else float(v)


def integer(
    source: str, parent: Mapping[str, Any], key: str, path: str, default: int | None = None
) -> int | None:
    v: int | None = _field(source, parent, key, path, int, "an integer")
    return default if v is None else v


def text(source: str, parent: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
    v: str | None = _field(source, parent, key, path, str, "a string")
    return default if v is None else v


def device_entry(source: str, entry: object, key: str, path: str) -> tuple[Mapping[str, Any], int]:
    """One device's object in a list, and its index (``key``: a non-negative integer)."""
    if not isinstance(entry, Mapping):
        raise malformed(source, path, "an object", entry)
    index = integer(source, entry, key, path)
    if index is None or index < 0:
        raise malformed(source, f"{path}.{key}", "a non-negative integer", entry.get(key))
    return entry, index


def index_key(source: str, key: object, path: str) -> int:
    """Object keys that are indices ("0", "12") as ints."""
    if isinstance(key, str) and key.isdigit():
        return int(key)
    raise malformed(source, path, "an object keyed by non-negative integers", key)
