"""``podfleet reservation create|list|describe|delete``: chips held for a queue over a window
(Slurm's ``scontrol create reservation``); backfill never delays one."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit
from podfleet.cli.remote import TokenOpt, UrlOpt, remote

app = typer.Typer(help="Reservations: chips held for one queue's jobs over a window; jobs whose time limit "
                       "would cross its start are kept off them.", no_args_is_help=True)
COLUMNS = ["name", "chips", "queue", "start", "end", "state", "jobs"]
ClusterOpt = typer.Option(..., "--cluster", "-c", help="cluster id or name")


@app.command("create")
def create(
    cluster: str = ClusterOpt,
    chips: int = typer.Option(..., "--chips", help="chips to hold"),
    start: str = typer.Option("now", "--start", help="RFC 3339 (2026-12-04T08:00:00Z, UTC unless it says), now, "
                              "or now+1h"),
    duration: str = typer.Option(..., "--duration", help="2h, 30m, 1h30m, 1d, HH:MM:SS or seconds"),
    queue: str | None = typer.Option(None, "--queue", help="whose jobs may use the chips in the window "
                                     "(default: nobody's)"),
    name: str | None = typer.Option(None, "--name", help="a name (default: its id)"),
    url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt,
) -> None:
    """Reserve chips of a cluster for a window."""
    with remote(url, token) as c:
        out = c.create_reservation(cluster, chips=chips, start=start, duration=duration,
                                                    queue=queue, name=name)
        emit(out, output, columns=COLUMNS, title=f"reservation {out['name']}")


@app.command("list")
def list_(cluster: str = ClusterOpt, url: str = UrlOpt, token: str = TokenOpt,
          output: OutputFormat = OutputOpt) -> None:
    """The cluster's reservations, pending, active and ended."""
    with remote(url, token) as c:
        emit(c.list_reservations(cluster)["reservations"], output, columns=COLUMNS)


@app.command("describe")
def describe(name: str = typer.Argument(..., help="the reservation's name"), cluster: str = ClusterOpt,
             url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """One reservation: its chips, window, queue and the jobs on its chips now."""
    with remote(url, token) as c:
        out = c.describe_reservation(cluster, name)
        emit(out, output, title=f"reservation {out['name']}")


@app.command("delete")
def delete(name: str = typer.Argument(..., help="the reservation's name"), cluster: str = ClusterOpt,
           url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Delete a reservation: its chips are free to every job at once."""
    with remote(url, token) as c:
        out = c.delete_reservation(cluster, name)
        emit(out, output, columns=["name", "state"], title=f"reservation {name}")
