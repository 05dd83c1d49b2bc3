"""The root command group: one-line usage errors, and the command list in panels.

Click prints a usage error as four lines (usage, a hint, a blank, the error); podfleet
prints every error as one line with a meaningful exit code, so a bad flag reads like
any other refusal: ``error: Invalid value for '--chips': 'abc' is not a valid integer
(see podfleet job submit -h)``.

The command list is grouped by each command's ``rich_help_panel`` (Clusters, Jobs,
Chips, Health, Security, Tools), sorted within a panel, and every summary is the
command's first sentence, never cut: help stays plain text (no rich markup, so
patterns such as ``[a-z]`` print as they are) and the panels are drawn here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from podfleet.cli.clickcompat import exceptions as cx
from podfleet.cli.output import stderr
from podfleet.errors import PodfleetError

PANELS = ("Clusters", "Jobs", "Chips", "Health", "Security", "Tools")
ABORTS: tuple[type[BaseException], ...] = (typer.Abort, *((cx.Abort,) if hasattr(cx, "Abort") else ()))


def _say(message: str) -> None:
    stderr.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)


def usage_line(exc: cx.UsageError) -> str:
    """A usage error as one line that names the fix (the command's help)."""
    msg = exc.format_message().strip().rstrip(".")
    ctx = exc.ctx
    where = f" (see {ctx.command_path} -h)" if ctx is not None else ""
    return f"{msg}{where}"


class PodfleetGroup(TyperGroup):
    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, windows_expand_args: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except cx.NoArgsIsHelpError as exc:  # `podfleet job`: the group's help, as asked
            exc.show()
            sys.exit(exc.exit_code)
        except cx.UsageError as exc:
            _say(usage_line(exc))
            sys.exit(exc.exit_code)
        except cx.ClickException as exc:
            _say(exc.format_message().strip())
            sys.exit(exc.exit_code)
        except ABORTS:
            _say("aborted")
            sys.exit(1)
        except PodfleetError as exc:  # last resort: a command that forgot its guard
            _say(exc.message)
            sys.exit(exc.exit_code)
        # Not standalone, click returns an Exit's code instead of raising it.
        sys.exit(rv if isinstance(rv, int) else 0)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        panels: dict[str, list[tuple[str, str]]] = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            panel = getattr(cmd, "rich_help_panel", None) or "Commands"
            # The first sentence, whole: click would cut it to fit the terminal.
            panels.setdefault(panel, []).append((name, cmd.get_short_help_str(limit=1000)))
        order = [p for p in PANELS if p in panels] + sorted(p for p in panels if p not in PANELS)
        for panel in order:
            # A group's own commands keep their order (submit, list, describe, ...).
            rows = sorted(panels[panel]) if panel in PANELS else panels[panel]
            with formatter.section(panel):
                formatter.write_dl(rows)
