"""Shared CLI output: ``--output json|table`` and one-line errors with stable exit codes.

In JSON mode only the JSON document goes to stdout (exact numbers, as the API sent
them); everything else goes to stderr. Tables never lose text:

* data is never read as rich markup or emoji (``[attempt 1 rank 0]``, ``^[a-z]``, ``:x:``
  print as they are): both consoles have markup, emoji and highlighting off, and cells
  are ``Text`` objects;
* piped output (not a terminal) is never wrapped or cut: a row is one line however
  long; on a terminal long cells fold onto more lines rather than end in an ellipsis;
* control characters never reach the terminal raw (an ESC sequence or a bidi override
  in a name or a log line would rewrite what is shown): every cell, key and title is
  written through ``security/text.visible``;
* figures are for people: bytes in GiB, unix times in ISO 8601 (UTC), rates as 48.6k,
  nested objects as ``key=value`` pairs rather than JSON.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from podfleet.cli.clickcompat import get_current_context
from podfleet.errors import PodfleetError
from podfleet.sdk.models import Reply
from podfleet.security.text import visible


def _console(*, stderr: bool) -> Console:
    # soft_wrap: a line of text is never broken by rich (the terminal wraps it, a pipe keeps it).
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False, soft_wrap=True)


stderr = _console(stderr=True)
stdout = _console(stderr=False)

# Piped tables are laid out this wide so rich never wraps or cuts a cell.
_PIPE_WIDTH = 100_000


class OutputFormat(StrEnum):
    json = "json"
    table = "table"


OutputOpt = typer.Option(OutputFormat.table, "--output", "-o", help="json or table")


# A reply as the CLI reads it (by key): the SDK's typed reply, or a dict it built itself.
Record = Reply | dict[str, Any]


def plain(data: Any) -> Any:
    """The SDK's typed replies (``sdk.models.Reply``) as the JSON they came as, inside lists
    and dicts too: what is printed is the server's document, in either format."""
    if isinstance(data, Reply):
        return data.to_dict()
    if isinstance(data, list):
        return [plain(v) for v in data]
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items()}
    return data


def emit(data: Any, fmt: OutputFormat, *, columns: Sequence[str] | None = None, title: str | None = None) -> None:
    """Print ``data`` as JSON or as a table (lists of dicts) / key-value table (dict)."""
    data = plain(data)
    if fmt == OutputFormat.json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    if isinstance(data, list):
        print_table(table_of(data, columns, title))
    elif isinstance(data, Mapping):
        pairs = [(k, cell(v, k)) for k, v in flatten(data).items() if not columns or k.split(".")[0] in columns]
        if not stdout.is_terminal:
            # Piped: "field  value" lines, no frame: one value per line, nothing padded
            # to the widest value, easy to grep.
            width = max((len(k) for k, _ in pairs), default=0)
            if title:
                line(f"{visible(title)}:")
            for k, v in pairs:
                line(f"{'  ' if title else ''}{visible(k):<{width}}  {v}")
            return
        table = _table(title, show_header=False)
        _column(table, "field", style="bold")
        _column(table, "value")
        for k, v in pairs:
            table.add_row(Text(visible(k)), Text(v))
        print_table(table)
    else:
        line(str(data))


def table_of(rows: list[dict[str, Any]], columns: Sequence[str] | None = None, title: str | None = None) -> Table:
    """Rows as a table of ``columns`` (default: the first row's keys); every cell is text."""
    cols = list(columns or (rows[0].keys() if rows else []))
    table = _table(title)
    for c in cols:
        _column(table, c)
    for row in rows:
        table.add_row(*[Text(cell(row.get(c), c)) for c in cols])
    return table


def _table(title: str | None, *, show_header: bool = True) -> Table:
    return Table(title=Text(visible(title)) if title else None, show_header=show_header)


