"""The knowledge base: the guides in docs/kb (``podfleet docs [TOPIC]``, ``GetGuide``).

A guide is one Markdown file; its topic is the file name without ``.md`` and its title
the first ``#`` heading. Runbooks are ``runbook-<fault kind>``: every diagnosis finding
and every recommendation names the topic of its guide.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from podfleet.errors import NotFoundError

_TOPIC = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def kb_dir() -> Path:
    env = os.environ.get("PODFLEET_KB_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "docs" / "kb"


def _title(text: str, topic: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return topic


def topics() -> list[str]:
    d = kb_dir()
    return sorted(p.stem for p in d.glob("*.md") if _TOPIC.match(p.stem)) if d.is_dir() else []


def list_guides() -> list[dict[str, str]]:
    d = kb_dir()
    return [{"topic": t, "title": _title((d / f"{t}.md").read_text(), t)} for t in topics()]


def guide(topic: str) -> dict[str, str]:
    """One guide: topic, title and Markdown text; an unknown topic lists the valid ones."""
    known = topics()
    # Only a listed topic is read: a path never comes from the caller.
    if topic not in known:
        # A guide is a resource of its own: an unknown one is not found (and the valid ones are named).
        raise NotFoundError(f"no guide {topic!r}; guides: {', '.join(known)}", field="topic", allowed=known)
    text = (kb_dir() / f"{topic}.md").read_text()
    return {"topic": topic, "title": _title(text, topic), "text": text}
