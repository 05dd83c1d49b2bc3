"""``podfleet alerts list [CLUSTER] [--state S]`` / ``podfleet alerts ack ALERT_ID... [--cluster C]`` /
``podfleet alerts recoveries CLUSTER``.

Both ``list`` and ``ack`` take a cluster the same way, and neither needs one: alert ids
are unique across clusters, so ``ack`` checks the cluster only when given one, and
``list`` without a cluster lists every cluster's alerts."""

from __future__ import annotations

import typer

from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client, remote_command
from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Health alerts and recovery flows.", no_args_is_help=True)
STATES = ("firing", "acknowledged", "resolved")


ALERT_COLUMNS = ["id", "cluster", "state", "severity", "target", "jobs", "rule", "message", "count", "last_seen_at"]


@app.command("list")
def list_alerts(
    cluster: str | None = typer.Argument(None, help="id or name; default: every cluster"),
    state: str | None = typer.Option(None, "--state", help="firing, acknowledged or resolved (any case)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Alerts of a cluster, or of every cluster (resolved ones are kept)."""
    with errors():
        state = state.strip().lower() if state is not None else None
        if state is not None and state not in STATES:
            raise InvalidInputError(f"--state must be one of {', '.join(STATES)} (any case), got {state!r}",
                                    field="state", allowed=list(STATES))
        c = client(url, token)
        clusters = [c.describe_cluster(cluster)] if cluster else list(c.iter_clusters())
        alerts = [{**a, "cluster": cl["name"]} for cl in clusters for a in c.list_alerts(cl["id"], state)["alerts"]]
        emit(alerts, output, title="alerts", columns=ALERT_COLUMNS)


@app.command("ack")
@remote_command
def ack(
    c: PodfleetClient,
    alert_ids: list[str] = typer.Argument(..., help="al-... (one or more, from alerts list)"),
    cluster: str | None = typer.Option(None, "--cluster", help="only if the alert is this cluster's (id or name)"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Acknowledge firing alerts: they stay open, marked as seen by you."""
    want = c.describe_cluster(cluster)["id"] if cluster else None
    if want is not None:
        theirs = {a["id"] for a in c.list_alerts(want)["alerts"]}
        stray = [a for a in alert_ids if a not in theirs]
        if stray:
            raise NotFoundError(f"alert {stray[0]} is not an alert of cluster {cluster} "
                                f"(podfleet alerts list {cluster})", field="alert")
    out = [c.acknowledge_alert(a) for a in alert_ids]
    emit(out[0] if len(out) == 1 else out, output, title="alert", columns=None if len(out) == 1 else
         ["id", "state", "severity", "target", "rule", "acknowledged_by", "last_seen_at"])


@app.command("recoveries")
@remote_command
def recoveries(
    c: PodfleetClient,
    cluster: str = ClusterArg,
    output: OutputFormat = OutputOpt,
) -> None:
    """Recovery flows and their steps."""
    out = c.list_recoveries(cluster)["recoveries"]
    if output == OutputFormat.json:
        emit(out, output)
        return
    rows = [{**r, "steps": " > ".join(s["name"] for s in r["steps"])} for r in out]
    emit(rows, output, title="recoveries", columns=["id", "kind", "target", "job_id", "state", "restored_from", "steps"])
