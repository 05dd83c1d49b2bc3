"""docs/troubleshooting.md quotes error texts; each must still be one the code says.

Every string the package can say (its string literals and f-strings, read with ``ast``)
is a pattern: an f-string's placeholders match anything. A quote matches when it and
some pattern can be the same text; in a quote, ``...`` stands for text left out. A
quote that no message can produce any more (a message reworded, a feature renamed)
fails here, and the page is fixed with it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "docs" / "troubleshooting.md"
STAR = "\x00"
# Quotes in the symptom column that are not messages: states, commands, field names.
NOT_MESSAGES = {"PENDING", "RECOVERING", "RUNNING", "FAILED", "RUNNING → RECOVERING → RUNNING", "api-latency",
                "podfleet audit verify", "--db URL", "runtime.infra_failures", "allocation.reason", "ps",
                "podfleet.training.worker", "kill -9", "job list", "Resources", "QuotaExceeded"}
# What the CLI puts before a message it prints.
PREFIXES = ("error: ",)


def _patterns() -> list[str]:
    out: set[str] = set()
    for path in (ROOT / "podfleet").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):
                out.add("".join(v.value if isinstance(v, ast.Constant) else STAR for v in node.values))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= 8:
                out.add(node.value)
    # Several literals joined by + or a conditional are still one message's parts: a
    # pattern may be followed by any text (a part added after it).
    return sorted(out)


PATTERNS = _patterns()


def _quotes() -> list[str]:
    quotes = []
    for line in PAGE.read_text().splitlines():
        if not line.startswith("|") or line.startswith(("|---", "| symptom")):
            continue
        symptom = line.split(" | ")[0].lstrip("| ")
        quotes += [q for q in re.findall(r"`([^`]+)`", symptom) if q not in NOT_MESSAGES]
    return quotes


def aligned(pattern: str, quote: str) -> int:
    """How many characters of the two texts' own words line up when they read the same
    (STAR in ``pattern`` and ``...`` in ``quote`` are wildcards); -1 when they cannot."""
    q = quote.replace("...", STAR)
    n, k = len(pattern), len(q)
    best = [[-1] * (k + 1) for _ in range(n + 1)]  # pattern[:i] against q[:j]
    best[0][0] = 0
    for i in range(n + 1):
        row, nxt = best[i], best[i + 1] if i < n else None
        for j in range(k + 1):
            v = row[j]
            if v < 0:
                continue
            if (i < n and pattern[i] == STAR) or (j < k and q[j] == STAR):
                # a wildcard takes one more character, or ends
                if j < k and row[j + 1] < v:
                    row[j + 1] = v
                if nxt is not None and nxt[j] < v:
                    nxt[j] = v
            elif nxt is not None and j < k and pattern[i] == q[j] and nxt[j + 1] < v + 1:
                nxt[j + 1] = v + 1
    return best[n][k]


def can_be_the_same(pattern: str, quote: str) -> bool:
    return aligned(pattern, quote) >= 0


def _words(text: str) -> list[str]:
    """The part's prose: lowercase words of four letters or more, outside quoted values."""
    return re.findall(r"(?<![\w'-])[a-z]{4,}(?![\w'-])", re.sub(r"'[^']*'", " ", text))


COVER = 0.35  # the pattern's own text lines up with at least this share of the part
PROSE = 0.5  # and holds at least this share of the part's words (the rest: example values)


def part_is_said(part: str) -> bool:
    """Whether some message holds ``part`` (a piece of a quote between ``...``): a pattern
    that can read as it, in whole or inside a longer message, whose own text (not its
    placeholders) lines up with a fair share of the part and holds most of its words."""
    words = _words(part)
    need = COVER * len(part.strip())
    for pattern in PATTERNS:
        if words and sum(w in pattern for w in words) < PROSE * len(words):
            continue
        if len(pattern.replace(STAR, "")) < need:
            continue
        # The part anywhere in a message, and its own text lined up with the pattern's, not
        # taken whole by a placeholder.
        if aligned(pattern, "..." + part + "...") >= need:
            return True
    return False


def matches(quote: str) -> bool:
    """Every part of the quote (split at ``...``) is said by some message: a quote may
    join a message and the one that wraps it (``bad input: ... <reason>``)."""
    text = next((quote[len(p):] for p in PREFIXES if quote.startswith(p)), quote)
    parts = [p.strip() for p in text.split("...") if p.strip()]
    return bool(parts) and all(part_is_said(p) for p in parts)


QUOTES = _quotes()


def test_the_page_quotes_messages() -> None:
    assert len(QUOTES) >= 20


@pytest.mark.parametrize("quote", QUOTES)
def test_quote_is_a_message_the_code_says(quote: str) -> None:
    assert matches(quote), f"no message in podfleet/ reads {quote!r}; fix docs/troubleshooting.md"


def test_the_matcher_tells_drift() -> None:
    assert can_be_the_same(f"chips {STAR} exceeds what cluster {STAR} can place", "chips 63 exceeds what cluster pod can place")
    assert can_be_the_same(f"no token: {STAR}", f"no token: {STAR} profile")
    assert not can_be_the_same("waiting for ", "waiting for free chips")
    assert not can_be_the_same(f"chips {STAR} exceeds what cluster {STAR} can place", "chips 63 exceeds what pod holds")
    assert not matches("waiting for free chips")  # a reason the scheduler no longer gives
    assert matches("cluster lab runs 2 jobs; give --job (running: job-a, job-b)")
