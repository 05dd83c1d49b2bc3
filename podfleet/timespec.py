"""Times and durations as people type them (reservations, ``job submit --time-limit``).

Durations: seconds (``7200``), units (``2h``, ``30m``, ``1h30m``, ``1d``) or Slurm's
``--time`` forms (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``). Times: RFC 3339
(UTC unless it says), ``now``, or ``now+DURATION``.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from podfleet.errors import InfeasibleError, InvalidInputError

_UNITS = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_SLURM = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_HELP_D = "seconds, 2h, 30m, 1h30m, 1d or HH:MM:SS"
MAX_S = 10.0**9  # ~31 years: beyond it a time cannot be written as a date
# The forms above as the API's schemas state them (what matches is parsed, never refused
# as malformed: a zero or too long duration is infeasible, a 422).
DURATION_PATTERN = r"^\s*(\d+(\.\d+)?|(\d+(\.\d+)?[dhmsDHMS])+|(\d+-)?\d+(:\d+){0,2})\s*$"
TIME_PATTERN = (r"^\s*([nN][oO][wW](\+(\d+(\.\d+)?|(\d+(\.\d+)?[dhmsDHMS])+|(\d+-)?\d+(:\d+){0,2}))?"
                r"|\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?([Zz]|[+-]\d{2}:\d{2})?)?)\s*$")


def parse_duration(value: str | float | int, field: str) -> float:
    """Seconds (> 0) of a duration; InvalidInputError naming ``field`` otherwise."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{field} must be a duration ({_HELP_D}), got {value!r}", field=field)
    if isinstance(value, int | float):
        secs = float(value)
    else:
        secs = _text_duration(value.strip().lower(), field)
    if not math.isfinite(secs) or secs <= 0:
        raise InfeasibleError(f"{field} must be > 0, got {value!r}", field=field)
    if secs > MAX_S:
        raise InfeasibleError(f"{field} must be at most {MAX_S:.0f} s, got {value!r}", field=field)
    return secs


def _text_duration(text: str, field: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    if text and _UNITS.sub("", text) == "":
        return sum(float(n) * _UNIT_S[u] for n, u in _UNITS.findall(text))
    m = _SLURM.match(text)
    if m:
        days, a, b, c = m.groups()
        if days is not None:  # D-HH[:MM[:SS]]
            return int(days) * 86400.0 + int(a) * 3600.0 + int(b or 0) * 60.0 + int(c or 0)
        if c is not None:  # HH:MM:SS
            return int(a) * 3600.0 + int(b) * 60.0 + int(c)
        return int(a) * 60.0 + int(b or 0)  # MM or MM:SS (as Slurm reads them)
    raise InvalidInputError(f"{field} must be a duration ({_HELP_D}), got {text!r}", field=field)


def parse_time(text: str, now: float, field: str) -> float:
    """Unix seconds of ``now``, ``now+DURATION`` or an RFC 3339 time (within ``MAX_S`` of now)."""
    t = text.strip()
    if t.lower() == "now":
        return now
    if t.lower().startswith("now+"):
        return now + parse_duration(t[4:], field)
    why = f"{field} must be an RFC 3339 time (2026-12-01T08:00:00Z), now or now+1h, got {text!r}"
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        # Shaped like a date but not one (month 13): well formed for the schema, so a 422.
        err = InfeasibleError if re.match(TIME_PATTERN, t) else InvalidInputError
        raise err(why, field=field) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    out = dt.timestamp()
    if abs(out - now) > MAX_S:
        raise InfeasibleError(f"{field} {text!r} is more than {MAX_S:.0f} s from now", field=field)
    return out


def fmt_duration(secs: float) -> str:
    """``2h``, ``1h30m``, ``45s``: the short form of a duration (for reasons)."""
    rest = round(secs)
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, rest = divmod(rest, size)
        if n:
            out += f"{n}{unit}"
    return out or f"{secs:g}s"
