"""``podfleet code push DIR``: upload a directory of code for jobs to run."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, stderr
from podfleet.cli.remote import TokenOpt, UrlOpt, remote

app = typer.Typer(help="Code artifacts that jobs run.", no_args_is_help=True)


@app.command("push")
def push(
    directory: str = typer.Argument(..., help="the directory to upload (links, .git, __pycache__ left out)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Upload DIR; jobs run it with --entrypoint code:<sha256>/<script>."""
    with remote(url, token) as c:
        out = c.push_code(directory)
        emit(out, output, title="code artifact")
        if output != OutputFormat.json:
            stderr.print(f"submit jobs with: --entrypoint {out['ref']}<script.py>")
