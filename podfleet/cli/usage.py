"""``podfleet usage [--by user|queue|team] [--since T] [--format csv]``: chip-seconds (sreport)."""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from enum import StrEnum

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit
from podfleet.cli.remote import remote_command
from podfleet.errors import InvalidInputError
from podfleet.sdk import PodfleetClient


class By(StrEnum):
    user = "user"
    queue = "queue"
    team = "team"


class UsageFormat(StrEnum):
    table = "table"
    csv = "csv"


_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """``7d``, ``12h``, ``30m`` ago, or an ISO 8601 / RFC 3339 time (UTC unless it says)."""
    m = _AGO.match(text.strip())
    if m:
        return (time.time() if now is None else now) - float(m.group(1)) * _UNIT_S[m.group(2)]
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInputError(f"--since must be a duration ago (7d, 12h, 30m) or an ISO time "
                                f"(2026-12-01T00:00:00Z), got {text!r}", field="since") from None
    if dt.tzinfo is None:
        from datetime import UTC

        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


@remote_command
def usage(
    c: PodfleetClient,
    by: By = typer.Option(By.user, "--by", help="group by user, queue or team"),
    since: str | None = typer.Option(None, "--since", help="jobs submitted since: 7d, 12h, or an ISO time"),
    cluster: str | None = typer.Option(None, "--cluster", help="one cluster's jobs"),
    fmt: UsageFormat = typer.Option(UsageFormat.table, "--format", "-f", help="table or csv"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Chip-seconds busy, reserved and lost (failures, recovery) per user, queue or team."""
    # Here, not at the top: ``podfleet.control`` loads the whole plane, which every other
    # command (``--help`` included) would pay for at start.
    from podfleet.control.accounting import KINDS, to_csv

    out = c.get_usage(by=by.value, since=parse_since(since) if since else None, cluster=cluster)
    if output == OutputFormat.json:
        emit(out, output)
    elif fmt == UsageFormat.csv:
        sys.stdout.write(to_csv(out["rows"], by.value))
    else:
        emit(out["rows"], output, columns=[by.value, *KINDS, "chip_hours", "jobs"],
             title=f"chip-seconds by {by.value} ({out['jobs']} jobs)")
