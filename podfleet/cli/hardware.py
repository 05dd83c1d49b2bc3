"""``podfleet hardware describe CLUSTER [--chip N]``."""

from __future__ import annotations

from collections import Counter

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, line
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Chips, links, metrics and health.", no_args_is_help=True)
_CHIP_METRICS = ("temperature_c", "power_w", "hbm_used_bytes", "clock_mhz", "mem_ecc_corrected")


@app.command("describe")
def describe(
    cluster: str = typer.Argument(..., help="id or name"),
    chip: int | None = typer.Option(None, "--chip", help="one chip only"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """The pod's chips (index, coords, state, spare, metrics) and links (src, dst, axis, state, metrics)."""
    with errors():
        cl = client(url, token)
        hw = cl.describe_cluster_hardware(cluster, chip=chip)
        if output == OutputFormat.json:
            emit(hw, output)
            return
        if chip is not None:
            emit({k: v for k, v in hw.items() if k != "metrics"} | hw.get("metrics", {}), output, title=f"chip {chip}")
            return
        names = _job_names(cl, cluster) if any(c.get("job") for c in hw["chips"]) else {}
        rows = [
            {"index": c["index"], "coords": ",".join(map(str, c["coords"])), "state": c["state"],
             "mode": c.get("mode", "schedulable"), "spare": "yes" if c["spare"] else "",
             "health": c.get("health") or "", "job": c.get("job") or "", "job_name": names.get(c.get("job") or ""),
             **_where(c), **{m: c["metrics"].get(m) for m in _CHIP_METRICS}}
            for c in hw["chips"]
        ]
        emit(rows, output, title=f"{hw.get('name', cluster)}: {len(hw['chips'])} chips at {hw.get('time')}")
        links = Counter(lk["state"] for lk in hw["links"])
        line(f"links: {len(hw['links'])} ({', '.join(f'{n} {s}' for s, n in sorted(links.items()))})")


def _where(chip: dict) -> dict:
    """Worker fabrics: the chip's host and its rank's node and pid (none on the twin)."""
    if "worker" not in chip:
        return {}
    w = chip.get("worker") or {}
    return {"host": chip.get("host") or "", "rank": w.get("rank", ""), "node": str(w.get("node_id") or "")[:12],
            "pid": w.get("pid") or ""}


def _job_names(c: PodfleetClient, cluster: str) -> dict[str, str]:
    """Job id -> name, for the names beside the ids."""
    out: dict[str, str] = {}
    nxt = None
    while True:
        page = c.list_training_jobs(cluster=cluster, next_token=nxt)
        out.update({j["id"]: j.get("name") or "" for j in page["jobs"]})
        nxt = page.get("nextToken")
        if not nxt:
            return out
