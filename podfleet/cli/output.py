"""Shared CLI output: ``--output json|table`` and one-line errors with stable exit codes.

In JSON mode only the JSON document goes to stdout; everything else goes to stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from podfleet.errors import PodfleetError

stderr = Console(stderr=True)
stdout = Console()


class OutputFormat(StrEnum):
    json = "json"
    table = "table"


OutputOpt = typer.Option(OutputFormat.table, "--output", "-o", help="json or table")


def emit(data: Any, fmt: OutputFormat, *, columns: Sequence[str] | None = None, title: str | None = None) -> None:
    """Print ``data`` as JSON or as a table (lists of dicts) / key-value table (dict)."""
    if fmt == OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    if isinstance(data, list):
        cols = list(columns or (data[0].keys() if data else []))
        table = Table(title=title)
        for c in cols:
            table.add_column(c)
        for row in data:
            table.add_row(*[_cell(row.get(c)) for c in cols])
        stdout.print(table)
    elif isinstance(data, Mapping):
        table = Table(title=title, show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value")
        for k, v in data.items():
            if columns and k not in columns:
                continue
            table.add_row(str(k), _cell(v))
        stdout.print(table)
    else:
        stdout.print(str(data))


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict | list):
        return json.dumps(v, default=str)
    return "" if v is None else str(v)


def fail(message: str, code: int = 2) -> None:
    stderr.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def errors() -> Iterator[None]:
    """Turn podfleet errors into one line on stderr and their exit code; never a traceback."""
    try:
        yield
    except PodfleetError as exc:
        fail(exc.message, exc.exit_code)


def run_guarded(fn: Callable[[], Any]) -> Any:
    with errors():
        return fn()
