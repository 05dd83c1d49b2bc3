"""``podfleet up``: serve the control plane (API) with embedded defaults."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, stderr
from podfleet.errors import ConflictError, InvalidInputError
from podfleet.settings import get_settings


def up(
    fabric: str | None = typer.Option(None, "--fabric", help="default fabric for clusters: sim, local, ray or neuron (PODFLEET_FABRIC)"),
    db: str | None = typer.Option(None, "--db", help="store URL (default ~/.podfleet/podfleet.db)"),
    host: str | None = typer.Option(None, "--host", help="listen address (127.0.0.1)"),
    port: int | None = typer.Option(None, "--port", help="listen port (8470)"),
    speed: float | None = typer.Option(None, "--speed", help="timeline pace: 1 = wall clock"),
    seed: int | None = typer.Option(None, "--seed", help="seed of the timeline's RNG"),
    default_cluster: str | None = typer.Option(
        None, "--default-cluster", help="create this simulated 64-chip trn2-ultraserver cluster on start if missing"),
    tls_cert: str | None = typer.Option(None, "--tls-cert", help="serve HTTPS: certificate (PEM)"),
    tls_key: str | None = typer.Option(None, "--tls-key", help="serve HTTPS: private key (PEM)"),
    demo: bool = typer.Option(False, "--demo", help="a pod that moves: pod-0 with a running job, a queued one "
                              "and a chip failure a minute in, at 20x the wall clock (own store "
                              "~/.podfleet/demo.db unless --db)"),
    metrics_per_chip: bool = typer.Option(False, "--metrics-per-chip",
                                          help="/metrics: a series per chip and link even for large fleet "
                                               "clusters (default: per-pod rollups above 16 pods)"),
    agent: bool | None = typer.Option(None, "--agent/--no-agent", help="local workers owned by the host's agent "
                               "(podfleet agent), so they outlive a restart of this server (PODFLEET_LOCAL_AGENT)"),
    output: OutputFormat = OutputOpt,
) -> None:
    """Serve the control plane: embedded SQLite and a simulated pod by default."""
    from podfleet.api.demo import DEMO_DB, DEMO_SPEED, start_demo
    from podfleet.api.proxies import parse_trusted_proxies
    from podfleet.api.server import build_server, check_tls, run
    from podfleet.fabric.factory import check_worker_settings
    from podfleet.security.harden import set_undumpable

    with errors():
        if demo:
            default_cluster = default_cluster or "pod-0"
            speed = speed or DEMO_SPEED
            db = db or DEMO_DB
        settings = get_settings(fabric=fabric, db=db, host=host, port=port, speed=speed, seed=seed,
                                    default_cluster=default_cluster, tls_cert=tls_cert, tls_key=tls_key,
                                    metrics_per_chip=metrics_per_chip or None, local_agent=agent)
        if settings.local_agent is None:  # served: on unless asked off
            settings = settings.model_copy(update={"local_agent": True})
        check_tls(settings.tls_cert, settings.tls_key)
        parse_trusted_proxies(settings.trusted_proxies)  # a typo stops the start before a token is made
        # Before the store is opened or a token made: nothing is printed, and no admin
        # token is issued that nobody could use, when the server cannot listen.
        check_port(settings.host, settings.port)
        # A root server that would run job code as root refuses here, before it serves.
        check_worker_settings(settings.fabric)
        # Before any secret is read: where workers share the server's uid (a server that
        # is not root), they cannot read its memory or /proc/PID/environ (the admin token).
        set_undumpable()
        with store_errors(settings.db):
            server = build_server(settings)
        if demo:
            start_demo(server.plane, settings.default_cluster or "pod-0")
        url = f"{'https' if settings.tls_cert else 'http'}://{settings.host}:{settings.port}"
        info = {"url": url, "store": _redact(str(server.store.url)), "fabric": settings.fabric, "speed": settings.speed,
                "admin_token": server.admin_token if server.admin_token and not server.admin_from_env else None}
        if output == OutputFormat.json:
            emit(info, output)
        else:
            stderr.print(f"podfleet serving at {url} (store {info['store']}, fabric {settings.fabric})")
            if server.admin_token and not server.admin_from_env:
                stderr.print("admin token (shown once; export it as PODFLEET_TOKEN):")
                print(server.admin_token)
            elif server.admin_from_env:
                stderr.print("admin token: the one in PODFLEET_ADMIN_TOKEN")
        sys.stdout.flush()
        if settings.default_cluster:
            stderr.print(f"simulated pod: {settings.default_cluster} (trn2-ultraserver, 64 chips, 2 spares)")
        if demo:
            stderr.print(f"demo at {settings.speed:g}x: a llama3-8b job runs, a second one queues, a chip fails "
                         f"a minute in. Watch it: podfleet job list --watch · podfleet cluster events "
                         f"{settings.default_cluster} -f · the console at {url}/")
        run(server, settings.host, settings.port, settings.default_cluster,
            tls_cert=settings.tls_cert, tls_key=settings.tls_key, header_timeout_s=settings.header_timeout_s)


@contextmanager
def store_errors(db: str | None) -> Iterator[None]:
    """A store that cannot be opened (a path that cannot exist, a database that refuses)
    is one line naming it, never a traceback."""
    from sqlalchemy.exc import SQLAlchemyError

    where = db or "the default store (~/.podfleet/podfleet.db)"
    try:
        yield
    except OSError as exc:
        raise InvalidInputError(f"cannot open store {where}: {exc.strerror or exc}"
                                + (f": {exc.filename}" if exc.filename else ""), field="db") from None
    except SQLAlchemyError as exc:
        raise InvalidInputError(f"cannot open store {where}: {str(exc.orig if hasattr(exc, 'orig') else exc)[:300]}",
                                field="db") from None


def check_port(host: str, port: int) -> None:
    """Refuse, in one line, a port another process listens on."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise InvalidInputError(f"--host {host}: {exc.strerror or exc}", field="host") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As uvicorn binds: a socket in TIME_WAIT is no obstacle, a listener is.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            raise ConflictError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another podfleet up "
                                "running? stop it or pass --port N)", field="port") from None


def _redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
