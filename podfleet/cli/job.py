"""``podfleet job submit|list|describe|wait|metrics|stop|logs``: training jobs, and following them."""

from __future__ import annotations

import csv
import re
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from podfleet.cli.follow import ETA_COLUMNS, WAIT_CODES, wait_for, watch
from podfleet.cli.output import OutputFormat, OutputOpt, Record, emit, errors, line, record, stdout
from podfleet.cli.remote import TokenOpt, UrlOpt, client, remote_command
from podfleet.errors import InvalidInputError
from podfleet.sdk import PodfleetClient
from podfleet.timespec import parse_duration

app = typer.Typer(help="Training jobs.", no_args_is_help=True)
COLUMNS = ["id", "name", "cluster", "state", "model", "chips", "progress", "tokens_per_s", "why", "reason"]
CODE_REF = re.compile(r"code:[0-9a-f]{64}/[^\x00]+")
JOB_STATES = ("PENDING", "PLACING", "RUNNING", "CHECKPOINTING", "RECOVERING", "SUCCEEDED", "FAILED", "STOPPED")


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
                              "local/ray clusters debug, tiny, small, medium (optional with --entrypoint)"),
    chips: int | None = typer.Option(None, "--chips", help="chips for the gang (all or none); with --pods, "
                                     "default every chip of that many pods"),
    pods: int | None = typer.Option(None, "--pods", help="fleet clusters: run on exactly N pods (chips / N on each)"),
    topology_required: str | None = typer.Option(None, "--topology-required",
                                                 help="pod | block: wait rather than cross this network level"),
    topology_preferred: str | None = typer.Option(None, "--topology-preferred",
                                                  help="pod | block: cross this level as little as possible"),
    on_pod_loss: str | None = typer.Option(None, "--on-pod-loss",
                                           help="fleet clusters, when a pod it spans is lost: wait | requeue "
                                                "(default) | shrink"),
    steps: int = typer.Option(1000, "--steps", help="training steps to run (1 or more)"),
    checkpoint_interval: int = typer.Option(100, "--checkpoint-interval", help="steps; 0 = never"),
    priority: str = typer.Option("50", "--priority", help="0-100 (higher first), or a priority class name"),
    team: str | None = typer.Option(None, "--team", help="quota owner (the cluster's quotas)"),
    parallelism: str = typer.Option("auto", "--parallelism", help="auto or TP,PP,DP"),
    entrypoint: str | None = typer.Option(None, "--entrypoint", help="training script (real fabrics): a local "
                                          "file (pushed for you, as podfleet code push does) or code:<sha256>/<script> "
                                          "from podfleet code push"),
    server_path: bool = typer.Option(False, "--server-path", help="send --entrypoint as a path on the server's host "
                                     "(a directory an admin allowed: PODFLEET_CODE_DIRS) instead of pushing it"),
    name: str | None = typer.Option(None, "--name", help="a name to show beside the id (default: none)"),
    max_retries: int | None = typer.Option(None, "--max-retries", help="local/ray: crashes in the job's code allowed"),
    option: list[str] = typer.Option(None, "--option", help="local/ray worker option KEY=VALUE (repeatable): "
                                     "seed, global_batch, seq_len, lr, step_delay_s, threads, checkpoint_dir, ..."),
    client_token: str | None = typer.Option(None, "--client-token", help="idempotency key for retries"),
    grad_compression: str | None = typer.Option(None, "--grad-compression",
                                                help="none, bf16, powersgd:RANK or lossless (zstd, bit-identical)"),
    queue: str | None = typer.Option(None, "--queue", help="the cluster queue (default: the cluster's default)"),
    after_ok: str | None = typer.Option(None, "--after-ok", help="ID[,ID]: start after these jobs (or arrays) "
                                        "succeeded; if one fails, this job fails"),
    after_any: str | None = typer.Option(None, "--after-any", help="ID[,ID]: start after these jobs ended"),
    array: str | None = typer.Option(None, "--array", help="one job per index: 0-15 or 0-15%4 (at most 4 at "
                                     "once); each gets PODFLEET_ARRAY_INDEX"),
    time_limit: str | None = typer.Option(None, "--time-limit", "--time",
                                          help="Slurm's --time: how long it may run once placed (2h, 30m, "
                                               "HH:MM:SS, seconds); past it the job fails. Only a job with a "
                                               "limit may use a reservation's chips before it starts"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Submit a training job."""
    with errors():
        if model is None and entrypoint is None:
            raise InvalidInputError("give --model PRESET or --entrypoint FILE", field="model")
        # Imported here: the CLI starts without the engine's modules.
        from podfleet.control.specs import POD_LOSS_POLICIES

        if on_pod_loss is not None and on_pod_loss not in POD_LOSS_POLICIES:
            raise InvalidInputError(f"--on-pod-loss must be one of {', '.join(POD_LOSS_POLICIES)}, got "
                                    f"{on_pod_loss!r}", field="on_pod_loss", allowed=list(POD_LOSS_POLICIES))
        c = client(url, token)
        if chips is None:
            if pods is None:
                raise InvalidInputError("give --chips N (or --pods N on a fleet cluster)", field="chips")
            chips = pods * pod_chips(c, cluster)
        entry = None if entrypoint is None else entrypoint_ref(c, entrypoint, server_path=server_path)
        out = c.submit_training_job(
            cluster, model=model, chips=chips, steps=steps, checkpoint_interval=checkpoint_interval,
            priority=int(priority) if priority.isdigit() else priority, team=team, parallelism=parse_parallelism(parallelism), entrypoint=entry, name=name,
            max_retries=max_retries, options=parse_options(option or []), client_token=client_token,
            **({"grad_compression": grad_compression} if grad_compression is not None else {}),
            **{k: v for k, v in (("pods", pods), ("topology_required", topology_required),
                                 ("topology_preferred", topology_preferred), ("on_pod_loss", on_pod_loss))
               if v is not None},
            **_sharing(queue, after_ok, after_any, array),
            **({"time_limit_s": parse_duration(time_limit, "time_limit")} if time_limit is not None else {}),
        ).to_dict()
        if out.get("array"):
            emit(out["array"], output, columns=ARRAY_COLUMNS, title=f"array {out['array']['id']}")
            return
        if output == OutputFormat.table:
            out = {**out, "why": reason_code(str(out.get("state", "")), str(out.get("reason") or ""))}
        emit(out, output, columns=[*COLUMNS, "allocation"], title="job")


def pod_chips(c: PodfleetClient, cluster: str) -> int:
    """Chips in one pod of ``cluster`` (its chips over its pods; a one-pod cluster: all)."""
    cl = c.describe_cluster(cluster)
    pods = int((cl.get("spec") or {}).get("pods") or cl.get("pods") or 1)
    return int(cl.get("chips") or 0) // pods


def entrypoint_ref(c: PodfleetClient, text: str, *, server_path: bool = False) -> str:
    """What ``--entrypoint`` names, as the API takes it: a ``code:`` reference as it is; a
    local file pushed (UploadCode) and referenced; with ``--server-path``, an absolute
    path on the server's host."""
    if text.startswith("code:"):
        if not CODE_REF.fullmatch(text):
            raise InvalidInputError(f"--entrypoint {text!r} is not a code reference: code:<sha256>/<script>, "
                                    "as podfleet code push prints it", field="entrypoint")
        return text
    if server_path:
        if not text.startswith("/"):
            raise InvalidInputError(f"--entrypoint {text!r} with --server-path must be an absolute path on the "
                                    "server's host", field="entrypoint")
        return text
    path = Path(text).expanduser()
    if not path.is_file():
        raise InvalidInputError(f"--entrypoint {text!r} is neither a file here nor a code:<sha256>/<script> "
                                "reference (podfleet code push DIR prints one)", field="entrypoint")
    return str(c.push_file(str(path))["ref"]) + path.name


ARRAY_COLUMNS = ["id", "size", "limit", "state", "counts"]


def _ids(text: str | None, flag: str) -> list[str] | None:
    if text is None:
        return None
    ids = [t.strip() for t in text.split(",") if t.strip()]
    if not ids:
        raise InvalidInputError(f"{flag} needs job ids (ID[,ID]), got {text!r}", field=flag.strip("-").replace("-", "_"))
    return ids


def _sharing(queue: str | None, after_ok: str | None, after_any: str | None, array: str | None) -> dict[str, Any]:
    fields = {"queue": queue, "after_ok": _ids(after_ok, "--after-ok"), "after_any": _ids(after_any, "--after-any"),
              "array": array}
    return {k: v for k, v in fields.items() if v is not None}


def _is_array(ref: str) -> bool:
    return ref.startswith("arr-")


def _wait_array(c: PodfleetClient, array_id: str, timeout_s: float | None) -> Record:
    import time

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    out = c.describe_job_array(array_id)
    while not out["ended"] and (deadline is None or time.monotonic() < deadline):
        time.sleep(0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic())))
        out = c.describe_job_array(array_id)
    return out


