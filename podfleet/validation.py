"""Pydantic's validation errors as one sentence an operator can act on.

Pydantic says ``Input should be greater than or equal to 1``; podfleet says which field,
which value, what is allowed and how to fix it, in one line::

    chips: 0 is too small; allowed 1-65536
    model: 'lama3-8b' is not a model; did you mean 'llama3-8b'? allowed: debug, ...
    name: 'pod-O' is not a valid name: names are lowercase letters, digits and '-',
        starting with a letter; try 'pod-o'

One module, used wherever pydantic meets outside input: the API's request bodies
(``api/problems``), settings from ``PODFLEET_*`` variables and flags (``settings``),
and scenario files. Validation itself is left as strict as the models declare it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel

# Patterns the models use, in words, with how to turn a value into one that matches.
_NAME = "lowercase letters, digits and '-', starting with a letter"
PATTERN_WORDS: dict[str, tuple[str, Callable[[str], str] | None]] = {
    r"^[a-z][a-z0-9-]*$": (f"names are {_NAME}", lambda v: re.sub(r"[^a-z0-9-]+", "-", v.lower()).lstrip("-0123456789")),
    r"^[a-z0-9][a-z0-9_-]*$": ("team names are lowercase letters, digits, '_' and '-'",
                               lambda v: re.sub(r"[^a-z0-9_-]+", "-", v.lower()).lstrip("-_")),
    r"^[A-Za-z0-9._-]+$": ("letters, digits, '.', '_' and '-' only", lambda v: re.sub(r"[^A-Za-z0-9._-]+", "-", v)),
    r"^[A-Za-z0-9._:-]+$": ("letters, digits, '.', '_', ':' and '-' only",
                            lambda v: re.sub(r"[^A-Za-z0-9._:-]+", "-", v)),
    r"^\d{1,5}-\d{1,5}$": ("a link is A-B, two chip indices (e.g. 0-1)", None),
    r"^(/|code:[0-9a-f]{64}/).+$": ("an absolute path, or code:<sha256>/<script> from podfleet code push", None),
    r"^[^\x00-\x1f\x7f]+$": ("one line of text, without control characters", None),
}

_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "bool_parsing": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
}


@dataclass(frozen=True)
class Refusal:
    """One refused input: the field (dotted), the sentence, and what is allowed."""

    field: str
    message: str
    allowed: list[Any] | str | None = None


def suggest(value: object, valid: Sequence[object]) -> str | None:
    """The valid name closest to ``value`` (difflib), if any is close."""
    names = [str(v) for v in valid]
    hit = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
    if not hit:  # a case slip: 'Llama3-8B'
        hit = [n for n in names if n.lower() == str(value).lower()][:1]
    return hit[0] if hit else None


def show(value: object) -> str:
    """A value as the operator typed it: text quoted, numbers bare, long values cut."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def literal_values(expected: str) -> list[str]:
    """``'a', 'b' or 'c'`` (pydantic's ctx) as ['a', 'b', 'c']."""
    return [s.strip().strip("'\"") for s in re.split(r",| or ", expected) if s.strip()]


def allowed_text(allowed: list[Any] | str) -> str:
    return ", ".join(map(str, allowed)) if isinstance(allowed, list) else str(allowed)


def _range(ctx: Mapping[str, Any]) -> str | None:
    lo, hi = ctx.get("ge", ctx.get("gt")), ctx.get("le", ctx.get("lt"))
    if lo is not None and hi is not None and "ge" in ctx and "le" in ctx:
        return f"{lo}-{hi}"
    parts = []
    if lo is not None:
        parts.append(f"{'>=' if 'ge' in ctx else '>'} {lo}")
    if hi is not None:
        parts.append(f"{'<=' if 'le' in ctx else '<'} {hi}")
    return " and ".join(parts) or None


