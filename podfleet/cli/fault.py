"""``podfleet fault inject CLUSTER --kind KIND (--chip N | --link A-B)``."""

from __future__ import annotations

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors
from podfleet.cli.remote import TokenOpt, UrlOpt, client
from podfleet.errors import InvalidInputError

app = typer.Typer(help="Fault injection (the twin).", no_args_is_help=True)


@app.command("inject")
def inject(
    cluster: str = typer.Argument(..., help="id or name"),
    kind: str = typer.Option(..., "--kind", help="chip-failure, hbm-corrected-burst, hbm-uncorrectable, "
                             "sram-uncorrectable, link-down, link-flap, thermal-runaway, firmware-fault"),
    chip: int = typer.Option(None, "--chip", help="chip index (chip faults)"),
    link: str = typer.Option(None, "--link", help="A-B: the link between chips A and B (link faults)"),
    url: str = UrlOpt,
    token: str = TokenOpt,
    output: OutputFormat = OutputOpt,
) -> None:
    """Inject a fault at one chip or link."""
    with errors():
        if (chip is None) == (link is None):
            raise InvalidInputError("give exactly one of --chip N or --link A-B", field="chip",
                                    allowed=["--chip N", "--link A-B"])
        emit(client(url, token).inject_fault(cluster, kind, chip=chip, link=link), output, title="fault")
