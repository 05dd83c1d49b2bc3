"""``podfleet queue create|list|describe|update|delete``: a cluster's queues (quota, cohort, limits)."""

from __future__ import annotations

from typing import Any

import typer

from podfleet.cli.named import ClusterNamed, ClusterOpt
from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client, remote_command
from podfleet.errors import InvalidInputError
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Queues: nominal chip quotas, cohorts that lend idle quota, borrowing and reclaim.",
                  no_args_is_help=True)
COLUMNS = ["name", "nominal", "cohort", "used", "borrowed", "lent", "borrowing_limit", "lending_limit", "weight",
           "reclaim"]
RECLAIM_HELP = "never | lower-priority | any: which borrowing jobs it may preempt to get its chips back"
NAMED = ClusterNamed("queue", "queues", COLUMNS, PodfleetClient.list_queues, PodfleetClient.describe_queue,
                     PodfleetClient.delete_queue)


def _limit(value: str | None, name: str) -> int | str | None:
    """``none`` clears a limit (update); otherwise a chip count."""
    if value is None:
        return "keep"
    if value.strip().lower() == "none":
        return None
    try:
        n = int(value)
    except ValueError:
        raise InvalidInputError(f"--{name} must be a chip count or 'none', got {value!r}", field=name) from None
    return n


@app.command("create")
@remote_command
def create(
    c: PodfleetClient,
    name: str = typer.Argument(..., help="queue name (a-z, 0-9, '-')"),
    cluster: str = ClusterOpt,
    nominal: int = typer.Option(..., "--nominal", help="chips the queue owns"),
    cohort: str | None = typer.Option(None, "--cohort", help="queues of one cohort lend each other idle quota"),
    borrowing_limit: int | None = typer.Option(None, "--borrowing-limit", help="most chips above nominal it borrows"),
    lending_limit: int | None = typer.Option(None, "--lending-limit", help="most of its idle chips it lends"),
    weight: float = typer.Option(1.0, "--weight", help="fair-share weight in its cohort"),
    reclaim: str = typer.Option("any", "--reclaim", help=RECLAIM_HELP),
    output: OutputFormat = OutputOpt,
) -> None:
    """Create a queue on a cluster."""
    out = c.create_queue(cluster, name, nominal=nominal, cohort=cohort,
                         borrowing_limit=borrowing_limit, lending_limit=lending_limit,
                         weight=weight, reclaim=reclaim)
    emit(out, output, columns=COLUMNS, title=f"queue {out['name']}")
NAMED.add_list_command(app, "The cluster's queues (the implicit default queue too) and what each uses, borrows and lends.")
NAMED.add_describe_command(app, "One queue: quota, limits, usage, capacity and its jobs by phase.")


@app.command("update")
def update(
    name: str = typer.Argument(..., help="the queue's name"),
    cluster: str = ClusterOpt,
    nominal: int | None = typer.Option(None, "--nominal", help="chips the queue owns"),
    cohort: str | None = typer.Option(None, "--cohort", help="a cohort, or 'none' to leave it"),
    borrowing_limit: str | None = typer.Option(None, "--borrowing-limit", help="chips, or 'none' for no limit"),
    lending_limit: str | None = typer.Option(None, "--lending-limit", help="chips, or 'none' to lend all idle"),
    weight: float | None = typer.Option(None, "--weight", help="fair-share weight in its cohort"),
    reclaim: str | None = typer.Option(None, "--reclaim", help=RECLAIM_HELP),
    url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt,
) -> None:
    """Change a queue; options left out keep their value."""
    with errors():
        changes: dict[str, Any] = {k: v for k, v in (("nominal", nominal), ("weight", weight), ("reclaim", reclaim))
                                   if v is not None}
        if cohort is not None:
            changes["cohort"] = None if cohort.lower() == "none" else cohort
        for key, raw in (("borrowing_limit", borrowing_limit), ("lending_limit", lending_limit)):
            v = _limit(raw, key.replace("_", "-"))
            if v != "keep":
                changes[key] = v
        if not changes:
            raise InvalidInputError("give at least one of --nominal, --cohort, --borrowing-limit, --lending-limit, "
                                    "--weight, --reclaim", field="queue")
        out = client(url, token).update_queue(cluster, name, **changes)
        emit(out, output, columns=COLUMNS, title=f"queue {out['name']}")
NAMED.add_delete_command(app, "Delete a queue no job uses.")
