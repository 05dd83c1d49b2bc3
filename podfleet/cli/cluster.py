"""``podfleet cluster create|list|describe|delete``."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from podfleet.cli.output import OutputFormat, OutputOpt, emit, plain, record, stderr
from podfleet.cli.remote import TokenOpt, UrlOpt, remote, remote_command
from podfleet.errors import InvalidInputError, PodfleetError
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Cluster lifecycle.", no_args_is_help=True)
COLUMNS = ["id", "name", "state", "type", "fabric", "chips", "spares", "spare_chips", "cordoned", "jobs_running",
           "reason"]


def for_people(view: dict[str, Any], fmt: OutputFormat) -> dict[str, Any]:
    """A cluster as a table shows it: the API's ``spares`` is a list of chip ids, which a
    table cell would print as ``0`` for "chip 0"; tables say ``spares 1, spare_chips 0``.
    JSON stays the API's."""
    if fmt == OutputFormat.json or not isinstance(view.get("spares"), list):
        return view
    out: dict[str, Any] = {}
    for k, v in view.items():
        if k == "spares":
            out["spares"] = len(v)
            out["spare_chips"] = ", ".join(map(str, v)) or "none"
        else:
            out[k] = v
    return out


def _dims(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace("x", ",").split(",") if x.strip()]
    except ValueError:
        raise InvalidInputError(f"--dims must look like 4,4 or 4x4x4, got {text!r}", field="dims") from None