@app.command("list")
def list_(
    cluster: str | None = typer.Option(None, "--cluster", help="only this cluster's jobs"),
    state: str | None = typer.Option(None, "--state", help="only jobs in this state (any case: running, RUNNING)"),
    watch_: bool = typer.Option(False, "--watch", "-w", help="redraw as jobs change, until Ctrl-C"),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="seconds between redraws with --watch"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Training jobs (every page), with their cluster's name."""
    with errors():
        wanted = _state(state)
        c = client(url, token)
        if watch_:
            watch(lambda: _list_rows(c, cluster, wanted, output), output, columns=COLUMNS, interval_s=interval)
            return
        emit(_list_rows(c, cluster, wanted, output), output, columns=COLUMNS)


def _state(state: str | None) -> str | None:
    if state is None:
        return None
    up = state.strip().upper()
    if up not in JOB_STATES:
        raise InvalidInputError(f"--state must be one of {', '.join(JOB_STATES)} (any case), got {state!r}",
                                field="state", allowed=list(JOB_STATES))
    return up


def _list_rows(c: PodfleetClient, cluster: str | None, state: str | None,
               output: OutputFormat) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    nxt = None
    while True:
        page = c.list_training_jobs(cluster=cluster, state=state, next_token=nxt)
        jobs.extend(page["jobs"])
        nxt = page.get("next_token")
        if not nxt:
            break
    if output == OutputFormat.json:
        return jobs
    names = cluster_names(c)
    return [table_row(j, names) for j in jobs]


def cluster_names(c: PodfleetClient) -> dict[str, str]:
    return {cl["id"]: cl["name"] for cl in c.iter_clusters()}


# Short reason codes beside the sentence, like squeue's NODELIST(REASON): the first rule
# whose words the scheduler's reason holds. Order matters: "no lower-priority job to
# preempt" is a job waiting for resources, not one behind a higher priority.
REASON_CODES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("QuotaExceeded", ("over quota", "quota is")),
    ("Dependency", ("depends on", "dependency")),
    ("Reservation", ("reserved by ", "held by reservation")),
    ("Preempted", ("preempted", "requeued")),
    ("Preempting", ("preempting ", "to checkpoint")),
    ("Priority", ("nominated for another job", "held for", "higher-priority job")),
    ("Resources", ("no free ", "healthy chip", "not spares", "are no longer free",
                   "gang incomplete")),
    ("None", ("next scheduling cycle",)),
)
WAITING = ("PENDING", "PLACING")