def _column(table: Table, name: str, **kw: Any) -> None:
    # Folded, never cut with an ellipsis; piped, never wrapped at all.
    table.add_column(Text(visible(name)), overflow="fold", no_wrap=not stdout.is_terminal, **kw)


def print_table(table: Table) -> None:
    if stdout.is_terminal:
        stdout.print(table)
    else:  # a console as wide as any row: rich measures a table against its console
        wide = Console(width=_PIPE_WIDTH, markup=False, emoji=False, highlight=False)
        wide.print(table, crop=False)


def line(text: str, *, err: bool = False) -> None:
    """One line of data, as it is (no markup, no wrapping)."""
    (stderr if err else stdout).print(Text(text), soft_wrap=True)


def record(text: str, *, err: bool = False) -> None:
    """One line of data from elsewhere (a worker's log line, an event): as ``line``, with
    control characters escaped, so a worker cannot write ESC sequences to the terminal."""
    line(visible(text), err=err)


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted keys (``deployment.state``), for key-value tables."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v and len(v) <= 24:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


# --- human units ----------------------------------------------------------------------------

def cell(v: Any, key: str = "") -> str:
    """A value for a table cell, in units people read (the column name says which),
    with control characters escaped."""
    return visible(_cell(v, key))


def _cell(v: Any, key: str = "") -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return number(float(v), key) if isinstance(v, float) or _unit_key(key) else str(v)
    if isinstance(v, Mapping):
        return ", ".join(f"{k}={_cell(x, str(k))}" for k, x in v.items())
    if isinstance(v, list | tuple):
        if all(not isinstance(x, Mapping | list | tuple) for x in v):
            return ", ".join(_cell(x, key) for x in v)
        return "; ".join(_cell(x, key) for x in v)
    return str(v)


def _unit_key(key: str) -> bool:
    return key.endswith(("_bytes", "_per_s", "_at", "time", "_t", "_s", "_ms"))


def number(x: float, key: str = "") -> str:
    if not math.isfinite(x):
        return str(x)
    if key.endswith("_bytes"):
        return gib(x)
    if key.endswith(("_at", "time", "_t")) and x > 1e9:  # unix seconds
        return iso(x)
    if key.endswith("_per_s"):
        return si(x) + "/s"
    if key.endswith("_ms"):
        return f"{x:.3g} ms"
    if key.endswith("_s"):
        return duration(x)
    if abs(x) >= 1e4:
        return si(x)
    return str(int(x)) if x == int(x) else f"{x:.4g}"


def gib(x: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(x) >= size:
            return f"{x / size:.1f} {unit}"
    return f"{int(x)} B"


def si(x: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.3g}"


def duration(s: float) -> str:
    if abs(s) < 1:
        return f"{s * 1000:.3g} ms"
    if abs(s) < 60:
        return f"{s:.1f} s"
    m, sec = divmod(round(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- errors --------------------------------------------------------------------------------------

def fail(message: str, code: int = 2) -> None:
    stderr.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)
    raise typer.Exit(code)


def in_flag_words(exc: PodfleetError) -> str:
    """The error's sentence, with the field it names in the words the operator typed: the
    API says ``chips: 0 is too small``, the CLI ``--chips: 0 is too small``."""
    msg, field = exc.message, exc.field
    ctx = get_current_context(silent=True)
    if not field or ctx is None:
        return msg
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", field).lower()  # gradCompression: grad_compression
    for param in ctx.command.params:
        flags = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        if param.name == snake and flags and param.param_type_name == "option" and msg.startswith(f"{field}:"):
            return flags[0] + msg[len(field):]
    return msg


@contextmanager
def errors() -> Iterator[None]:
    """Turn podfleet errors into one line on stderr and their exit code; never a traceback."""
    try:
        yield
    except PodfleetError as exc:
        fail(in_flag_words(exc), exc.exit_code)


def run_guarded(fn: Callable[[], Any]) -> Any:
    with errors():
        return fn()
