"""``podfleet priority-class create|list|delete``: named priorities with a preemption policy."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit
from podfleet.cli.remote import remote_command
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Priority classes: a name for a priority value (0-100) and whether its jobs preempt.",
                  no_args_is_help=True)
COLUMNS = ["name", "value", "preemption"]


@app.command("create")
@remote_command
def create(c: PodfleetClient, name: str = typer.Argument(..., help="the priority class's name"), value: int = typer.Option(..., "--value", help="0-100, higher first"),
           preemption: str = typer.Option("lower", "--preemption", help="lower: may preempt lower-priority jobs; "
                                          "never: waits instead"),
           output: OutputFormat = OutputOpt) -> None:
    """Create a priority class; submit with `job submit --priority NAME`."""
    emit(c.create_priority_class(name, value, preemption=preemption), output, columns=COLUMNS,
         title=f"priority class {name}")


@app.command("list")
@remote_command
def list_(c: PodfleetClient, output: OutputFormat = OutputOpt) -> None:
    """Every priority class."""
    emit(c.list_priority_classes()["priority_classes"], output, columns=COLUMNS)


@app.command("delete")
@remote_command
def delete(c: PodfleetClient, name: str = typer.Argument(..., help="the priority class's name"),
           output: OutputFormat = OutputOpt) -> None:
    """Delete a priority class (jobs already submitted keep their value)."""
    emit(c.delete_priority_class(name), output, columns=[*COLUMNS, "state"],
         title=f"priority class {name}")
