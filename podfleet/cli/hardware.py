"""``podfleet hardware describe CLUSTER [--chip N]``."""

from __future__ import annotations

from collections import Counter

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, stdout
from podfleet.cli.remote import TokenOpt, UrlOpt, client

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
        hw = client(url, token).describe_cluster_hardware(cluster, chip=chip)
        if output == OutputFormat.json:
            emit(hw, output)
            return
        if chip is not None:
            emit({k: v for k, v in hw.items() if k != "metrics"} | hw.get("metrics", {}), output, title=f"chip {chip}")
            return
        rows = [
            {"index": c["index"], "coords": ",".join(map(str, c["coords"])), "state": c["state"],
             "spare": "yes" if c["spare"] else "", "job": c.get("job") or "",
             **{m: c["metrics"].get(m) for m in _CHIP_METRICS}}
            for c in hw["chips"]
        ]
        emit(rows, output, title=f"{hw.get('name', cluster)}: {len(hw['chips'])} chips at {hw.get('time')}")
        links = Counter(lk["state"] for lk in hw["links"])
        stdout.print(f"links: {len(hw['links'])} ({', '.join(f'{n} {s}' for s, n in sorted(links.items()))})")