def range_of(model: type[BaseModel], loc: Sequence[Any]) -> str | None:
    """The declared bounds of the field at ``loc`` (``1-4096``, ``> 0``): pydantic's
    error names only the bound that was crossed."""
    cur: Any = model
    info = None
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(cur, "model_fields", None)
        if not fields or part not in fields:
            return None
        info = fields[part]
        cur = next((a for a in (info.annotation, *get_args(info.annotation))
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if info is None:
        return None
    bounds = {k: getattr(m, k) for m in info.metadata for k in ("ge", "gt", "le", "lt")
              if getattr(m, k, None) is not None}
    return _range(bounds)


def refusal(err: Mapping[str, Any], field: str, *, allowed: list[Any] | str | None = None,
            what: str | None = None) -> Refusal:
    """One pydantic error (``ValidationError.errors()`` item) as a sentence about ``field``.
    ``allowed``: the field's allowed values or range when the caller knows them (from the
    schema: pydantic's context names only the bound that was crossed). ``what``: the
    noun for an unknown name ("model", "fabric"); default the field's last part."""
    kind = str(err.get("type", ""))
    ctx: Mapping[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    noun = what or field.rsplit(".", 1)[-1].replace("_", " ")
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        allowed = allowed or _range(ctx)
        size = "small" if kind.startswith("greater") else "large"
        return Refusal(field, f"{field}: {show(value)} is too {size}; allowed {allowed_text(allowed or '')}", allowed)
    if kind in ("literal_error", "enum"):
        valid = allowed if isinstance(allowed, list) else literal_values(str(ctx.get("expected", "")))
        near = suggest(value, valid)
        hint = f" (did you mean {near!r}?)" if near is not None else ""
        return Refusal(field, f"{field}: {show(value)} is not a known {noun}{hint}; allowed: {allowed_text(valid)}",
                       valid)
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        words, fixer = PATTERN_WORDS.get(pattern, (f"it must match {pattern}", None))
        fixed = fixer(str(value)) if fixer else None
        try_ = f"; try {fixed!r}" if fixed and fixed != value and re.fullmatch(pattern, fixed) else ""
        return Refusal(field, f"{field}: {show(value)} is not valid: {words}{try_}", allowed or words)
    if kind in ("string_too_short", "string_too_long", "too_short", "too_long"):
        unit = "characters" if kind.startswith("string") else "items"
        lo, hi = ctx.get("min_length"), ctx.get("max_length")
        count = len(value) if isinstance(value, str | list | tuple | dict) else ctx.get("actual_length")
        bound = f"at least {lo}" if kind.endswith("short") else f"at most {hi}"
        return Refusal(field, f"{field}: {count} {unit} is too {'few' if kind.endswith('short') else 'many'}; "
                       f"give {bound} {unit}", allowed)
    if kind == "missing":
        return Refusal(field, f"{field} is required", allowed)
    if kind == "extra_forbidden":
        valid = allowed if isinstance(allowed, list) else []
        near = suggest(field.rsplit(".", 1)[-1], valid) if valid else None
        hint = f"; did you mean {near!r}?" if near else ""
        listed = f" (fields: {allowed_text(valid)})" if valid else ""
        return Refusal(field, f"{field}: unknown field{hint}{listed}", valid or None)
    if kind in _TYPE_WORDS:
        return Refusal(field, f"{field}: {show(value)} is not {_TYPE_WORDS[kind]}", allowed)
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    return Refusal(field, f"{field}: {msg[:1].lower()}{msg[1:]}", allowed)


def first_refusal(errors: Sequence[Mapping[str, Any]], field_of: Callable[[Mapping[str, Any]], str],
                  allowed_of: Callable[[str], list[Any] | str | None] = lambda _f: None) -> Refusal:
    """Many pydantic errors as one line: the first field's, with the others counted by
    name. A value refused by every member of a union (``FaultKind | 'kill-worker'``)
    is one error about one field, its allowed values merged."""
    if not errors:
        return Refusal("body", "invalid request")
    by_field: dict[str, list[Mapping[str, Any]]] = {}
    for e in errors:
        by_field.setdefault(field_of(e), []).append(e)
    field, errs = next(iter(by_field.items()))
    allowed = allowed_of(field)
    literals = [e for e in errs if e.get("type") in ("literal_error", "enum")]
    if literals and allowed is None:
        merged: list[Any] = []
        for e in literals:
            merged += [v for v in literal_values(str((e.get("ctx") or {}).get("expected", ""))) if v not in merged]
        allowed = merged
    out = refusal(literals[0] if literals else errs[0], field, allowed=allowed)
    others = [f for f in by_field if f != field]
    if others:
        more = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        out = Refusal(out.field, f"{out.message} (also refused: {more})", out.allowed)
    return out
