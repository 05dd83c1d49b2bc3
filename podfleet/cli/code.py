"""``podfleet code push DIR``: upload a directory of code for jobs to run."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, stderr
from podfleet.cli.remote import remote_command
from podfleet.sdk import PodfleetClient

app = typer.Typer(help="Code artifacts that jobs run.", no_args_is_help=True)


@app.command("push")
@remote_command
def push(
    c: PodfleetClient,
    directory: str = typer.Argument(..., help="the directory to upload (links, .git, __pycache__ left out)"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Upload DIR; jobs run it with --entrypoint code:<sha256>/<script>."""
    out = c.push_code(directory)
    emit(out, output, title="code artifact")
    if output != OutputFormat.json:
        stderr.print(f"submit jobs with: --entrypoint {out['ref']}<script.py>")