def _ints(text: str | None, flag: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise InvalidInputError(f"--{flag} must be chip indices like 60,61,62,63, got {text!r}",
                                field=flag.replace("-", "_")) from None


def _quotas(items: list[str]) -> dict[str, int] | None:
    out: dict[str, int] = {}
    for item in items:
        team, _, n = item.partition("=")
        if not team or not n.isdigit():
            raise InvalidInputError(f"--quota must be TEAM=CHIPS, got {item!r}", field="quotas")
        out[team] = int(n)
    return out or None


@app.command("create")
@remote_command
def create(
    c: PodfleetClient,
    name: str = typer.Argument(..., help="cluster name (a-z, 0-9, -)"),
    type: str = typer.Option(None, "--type", help="trn2-ultraserver (default) | trn2-node | trn1-node | custom; "
                             "fabric local/ray: custom (--chips worker slots); neuron: from neuron-ls"),
    spares: int = typer.Option(0, "--spares", help="spare chips held out of placement (0-4), chosen where "
                               "they keep the largest blocks free"),
    spare_chips: str = typer.Option(None, "--spare-chips", help="name the spare chips instead: e.g. 60,61,62,63"),
    restore_spares: bool = typer.Option(True, "--restore-spares/--no-restore-spares",
                                        help="when a spare takes a rank, make a free or repaired chip a spare"),
    quota: list[str] = typer.Option(None, "--quota", help="TEAM=CHIPS: most chips a team's jobs hold (repeatable)"),
    chips: int = typer.Option(None, "--chips", help="chip count (must match the type; custom: a ring)"),
    dims: str = typer.Option(None, "--dims", help="custom only: e.g. 4,4 or 4x4x4"),
    chip_type: str = typer.Option(None, "--chip-type", help="custom only: trn2 | trn1"),
    hbm_gib: float = typer.Option(None, "--hbm-gib", help="per-chip memory, GiB"),
    link_bw_gbps: float = typer.Option(None, "--link-bw-gbps", help="interconnect bandwidth per link, GB/s"),
    storage_nodes: int = typer.Option(1, "--storage-nodes", help="storage nodes to mount (0-16)"),
    encryption: bool = typer.Option(True, "--encryption/--no-encryption", help="encrypt storage mounts and checkpoints"),
    network_isolation: bool = typer.Option(True, "--network-isolation/--no-network-isolation",
                                           help="keep the cluster's interconnect and storage network apart from others"),
    fabric: str = typer.Option(None, "--fabric", help="sim | local | ray | neuron (default: the server's)"),
    ray_address: str = typer.Option(None, "--ray-address", help="fabric ray: HOST:6379, ray://HOST:10001 or auto "
                                    "(default PODFLEET_RAY_ADDRESS, else a private local Ray); fabric neuron: the "
                                    "Ray cluster whose nodes with neuron_cores are the Trainium hosts"),
    neuron_ls: str = typer.Option(None, "--neuron-ls", help="fabric neuron: command printing neuron-ls JSON "
                                  "(default 'neuron-ls --json-output'; run without a shell)"),
    neuron_monitor: str = typer.Option(None, "--neuron-monitor", help="fabric neuron: command streaming "
                                       "neuron-monitor reports (default 'neuron-monitor'; run without a shell)"),
    pods: int = typer.Option(None, "--pods", help="a fleet: N pods of --type joined by EFA (twin); "
                             "--spares is then per pod"),
    pods_per_block: int = typer.Option(None, "--pods-per-block", help="fleet: pods behind one spine switch "
                                       "(a network block; default 16 or --pods)"),
    client_token: str = typer.Option(None, "--client-token", help="idempotency key for retries"),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="follow the deployment until it ends"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Create a cluster and follow its deployment (a progress bar in table mode)."""
    out = c.create_cluster(
        name, type=type, spares=spares, chips=chips, dims=_dims(dims), chip_type=chip_type,
        hbm_gib=hbm_gib, link_bw_gbps=link_bw_gbps, storage_nodes=storage_nodes,
        encryption=encryption, network_isolation=network_isolation, fabric=fabric,
        ray_address=ray_address, neuron_ls=neuron_ls, neuron_monitor=neuron_monitor, client_token=client_token,
        spare_chips=_ints(spare_chips, "spare-chips"), quotas=_quotas(quota or []),
        restore_spares=restore_spares, pods=pods, pods_per_block=pods_per_block,
    )
    if wait and out["state"] == "deploying":
        _follow(c, out["id"], show=output == OutputFormat.table)
        out = c.describe_cluster(out["id"])
    emit(for_people(out.to_dict(), output), output, columns=[*COLUMNS, "deployment", "reason"], title=f"cluster {name}")
    if out["state"] == "failed":
        raise PodfleetError(f"cluster {name} deployment failed: {out.get('reason', '')}")


def _follow(c: PodfleetClient, cluster_id: str, *, show: bool) -> None:
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=stderr, disable=not show, transient=False) as bar:
        task = bar.add_task("deploying", total=100)
        for event, data in c.follow_cluster_logs(cluster_id):
            if event == "progress" and isinstance(data, dict):
                running = [s["name"] for s in data.get("steps", []) if s.get("state") == "running"]
                bar.update(task, completed=data.get("percent", 0),
                           description=running[0] if running else str(data.get("state", "")))
            elif event == "log" and show:
                bar.console.print(Text(f"  {data['message']}"), soft_wrap=True)


@app.command("list")
@remote_command
def list_(c: PodfleetClient, output: OutputFormat = OutputOpt) -> None:
    """All live clusters (every page)."""
    emit([for_people(cl.to_dict(), output) for cl in c.iter_clusters()], output, columns=COLUMNS)


@app.command("describe")
def describe(cluster: str = typer.Argument(..., help="id, name, or a unique id prefix"), url: str = UrlOpt,
             token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """One cluster: spec, state, deployment steps, spares, cordoned and draining chips."""
    with remote(url, token) as c:
        out = c.describe_cluster(cluster)
        emit(for_people(out.to_dict(), output), output, title=f"cluster {out.get('name', cluster)}")


@app.command("events")
@remote_command
def events(c: PodfleetClient, cluster: str = typer.Argument(..., help="id, name, or a unique id prefix"),
           follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new events until Ctrl-C"),
           since: int = typer.Option(0, "--since", min=0, help="start at this event offset"),
           interval: float = typer.Option(1.0, "--interval", min=0.2, help="seconds between polls with -f"),
           output: OutputFormat = OutputOpt) -> None:
    """The cluster's events: deployment, fabric faults, chip lifecycle, spares (GetClusterLogs)."""
    offset = since
    try:
        while True:
            page = c.get_cluster_logs(cluster, since=offset)
            for ev in page["lines"]:
                if output == OutputFormat.json:
                    print(json.dumps(plain(ev), default=str), flush=True)
                else:
                    record(f"{ev['time']}  {ev['message']}")
            offset = int(page.get("next", offset))
            if not follow:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return


@app.command("delete")
@remote_command
def delete(c: PodfleetClient, cluster: str = typer.Argument(..., help="id, name, or a unique id prefix"),
           yes: bool = typer.Option(False, "--yes", "-y", help="do not ask"),
           mfa: str | None = typer.Option(None, "--mfa", help="a fresh TOTP or recovery code (user tokens need one)"),
           output: OutputFormat = OutputOpt) -> None:
    """Stop the cluster's jobs and delete it (asks first unless --yes)."""
    if not yes:
        cl = c.describe_cluster(cluster)
        if not sys.stdin.isatty():
            raise InvalidInputError(f"deleting cluster {cl['name']} ({cl['id']}) stops its "
                                    f"{cl.get('jobs_running', 0)} running job(s); pass --yes to confirm "
                                    "(no terminal to ask on)", field="yes")
        if not typer.confirm(f"delete cluster {cl['name']} ({cl['id']}) and stop its "
                             f"{cl.get('jobs_running', 0)} running job(s)?", err=True):
            raise typer.Exit(1)
    c.use_mfa(mfa)  # after the describe: a code works once, for the call that needs it
    emit(c.delete_cluster(cluster), output, columns=["id", "name", "state"], title=f"cluster {cluster}")
