"""``podfleet up``: serve the control plane (API) with embedded defaults."""

from __future__ import annotations

import re
import sys

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, stderr
from podfleet.settings import get_settings


def up(
    fabric: str | None = typer.Option(None, "--fabric", help="default fabric for clusters: sim|local|ray"),
    db: str | None = typer.Option(None, "--db", help="store URL (default ~/.podfleet/podfleet.db)"),
    host: str | None = typer.Option(None, "--host", help="listen address (127.0.0.1)"),
    port: int | None = typer.Option(None, "--port", help="listen port (8470)"),
    speed: float | None = typer.Option(None, "--speed", help="timeline pace: 1 = wall clock"),
    seed: int | None = typer.Option(None, "--seed", help="seed of the timeline's RNG"),
    default_cluster: str | None = typer.Option(
        None, "--default-cluster", help="create this simulated 64-chip trn2-ultraserver cluster on start if missing"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Serve the control plane: embedded SQLite and a simulated pod by default."""
    from podfleet.api.server import build_server, run

    with errors():
        settings = get_settings(fabric=fabric, db=db, host=host, port=port, speed=speed, seed=seed,
                                    default_cluster=default_cluster)
        server = build_server(settings)
        url = f"http://{settings.host}:{settings.port}"
        info = {"url": url, "store": _redact(str(server.store.url)), "fabric": settings.fabric, "speed": settings.speed,
                "admin_token": server.admin_token if server.admin_token and not server.admin_from_env else None}
        if output == OutputFormat.json:
            emit(info, output)
        else:
            stderr.print(f"podfleet serving at [bold]{url}[/bold] (store {info['store']}, fabric {settings.fabric})")
            if server.admin_token and not server.admin_from_env:
                stderr.print("admin token (shown once; export it as PODFLEET_TOKEN):")
                print(server.admin_token)
            elif server.admin_from_env:
                stderr.print("admin token: the one in PODFLEET_ADMIN_TOKEN")
        sys.stdout.flush()
        if settings.default_cluster:
            stderr.print(f"simulated pod: {settings.default_cluster} (trn2-ultraserver, 64 chips, 2 spares)")
        run(server, settings.host, settings.port, settings.default_cluster)


def _redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
