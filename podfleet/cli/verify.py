"""``podfleet verify CLUSTER``: acceptance checks; exit 1 when one fails."""

from __future__ import annotations

import re
from typing import Any

import typer

from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, Record, emit, errors, line
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError
from podfleet.fabric.base import COLLECTIVE_OPS

FAILED_EXIT = 1
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB)?\s*$", re.IGNORECASE)
_UNIT = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """``8``, ``4KiB``, ``64MiB``, ``1GiB`` -> bytes."""
    m = _SIZE.match(text)
    if not m:
        raise InvalidInputError(f"--max-size {text!r} is not a size; use bytes or a number with B, KiB, MiB or GiB "
                                "(e.g. 64MiB)", field="max_size")
    return int(m.group(1)) * _UNIT[(m.group(2) or "b").lower()]


def summary_rows(result: Record) -> list[dict[str, Any]]:
    """Interconnect: bus bandwidth at the largest size, one row per group, one column per op."""
    check = next((c for c in result["checks"] if c["name"] == "interconnect"), None)
    if not check or not check["figures"]:
        return []
    fig = check["figures"]
    rows = []
    for group, ops in fig["busbw_gbps_at_largest"].items():
        row: dict[str, Any] = {"group": group}
        row.update({f"{op} busbw_gbps": v for op, v in ops.items()})
        exp = fig["expected_busbw_gbps"].get(group, {}).get("all-reduce")
        if exp is not None:
            row["healthy all-reduce"] = exp
        rows.append(row)
    return rows


def verify(
    cluster: str = ClusterArg,
    max_size: str = typer.Option("1GiB", "--max-size", help="largest collective size (8 B up, x8 steps)"),
    ops: str = typer.Option(",".join(COLLECTIVE_OPS), "--ops", help="comma-separated collectives"),
    skip_compute: bool = typer.Option(False, "--skip-compute", help="no matmul timing"),
    skip_interconnect: bool = typer.Option(False, "--skip-interconnect", help="no collectives"),
    skip_drill: bool = typer.Option(False, "--skip-drill", help="no failover drill"),
    budget: float = typer.Option(300.0, "--budget", help="failover budget of the drill, seconds"),
    table: bool = typer.Option(False, "--table", help="print the whole interconnect table (size by size)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Acceptance checks: inventory, compute, interconnect and a failover drill."""
    with errors():
        op_list = [o.strip() for o in ops.split(",") if o.strip()]
        bad = [o for o in op_list if o not in COLLECTIVE_OPS]
        if bad or not op_list:
            raise InvalidInputError(f"unknown collective {bad[0] if bad else '(none)'!r}; valid: "
                                    f"{', '.join(COLLECTIVE_OPS)}", field="ops", allowed=list(COLLECTIVE_OPS))
        result = client(url, token, timeout_s=1800.0).verify_cluster(
            cluster, max_size_bytes=parse_size(max_size), ops=op_list, compute=not skip_compute,
            interconnect=not skip_interconnect, drill=not skip_drill, budget_s=budget)
    if output == OutputFormat.json:
        emit(result, output)
    else:
        emit([{"check": c["name"], "status": c["status"], "evidence": "; ".join(c["evidence"])}
              for c in result["checks"]], output, title=f"verify {cluster}")
        rows = summary_rows(result)
        if rows:
            emit(rows, output, title="interconnect: bus bandwidth at the largest size (GB/s)")
        if table:
            check = next(c for c in result["checks"] if c["name"] == "interconnect")
            emit(check["figures"]["table"], output, columns=["group", "op", "size_bytes", "count", "type", "time_us",
                                                               "algbw_gbps", "busbw_gbps", "wrong"])
        line(f"{'passed' if result['passed'] else 'FAILED'} ({result['status']})", err=True)
    if not result["passed"]:
        raise typer.Exit(FAILED_EXIT)
