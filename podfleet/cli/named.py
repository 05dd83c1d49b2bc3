"""The commands a cluster's named objects share (``queue`` and ``reservation``): ``list``,
``describe NAME`` and ``delete NAME`` are the same commands over other client calls; and
the cluster a command is about, as an option (``ClusterOpt``) or an argument (``ClusterArg``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, Record, emit
from podfleet.cli.remote import remote_command
from podfleet.sdk import PodfleetClient

ClusterOpt = typer.Option(..., "--cluster", "-c", help="cluster id or name")
ClusterArg = typer.Argument(..., help="id or name")


@dataclass(frozen=True)
class ClusterNamed:
    noun: str
    plural: str  # the list's key in ListX's answer
    columns: list[str]
    # The SDK's answers: a dict, or a typed reply (``sdk.models``) read the same way.
    list_all: Callable[[PodfleetClient, str], Any]
    describe: Callable[[PodfleetClient, str, str], Any]
    delete: Callable[[PodfleetClient, str, str], Record]

    def add_list_command(self, app: typer.Typer, help_text: str) -> None:
        @app.command("list", help=help_text)
        @remote_command
        def list_(c: PodfleetClient, cluster: str = ClusterOpt,
                  output: OutputFormat = OutputOpt) -> None:
            emit(self.list_all(c, cluster)[self.plural], output, columns=self.columns)

    def add_describe_command(self, app: typer.Typer, help_text: str) -> None:
        self._add_by_name(app, "describe", help_text, self.describe, None, titled_by_answer=True)

    def add_delete_command(self, app: typer.Typer, help_text: str) -> None:
        self._add_by_name(app, "delete", help_text, self.delete, ["name", "state"], titled_by_answer=False)

    def _add_by_name(self, app: typer.Typer, command: str, help_text: str,
                     call: Callable[[PodfleetClient, str, str], Record], columns: list[str] | None, *,
                     titled_by_answer: bool) -> None:
        """``COMMAND NAME --cluster C``: one call on the named object, its answer shown.
        ``titled_by_answer``: the title names the object as the server answers (describe),
        else as given (delete)."""

        @app.command(command, help=help_text)
        @remote_command
        def by_name(c: PodfleetClient, name: str = typer.Argument(..., help=f"the {self.noun}'s name"), cluster: str = ClusterOpt,
                    output: OutputFormat = OutputOpt) -> None:
            out = call(c, cluster, name)
            emit(out, output, columns=columns, title=f"{self.noun} {out['name'] if titled_by_answer else name}")
