"""``podfleet audit list`` / ``podfleet audit verify``."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import ChecksumError

app = typer.Typer(help="The audit trail and its integrity.", no_args_is_help=True)


@app.command("list")
def list_(
    max_results: int = typer.Option(100, "--max-results", help="records per page"),
    all_: bool = typer.Option(False, "--all", help="every page"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Audit records: who did what to which target, with what result, when."""
    with errors():
        c = client(url, token)
        events, nxt = [], None
        while True:
            page = c.list_audit_events(next_token=nxt, max_results=max_results)
            events.extend(page["events"])
            nxt = page.get("nextToken")
            if not (all_ and nxt):
                break
        emit(events, output, columns=["seq", "time", "actor", "action", "target", "result"])


@app.command("verify")
def verify(url: str = UrlOpt, token: str = TokenOpt, output: OutputFormat = OutputOpt) -> None:
    """Check the hash chain: exit 0 if intact, else name the first bad record (exit 6)."""
    with errors():
        result = client(url, token).verify_audit_chain()
        emit(result, output, title="audit chain")
        if not result["ok"]:
            raise ChecksumError(f"audit chain broken at record {result['first_bad_seq']}: {result['message']}",
                                field="seq")
