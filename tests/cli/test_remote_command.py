"""``cli.remote.remote_command``: a command that takes the client first gets --url and
--token where a hand-written signature had them (before --output), and runs inside
``remote(url, token)`` (one-line errors, never a traceback)."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from podfleet.cli.output import OutputFormat, OutputOpt
from podfleet.cli.remote import remote_command
from podfleet.errors import ConflictError
from podfleet.sdk import PodfleetClient

app = typer.Typer(context_settings={"help_option_names": ["-h", "--help"]}, rich_markup_mode=None)
seen: list[tuple[str, str, OutputFormat]] = []


@app.command("show")
@remote_command
def show(c: PodfleetClient, name: str = typer.Argument(..., help="a name"), output: OutputFormat = OutputOpt) -> None:
    """Show NAME."""
    seen.append((c.url, name, output))


@app.command("fail")
@remote_command
def fail(c: PodfleetClient) -> None:
    raise ConflictError("it is busy")


def test_url_and_token_come_before_output_and_reach_the_client() -> None:
    runner = CliRunner()
    text = runner.invoke(app, ["show", "-h"], terminal_width=120).output
    assert "Show NAME." in text
    order = [m.group(1) for m in re.finditer(r"(--url|--token|--output)\b", text)]
    assert order == ["--url", "--token", "--output"], text
    r = runner.invoke(app, ["show", "x", "--url", "http://10.0.0.9:8470", "--token", "t", "-o", "json"])
    assert r.exit_code == 0, r.output
    assert seen[-1] == ("http://10.0.0.9:8470", "x", OutputFormat.json)


def test_without_output_they_come_last_and_errors_are_one_line() -> None:
    runner = CliRunner()
    text = runner.invoke(app, ["fail", "-h"], terminal_width=120).output
    assert re.findall(r"(--url|--token)\b", text) == ["--url", "--token"], text
    r = runner.invoke(app, ["fail", "--token", "t"])
    assert r.exit_code == ConflictError.exit_code, r.output
    assert "it is busy" in r.output and "Traceback" not in r.output
