"""Click as typer runs it: typer 0.26+ carries its own copy (``typer._click``), earlier
versions use click itself. The CLI needs two of its parts that typer does not re-export:
the usage-error classes (``cli.group``) and the current command's context (``cli.output``)."""

from __future__ import annotations

try:
    from typer._click import exceptions
    from typer._click.globals import get_current_context
except ImportError:  # pragma: no cover - typer before 0.26
    from click import exceptions  # type: ignore[no-redef]
    from click.globals import get_current_context  # type: ignore[no-redef]

__all__ = ["exceptions", "get_current_context"]
