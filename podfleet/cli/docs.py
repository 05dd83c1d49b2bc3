"""``podfleet docs [TOPIC]``: the knowledge base (guides and runbooks in docs/kb).

Read locally, so it works without a server; the API serves the same guides (``GetGuide``).
"""

from __future__ import annotations

import typer

from podfleet.advisor import kb
from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, line


def docs(
    topic: str | None = typer.Argument(None, help="a guide's topic; none: list them"),
    output: OutputFormat = OutputOpt,
) -> None:
    """List the guides, or print one: podfleet docs runbook-link-down."""
    with errors():
        if topic is None:
            emit(kb.list_guides(), output, columns=["topic", "title"], title="guides (podfleet docs TOPIC)")
            return
        g = kb.guide(topic)
    if output == OutputFormat.json:
        emit(g, output)
    else:
        line(g["text"].rstrip())