def reason_code(state: str, reason: str) -> str:
    """``Resources``, ``Priority``, ``QuotaExceeded``, ``Dependency``, ``Preempted``,
    ``Preempting`` or ``None`` for a waiting job; ``Recovering`` for one that recovers;
    "" for the others (their reason is what happened, not why they wait)."""
    if state == "RECOVERING":
        return "Recovering"
    if state not in WAITING:
        return ""
    text = reason.lower()
    return next((code for code, words in REASON_CODES if any(w in text for w in words)), "Resources")


def table_row(j: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    p = j.get("progress") or {}
    return {**j, "cluster": names.get(j["cluster_id"], j["cluster_id"]),
            "progress": f"{p.get('step', 0)}/{p.get('steps', 0)}", "tokens_per_s": p.get("tokens_per_s"),
            "why": reason_code(str(j.get("state", "")), str(j.get("reason") or ""))}


@app.command("describe")
@remote_command
def describe(c: PodfleetClient, job_id: str = typer.Argument(..., help="job id or a unique prefix of one"),
             watch_: bool = typer.Option(False, "--watch", "-w", help="a progress bar with ETA until the job ends"),
             output: OutputFormat = OutputOpt) -> None:
    """State, progress (step, loss, tokens_per_s), allocation and timestamps."""
    if _is_array(job_id):  # an array id: its members and one state for all
        out = _wait_array(c, job_id, None) if watch_ else c.describe_job_array(job_id)
        emit(out if output == OutputFormat.json else out["jobs"], output,
             columns=["id", "index", "state", "reason"], title=f"array {job_id}: {out['state']}")
        return
    if watch_:
        out = wait_for(c, job_id, timeout_s=None, show=output == OutputFormat.table)
    else:
        out = c.describe_training_job(job_id).to_dict()
    emit(out, output, title=out["id"])


@app.command("wait")
def wait(job_id: str = typer.Argument(..., help="job id or a unique prefix of one"),
         timeout: float | None = typer.Option(None, "--timeout", min=0, help="give up after S seconds (exit 124)"),
         quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bar"),
         url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Wait until the job (or every member of an array) ends. Exit code: 0 SUCCEEDED, 1 FAILED,
    7 STOPPED, 124 timed out."""
    with errors():
        if _is_array(job_id):
            arr = _wait_array(client(url, token), job_id, timeout)
            emit(arr, output, columns=ARRAY_COLUMNS, title=f"array {job_id}")
            code = WAIT_CODES.get(arr["state"], 124) if arr["ended"] else 124
            if code:
                raise typer.Exit(code)
            return
        out = wait_for(client(url, token), job_id, timeout_s=timeout,
                       show=output == OutputFormat.table and not quiet)
        emit(out, output, columns=[*COLUMNS, "timestamps"], title=out["id"])
        code = WAIT_CODES.get(out["state"], 124)
        if code:
            raise typer.Exit(code)


class MetricsFormat(StrEnum):
    table = "table"
    csv = "csv"
    plot = "plot"


METRIC_COLUMNS = ["time", "step_first", "step_last", "loss", "loss_min", "loss_max", "tokens_per_s", "step_time_s"]


@app.command("metrics")
@remote_command
def metrics(c: PodfleetClient, job_id: str = typer.Argument(..., help="job id or a unique prefix of one"),
            resolution: float | None = typer.Option(None, "--resolution", help="bucket seconds: 10 (the last hour) "
                                                    "or 300; default by the run's age"),
            fmt: MetricsFormat = typer.Option(MetricsFormat.table, "--format", "-f",
                                              help="table, csv, or plot (loss and tokens/s in the terminal)"),
            output: OutputFormat = OutputOpt) -> None:
    """The job's loss, tokens/s and step time over its run (GetJobMetrics)."""
    out = c.get_job_metrics(job_id, resolution=resolution)
    points = out["points"]
    if output == OutputFormat.json:
        emit(out, output)
    elif fmt == MetricsFormat.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(METRIC_COLUMNS)  # exact numbers, as the API sent them
        for p in points:
            w.writerow(["" if p.get(c) is None else p.get(c) for c in METRIC_COLUMNS])
    elif fmt == MetricsFormat.plot:
        plot_metrics(out)
    else:
        emit(points, output, columns=METRIC_COLUMNS,
             title=f"{out['job_id']}: {len(points)} buckets of {out['resolution_s']:g} s")


def plot_metrics(out: Record) -> None:
    import plotext as plt

    pts = [p for p in out["points"] if p.get("step_last") is not None]
    if not pts:
        line(f"{out['job_id']}: no metrics yet")
        return
    steps = [p["step_last"] for p in pts]
    series = (("loss", [p["loss"] if p["loss"] is not None else float("nan") for p in pts]),
              ("tokens/s", [p["tokens_per_s"] or 0.0 for p in pts]))
    for name, ys in series:
        plt.clear_figure()
        plt.plot(steps, ys)
        plt.title(f"{out['job_id']}: {name} by step")
        plt.xlabel("step")
        plt.plotsize(100, 15)
        chart = plt.build()
        # Piped: plain characters, no colour codes.
        stdout.print(Text.from_ansi(chart) if stdout.is_terminal else Text(plt.uncolorize(chart)), soft_wrap=True)


@app.command("stop")
def stop(job_id: str = typer.Argument(..., help="job id or a unique prefix of one"), url: str = UrlOpt,
         token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Stop a job (or every member of an array: arr-...) and free its chips."""
    with errors():
        if _is_array(job_id):
            arr = client(url, token).stop_job_array(job_id)
            emit(arr, output, columns=ARRAY_COLUMNS, title=f"array {job_id}")
            return
        out = client(url, token).stop_training_job(job_id)
        emit(out, output, columns=["id", "name", "state", "reason"], title=out["id"])


@app.command("logs")
@remote_command
def logs(c: PodfleetClient, job_id: str = typer.Argument(..., help="job id or a unique prefix of one"),
         follow: bool = typer.Option(False, "--follow", "-f", help="stream until the job ends, with a progress "
                                     "bar and ETA on stderr"),
         output: OutputFormat = OutputOpt) -> None:
    """The job's log, every line as it was written; --follow streams it until the job ends."""
    if not follow:
        lines = c.get_job_logs(job_id)["lines"]
        if output == OutputFormat.json:
            emit(lines, output)
        else:
            for ln in lines:
                record(f"{ln['time']}  {ln['message']}")
        return
    from rich.progress import Progress

    # The bar lives on a terminal only, below the lines it prints: piped output is the lines alone.
    show = output == OutputFormat.table and stdout.is_terminal
    with Progress(*ETA_COLUMNS, console=stdout, disable=not show, transient=True) as bar:
        task = bar.add_task(job_id, total=None)
        for event, data in c.follow_job_logs(job_id):
            if event == "progress" and isinstance(data, dict):
                bar.update(task, completed=data.get("step", 0), total=data.get("steps") or None)
            elif event == "log":
                if output == OutputFormat.json:
                    print(_json_line(data), flush=True)
                else:
                    record(f"{data['time']}  {data['message']}")


def _json_line(data: Any) -> str:
    import json

    return json.dumps(data, default=str)
