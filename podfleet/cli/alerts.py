"""``podfleet alerts list CLUSTER [--state S]`` / ``podfleet alerts ack ALERT_ID`` /
``podfleet alerts recoveries CLUSTER``."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError

app = typer.Typer(help="Health alerts and recovery flows.", no_args_is_help=True)
STATES = ("firing", "acknowledged", "resolved")


@app.command("list")
def list_alerts(
    cluster: str = typer.Argument(..., help="id or name"),
    state: str | None = typer.Option(None, "--state", help="firing, acknowledged or resolved"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Alerts of a cluster (resolved ones are kept)."""
    with errors():
        state = state.strip().lower() if state is not None else None
        if state is not None and state not in STATES:
            raise InvalidInputError(f"--state must be one of {', '.join(STATES)} (any case), got {state!r}",
                                    field="state", allowed=list(STATES))
        out = client(url, token).list_alerts(cluster, state)
        emit(out["alerts"], output, title="alerts",
             columns=["id", "state", "severity", "target", "jobs", "rule", "message", "count", "last_seen_at"])


@app.command("ack")
def ack(
    alert_id: str = typer.Argument(..., help="al-..."),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Acknowledge a firing alert."""
    with errors():
        emit(client(url, token).acknowledge_alert(alert_id), output, title="alert")


@app.command("recoveries")
def recoveries(
    cluster: str = typer.Argument(..., help="id or name"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Recovery flows and their steps."""
    with errors():
        out = client(url, token).list_recoveries(cluster)["recoveries"]
        if output == OutputFormat.json:
            emit(out, output)
            return
        rows = [{**r, "steps": " > ".join(s["name"] for s in r["steps"])} for r in out]
        emit(rows, output, title="recoveries", columns=["id", "kind", "target", "job_id", "state", "restored_from", "steps"])
