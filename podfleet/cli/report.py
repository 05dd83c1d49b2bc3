"""``podfleet report CLUSTER [--period 24h] [--format html|json] [--out FILE]``: generate
and archive a health report; ``--list`` shows the archive, ``--get ID`` fetches one."""

from __future__ import annotations

import json
import os

import typer

from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, line
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def report(
    cluster: str = ClusterArg,
    period: str = typer.Option("24h", "--period", help="1h, 6h, 24h or 7d"),
    fmt: str = typer.Option("json", "--format", help="json or html (html: with charts; use --out)"),
    out: str | None = typer.Option(None, "--out", help="write the report to this file (0600)"),
    list_: bool = typer.Option(False, "--list", help="list the archived reports"),
    get: str | None = typer.Option(None, "--get", help="fetch an archived report by id"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Health report: availability, faults and recoveries, alerts, chips and links off their
    baseline, findings, jobs and their ETTR."""
    with errors():
        if fmt not in ("json", "html"):
            raise InvalidInputError(f"--format must be json or html, got {fmt!r}", field="format")
        c = client(url, token, timeout_s=300.0)
        if list_:
            emit(c.list_health_reports(cluster)["reports"], output, title=f"health reports of {cluster}")
            return
        if get is None:
            rep = c.create_health_report(cluster, period=period)
            get = str(rep["id"])
            line(f"report {get} archived", err=True)
        text = c.get_health_report(cluster, get, format=fmt)
    if out is not None:
        _write(out, text)
        line(f"wrote {out}", err=True)
    elif fmt == "html":
        line(text)
    elif output == OutputFormat.json:
        emit(json.loads(text), output)
    else:
        r = json.loads(text)
        emit({"id": r["id"], "period_s": r["period_s"], "availability": r["availability"]["chip_availability"],
              "faults": r["faults"]["by_kind"], "recoveries": r["recoveries"]["count"],
              "alerts": r["alerts"]["by_rule"], "findings": [f"{f['kind']}@{f['chips']}" for f in r["findings"]],
              "jobs": [f"{j['name']}: {j['state']} ettr={j['ettr']}" for j in r["jobs"]]}, output,
             title=f"health report {r['id']}")
