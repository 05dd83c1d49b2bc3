"""Typed access to fields of a parsed JSON document, with errors that name the path.

Neuron tools add fields between releases and omit metric groups that are not
configured, so the rule is: an unknown field is ignored, a missing field gives the
default, and a field of the wrong type is a malformed document (``InvalidInputError``
naming the JSON path, e.g. ``neuron_runtime_data[0].report.memory_used.period``).
"""

from __future__ import annotations

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


def obj(source: str, parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any] | None:
    """An object field, or None when absent / null."""
    v = parent.get(key)
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise malformed(source, f"{path}.{key}" if path else key, "an object", v)
    return v


def arr(source: str, parent: Mapping[str, Any], key: str, path: str) -> list[Any]:
    """A list field; absent / null gives an empty list."""
    v = parent.get(key)
    if v is None:
        return []
    if not isinstance(v, list):
        raise malformed(source, f"{path}.{key}" if path else key, "a list", v)
    return v


def num(
    source: str, parent: Mapping[str, Any], key: str, path: str, default: float | None = None
) -> float | None:
    """A number field (bools are refused: ``true`` is not a count)."""
    v = parent.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise malformed(source, f"{path}.{key}" if path else key, "a number", v)
    return float(v)


def integer(
    source: str, parent: Mapping[str, Any], key: str, path: str, default: int | None = None
) -> int | None:
    v = parent.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise malformed(source, f"{path}.{key}" if path else key, "an integer", v)
    return v


def text(source: str, parent: Mapping[str, Any], key: str, path: str, default: str = "") -> str:
    v = parent.get(key)
    if v is None:
        return default
    if not isinstance(v, str):
        raise malformed(source, f"{path}.{key}" if path else key, "a string", v)
    return v


def index_key(source: str, key: object, path: str) -> int:
    """Object keys that are indices ("0", "12") as ints."""
    if isinstance(key, str) and key.isdigit():
        return int(key)
    raise malformed(source, path, "an object keyed by non-negative integers", key)
