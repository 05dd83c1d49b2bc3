"""The commands a cluster's named objects share (``queue`` and ``reservation``): ``list``,
``describe NAME`` and ``delete NAME`` are the same commands over other client calls."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit
from podfleet.cli.remote import TokenOpt, UrlOpt, remote
from podfleet.sdk import PodfleetClient

ClusterOpt = typer.Option(..., "--cluster", "-c", help="cluster id or name")


@dataclass(frozen=True)
class ClusterNamed:
    noun: str
    plural: str  # the list's key in ListX's answer
    columns: list[str]
    list_all: Callable[[PodfleetClient, str], dict[str, Any]]
    describe: Callable[[PodfleetClient, str, str], dict[str, Any]]
    delete: Callable[[PodfleetClient, str, str], dict[str, Any]]

    def add_list_command(self, app: typer.Typer, help_text: str) -> None:
        @app.command("list", help=help_text)
        def list_(cluster: str = ClusterOpt, url: str = UrlOpt, token: str = TokenOpt,
                  output: OutputFormat = OutputOpt) -> None:
            with remote(url, token) as c:
                emit(self.list_all(c, cluster)[self.plural], output, columns=self.columns)

    def add_describe_command(self, app: typer.Typer, help_text: str) -> None:
        @app.command("describe", help=help_text)
        def describe(name: str = typer.Argument(..., help=f"the {self.noun}'s name"), cluster: str = ClusterOpt,
                     url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
            with remote(url, token) as c:
                out = self.describe(c, cluster, name)
                emit(out, output, title=f"{self.noun} {out['name']}")

    def add_delete_command(self, app: typer.Typer, help_text: str) -> None:
        @app.command("delete", help=help_text)
        def delete(name: str = typer.Argument(..., help=f"the {self.noun}'s name"), cluster: str = ClusterOpt,
                   url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
            with remote(url, token) as c:
                out = self.delete(c, cluster, name)
                emit(out, output, columns=["name", "state"], title=f"{self.noun} {name}")
