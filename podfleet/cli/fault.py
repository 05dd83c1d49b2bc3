"""``podfleet fault inject CLUSTER (--kind KIND (--chip N | --link A-B) | --kind pod-loss --pod N
| --kill-worker R [--job JOB]
| --slow-worker RANK:FACTOR [--job JOB])``."""

from __future__ import annotations

import typer

from podfleet.cli.named import ClusterArg
from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError
from podfleet.hardware.faults import FAULT_KINDS

app = typer.Typer(help="Fault injection: twin faults, or killing a worker on local/ray clusters.",
                  no_args_is_help=True)


@app.command("inject")
def inject(
    cluster: str = ClusterArg,
    kind: str | None = typer.Option(None, "--kind", help=f"twin: {', '.join(FAULT_KINDS)}; pod-loss (fleets)"),
    chip: int | None = typer.Option(None, "--chip", help="chip index (chip faults)"),
    link: str | None = typer.Option(None, "--link", help="A-B: the link between chips A and B (link faults)"),
    pod: int | None = typer.Option(None, "--pod", help="with --kind pod-loss (twin fleet clusters): the pod that "
                                   "loses power or its switch"),
    kill_worker: int | None = typer.Option(None, "--kill-worker", help="local/ray: kill rank R's worker process (SIGKILL)"),
    slow_worker: str | None = typer.Option(None, "--slow-worker", metavar="RANK:FACTOR",
                                           help="local: rank RANK computes FACTOR x slower per sample (1 restores it)"),
    job: str | None = typer.Option(None, "--job", help="with --kill-worker / --slow-worker: the job (optional when "
                                                        "only one runs)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Inject a fault at one chip or link (the twin), or kill one rank's worker (local, ray)."""
    with errors():
        if slow_worker is not None:
            if kind not in (None, "slow-worker") or chip is not None or link is not None or kill_worker is not None:
                raise InvalidInputError("--slow-worker takes no --kind, --chip, --link or --kill-worker",
                                        field="slow_worker")
            rank, factor = parse_slow_worker(slow_worker)
            emit(client(url, token).inject_fault(cluster, "slow-worker", rank=rank, factor=factor, job=job), output,
                 title="fault")
            return
        if kill_worker is not None:
            if kind not in (None, "kill-worker") or chip is not None or link is not None:
                raise InvalidInputError("--kill-worker takes no --kind, --chip or --link", field="kill_worker")
            emit(client(url, token).inject_fault(cluster, "kill-worker", rank=kill_worker, job=job), output,
                 title="fault")
            return
        if kind is None:
            raise InvalidInputError("give --kind KIND (the twin) or --kill-worker R (local/ray)", field="kind",
                                    allowed=["--kind KIND", "--kill-worker R"])
        if job is not None:
            raise InvalidInputError("--job goes with --kill-worker or --slow-worker", field="job")
        if kind == "pod-loss" or pod is not None:
            if kind != "pod-loss" or pod is None or chip is not None or link is not None:
                raise InvalidInputError("--kind pod-loss takes --pod N (and no --chip or --link)", field="pod")
            emit(client(url, token).inject_fault(cluster, kind, pod=pod), output, title="fault")
            return
        if (chip is None) == (link is None):
            raise InvalidInputError("give exactly one of --chip N or --link A-B", field="chip",
                                    allowed=["--chip N", "--link A-B"])
        emit(client(url, token).inject_fault(cluster, kind, chip=chip, link=link), output, title="fault")


def parse_slow_worker(text: str) -> tuple[int, float]:
    """``RANK:FACTOR`` (e.g. ``1:2``) as (rank, factor)."""
    rank_s, sep, factor_s = text.partition(":")
    try:
        if not sep:
            raise ValueError
        rank, factor = int(rank_s), float(factor_s)
    except ValueError:
        raise InvalidInputError(f"--slow-worker must look like RANK:FACTOR (e.g. 1:2), got {text!r}",
                                field="slow_worker") from None
    if rank < 0 or not 1.0 <= factor <= 100.0:
        raise InvalidInputError(f"--slow-worker {text}: RANK must be >= 0 and FACTOR in [1, 100]",
                                field="slow_worker")
    return rank, factor
