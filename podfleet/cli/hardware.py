"""``podfleet hardware describe CLUSTER [--chip N]``."""

from __future__ import annotations

from collections import Counter

import typer

from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, emit, line
from podfleet.cli.remote import remote_command
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Chips, links, metrics and health.", no_args_is_help=True)
_CHIP_METRICS = ("temperature_c", "power_w", "hbm_used_bytes", "clock_mhz", "mem_ecc_corrected")


@app.command("describe")
@remote_command
def describe(
    cl: PodfleetClient,
    cluster: str = ClusterArg,
    chip: int | None = typer.Option(None, "--chip", help="one chip only"),
    pod: int | None = typer.Option(None, "--pod", help="fleets: one pod's chips and links"),
    state: str | None = typer.Option(None, "--state", help="only chips in this state (healthy, failed, ...)"),
    job: str | None = typer.Option(None, "--job", help="only chips this job holds"),
    limit: int | None = typer.Option(None, "--limit", help="chips per page (then --next-token for more)"),
    next_token: str | None = typer.Option(None, "--next-token", help="from the previous page"),
    summary: bool = typer.Option(False, "--summary", help="per-pod and per-block counts (healthy, failed, "
                                 "spare, busy) instead of chips"),
    output: OutputFormat = OutputOpt,
) -> None:
    """The pod's chips (index, coords, state, spare, metrics) and links (src, dst, axis, state, metrics)."""
    if summary:
        out = cl.describe_cluster_hardware(cluster, summary=True)
        if output == OutputFormat.json:
            emit(out, output)
            return
        emit([{k: (", ".join(v) if isinstance(v, list) else v) for k, v in r.items()} for r in out["pods"]],
             output, title=f"{out.get('name', cluster)}: {len(out['pods'])} pods")
        emit([{k: v for k, v in r.items() if k != "pods"} for r in out["blocks"]], output,
             title=f"{len(out['blocks'])} network blocks of {out['pods_per_block']} pods")
        return
    hw = cl.describe_cluster_hardware(cluster, chip=chip, pod=pod, state=state, job=job, limit=limit,
                                      next_token=next_token)
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
    if hw.get("next_token"):
        line(f"more chips: --next-token {hw['next_token']}")


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
        nxt = page.get("next_token")
        if not nxt:
            return out
