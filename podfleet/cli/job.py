"""``podfleet job submit|list|describe|stop|logs``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, stdout
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError

app = typer.Typer(help="Training jobs.", no_args_is_help=True)
COLUMNS = ["id", "cluster_id", "state", "model", "chips", "progress", "reason"]


def parse_parallelism(text: str) -> str | dict[str, int]:
    if text == "auto":
        return "auto"
    try:
        tp, pp, dp = (int(x) for x in text.split(","))
    except ValueError:
        raise InvalidInputError(f"--parallelism must be auto or TP,PP,DP (e.g. 4,2,8), got {text!r}",
                                field="parallelism", allowed=["auto", "TP,PP,DP"]) from None
    return {"tp": tp, "pp": pp, "dp": dp}


def parse_options(items: list[str]) -> dict[str, Any] | None:
    """``KEY=VALUE`` pairs; values are JSON where they parse (numbers, true, lists), else text."""
    import json

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InvalidInputError(f"--option must look like KEY=VALUE, got {item!r}", field="option")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out or None


@app.command("submit")
def submit(
    cluster: str = typer.Argument(..., help="cluster id or name"),
    model: str | None = typer.Option(None, "--model", help="preset: sim clusters debug, llama3-8b, llama3-70b, ...; "
                              "local/ray clusters debug, tiny, small (optional with --entrypoint)"),
    chips: int = typer.Option(..., "--chips", help="chips for the gang (all or none)"),
    steps: int = typer.Option(1000, "--steps"),
    checkpoint_interval: int = typer.Option(100, "--checkpoint-interval", help="steps; 0 = never"),
    priority: int = typer.Option(50, "--priority", help="0-100, higher first"),
    team: str | None = typer.Option(None, "--team", help="quota owner (the cluster's quotas)"),
    parallelism: str = typer.Option("auto", "--parallelism", help="auto or TP,PP,DP"),
    entrypoint: Path | None = typer.Option(None, "--entrypoint", help="training script (real fabrics)"),
    name: str | None = typer.Option(None, "--name"),
    max_retries: int | None = typer.Option(None, "--max-retries", help="local/ray: crashes in the job's code allowed"),
    option: list[str] = typer.Option(None, "--option", help="local/ray worker option KEY=VALUE (repeatable): "
                                     "seed, global_batch, seq_len, lr, step_delay_s, threads, checkpoint_dir, ..."),
    client_token: str | None = typer.Option(None, "--client-token", help="idempotency key for retries"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Submit a training job."""
    with errors():
        if model is None and entrypoint is None:
            raise InvalidInputError("give --model PRESET or --entrypoint FILE", field="model")
        entry = None
        if entrypoint is not None:
            if not entrypoint.is_file():
                raise InvalidInputError(f"--entrypoint {entrypoint} is not a file", field="entrypoint")
            entry = str(entrypoint.resolve())
        out = client(url, token).submit_training_job(
            cluster, model=model, chips=chips, steps=steps, checkpoint_interval=checkpoint_interval,
            priority=priority, team=team, parallelism=parse_parallelism(parallelism), entrypoint=entry, name=name,
            max_retries=max_retries, options=parse_options(option or []), client_token=client_token,
        )
        emit(out, output, columns=[*COLUMNS, "allocation"], title="job")


@app.command("list")
def list_(
    cluster: str | None = typer.Option(None, "--cluster", help="only this cluster's jobs"),
    state: str | None = typer.Option(None, "--state", help="only jobs in this state"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Training jobs (every page)."""
    with errors():
        c = client(url, token)
        jobs: list[dict[str, Any]] = []
        nxt = None
        while True:
            page = c.list_training_jobs(cluster=cluster, state=state, next_token=nxt)
            jobs.extend(page["jobs"])
            nxt = page.get("nextToken")
            if not nxt:
                break
        if output == OutputFormat.table:
            jobs = [{**j, "progress": f"{j['progress']['step']}/{j['progress']['steps']}"} for j in jobs]
        emit(jobs, output, columns=COLUMNS)


@app.command("describe")
def describe(job_id: str = typer.Argument(...), url: str = UrlOpt, token: str = TokenOpt,
             output: OutputFormat = OutputOpt) -> None:
    """State, progress (step, loss, tokens_per_s), allocation and timestamps."""
    with errors():
        emit(client(url, token).describe_training_job(job_id), output, title=job_id)


@app.command("stop")
def stop(job_id: str = typer.Argument(...), url: str = UrlOpt, token: str = TokenOpt,
         output: OutputFormat = OutputOpt) -> None:
    """Stop a job and free its chips."""
    with errors():
        emit(client(url, token).stop_training_job(job_id), output, columns=COLUMNS, title=job_id)


@app.command("logs")
def logs(job_id: str = typer.Argument(...), follow: bool = typer.Option(False, "--follow", "-f"),
         url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """The job's log; --follow streams it until the job ends."""
    with errors():
        c = client(url, token)
        if not follow:
            lines = c.get_job_logs(job_id)["lines"]
            if output == OutputFormat.json:
                emit(lines, output)
            else:
                for ln in lines:
                    stdout.print(f"{ln['time']}  {ln['message']}", highlight=False)
            return
        for event, data in c.follow_job_logs(job_id):
            if event != "log":
                continue
            if output == OutputFormat.json:
                print(_json_line(data), flush=True)
            else:
                stdout.print(f"{data['time']}  {data['message']}", highlight=False)


def _json_line(data: Any) -> str:
    import json

    return json.dumps(data, default=str)
