"""Text an operator names things with, and text a terminal shows.

A name (a job's, a cluster's, a user's, a token's, a policy statement's) is printable
text: no C0 or C1 control characters (NUL, ESC, newlines), no bidirectional overrides
or isolates, no other invisible format characters, no lone surrogates. Such a character
in a name can rewrite a terminal (ESC sequences), reorder what a table shows (U+202E
prints ``exe.txt`` as ``txt.exe``), or end a log line early. ``unprintable`` says which
one a name holds; ``visible`` escapes them for display, for text that is not a name
(worker logs, names stored before this rule).
"""

from __future__ import annotations

import functools
import unicodedata

# Cc: C0, DEL, C1. Cf: format (bidi embeddings, overrides, isolates and marks, zero-width
# characters, soft hyphen). Zl/Zp: line and paragraph separators. Cs: lone surrogates.
# In the Basic Multilingual Plane: past it, format characters are emoji tag sequences (a
# flag) and musical or shorthand notation, and a JSON schema pattern (ECMA-262, no ``u``
# flag) cannot name them; every control character and bidi control is in the BMP.
UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _ranges() -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for n in range(0x10000):
        if unicodedata.category(chr(n)) in UNPRINTABLE_CATEGORIES - {"Cs"}:
            if out and out[-1][1] == n - 1:
                out[-1] = (out[-1][0], n)
            else:
                out.append((n, n))
    return out


@functools.cache
def printable_pattern() -> str:
    """The same rule as a regular expression, for a JSON schema (``^[^...]*$``), so a
    client knows it from the document. Surrogates are left out (a regex class cannot hold
    them; ``unprintable`` still refuses them). Computed once, when first asked."""
    def esc(n: int) -> str:  # escapes JavaScript's regular expressions read alike
        return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"
    return "^[^" + "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in _ranges()) + "]*$"


def _bad(ch: str) -> bool:
    return ord(ch) < 0x10000 and unicodedata.category(ch) in UNPRINTABLE_CATEGORIES


def unprintable(text: str) -> str | None:
    """A description of the first control or invisible format character of ``text``
    (``U+202E RIGHT-TO-LEFT OVERRIDE``), or None when it has none."""
    for ch in text:
        if _bad(ch):
            return f"U+{ord(ch):04X} {unicodedata.name(ch, 'control character')}"
    return None


def visible(text: str) -> str:
    """``text`` with every such character written as an escape (``\\x1b``, ``\\u202e``)."""
    if not any(_bad(ch) for ch in text):
        return text
    return "".join(_escape(ch) if _bad(ch) else ch for ch in text)


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"
