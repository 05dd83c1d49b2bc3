"""``podfleet reservation create|list|describe|delete``: chips held for a queue over a window
(Slurm's ``scontrol create reservation``); backfill never delays one."""

from __future__ import annotations

import typer

from podfleet.cli.named import ClusterNamed, ClusterOpt
from podfleet.cli.output import OutputFormat, OutputOpt, emit
from podfleet.cli.remote import remote_command
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Reservations: chips held for one queue's jobs over a window; jobs whose time limit "
                       "would cross its start are kept off them.", no_args_is_help=True)
COLUMNS = ["name", "chips", "queue", "start", "end", "state", "jobs"]
NAMED = ClusterNamed("reservation", "reservations", COLUMNS, PodfleetClient.list_reservations,
                     PodfleetClient.describe_reservation, PodfleetClient.delete_reservation)


@app.command("create")
@remote_command
def create(
    c: PodfleetClient,
    cluster: str = ClusterOpt,
    chips: int = typer.Option(..., "--chips", help="chips to hold"),
    start: str = typer.Option("now", "--start", help="RFC 3339 (2026-12-04T08:00:00Z, UTC unless it says), now, "
                              "or now+1h"),
    duration: str = typer.Option(..., "--duration", help="2h, 30m, 1h30m, 1d, HH:MM:SS or seconds"),
    queue: str | None = typer.Option(None, "--queue", help="whose jobs may use the chips in the window "
                                     "(default: nobody's)"),
    name: str | None = typer.Option(None, "--name", help="a name (default: its id)"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Reserve chips of a cluster for a window."""
    out = c.create_reservation(cluster, chips=chips, start=start, duration=duration,
                               queue=queue, name=name)
    emit(out, output, columns=COLUMNS, title=f"reservation {out['name']}")
NAMED.add_list_command(app, "The cluster's reservations, pending, active and ended.")
NAMED.add_describe_command(app, "One reservation: its chips, window, queue and the jobs on its chips now.")
NAMED.add_delete_command(app, "Delete a reservation: its chips are free to every job at once.")
