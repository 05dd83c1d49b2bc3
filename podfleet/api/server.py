"""``podfleet up``: store + timeline + control plane + API, served by uvicorn."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import uvicorn
from fastapi import FastAPI

from podfleet.advisor import reports
from podfleet.api import connections
from podfleet.api.console_port import ApiConsoleAuth
from podfleet.api.guard import GuardConfig
from podfleet.api.leadership import Leadership, Sole
from podfleet.api.main import create_app
from podfleet.api.proxies import parse_trusted_proxies
from podfleet.compose import build
from podfleet.console import mount as mount_console
from podfleet.control.fabricaccess import FabricAccess
from podfleet.control.plane import ControlPlane
from podfleet.control.warm import Warmth
from podfleet.control.workdir import workdir_root
from podfleet.engine.timeline import Timeline
from podfleet.errors import InfeasibleError, InvalidInputError, PodfleetError
from podfleet.fabric.factory import available_fabrics, with_agent
from podfleet.security import files
from podfleet.security.digest_sinks import copy_sink
from podfleet.security.digests import AuditTrail, DigestWriter, default_digests_dir, signing_key
from podfleet.security.keyring import current_key, provider_for
from podfleet.security.retention import ARCHIVE_KEY, DAY_S, archive_old
from podfleet.security.tokens import (
    Role,
    generate_token,
    hash_token,
    new_token_id,
    validate_supplied_token,
)
from podfleet.settings import Settings
from podfleet.store.db import Store
from podfleet.store.election import Elector
from podfleet.store.election import Role as ServerRole
from podfleet.store.exclusive import hold_sqlite
from podfleet.store.lease import Fence, Lease
from podfleet.store.protocol import StoreProtocol
from podfleet.store.records import TokenRecord

AUDIT_MAC_KEY = "audit-mac"
# While serving, a full collection of the cyclic GC runs after this many collections of
# the middle generation (CPython's default: 10; see ``quiet_gc``).
GC_FULL_AFTER = 100
# SIGTERM stops the server within 10 s whatever hangs: open requests (live streams) get
# this long to finish, and the cleanup after them this long before the process exits
# anyway (everything acknowledged is already committed; a restart reloads the store).
GRACEFUL_S = 3
CLEANUP_S = 5.0
# A server whose leadership ended exits with this (EX_TEMPFAIL): its memory may be ahead of
# what the new leader reloads, so it starts again as a follower (systemd Restart=always).
LOST_LEADERSHIP_EXIT = 75
# A follower's warm-up round (``control.warm``): jobs submitted since the last one are
# parsed ahead of a takeover; the few newer than that are parsed by the reload.
WARM_INTERVAL_S = 2.0
log = logging.getLogger("podfleet.server")


@dataclass
class Server:
    app: FastAPI
    plane: ControlPlane
    store: StoreProtocol
    admin_token: str | None  # set only when this start created it (show once)
    admin_from_env: bool
    digests: DigestWriter | None = None  # signed audit digests, outside the database
    # Several servers on one PostgreSQL store: this one's side of the election (None: it
    # shares the store with nobody and always leads).
    elector: Elector | None = None
    role: ServingRole | None = None
    sole: Sole | None = None  # the leadership of a server that shares its store with nobody
    sqlite_lock: IO[str] | None = field(default=None, repr=False)  # held for the process's life
    stopping: threading.Event = field(default_factory=threading.Event)  # set by a clean shutdown


class ServingRole:
    """The role the API acts on: a server leads once its engine has reloaded, not merely
    when it won the lease (until then it answers 503, so no request sees an empty plane)."""

    def __init__(self, elector: Elector) -> None:
        self.elector = elector
        self.holder = elector.holder
        self.serving = threading.Event()

    @property
    def term(self) -> int | None:
        return self.elector.term

    @property
    def role(self) -> ServerRole:
        return ServerRole.LEADER if self.serving.is_set() and self.elector.leads() else ServerRole.FOLLOWER

    @property
    def serves_reads(self) -> bool:
        return self.serving.is_set() and self.elector.serves_reads

    @property
    def reloaded(self) -> bool:
        return self.serving.is_set()

    def leader_url(self) -> str | None:
        if self.elector.leads():
            return self.elector.url if self.serving.is_set() else None
        return self.elector.leader_url()


def bootstrap_admin(plane: ControlPlane, supplied: str | None) -> tuple[str | None, bool]:
    """First start: create the admin token (``PODFLEET_ADMIN_TOKEN`` fixes it). Engine thread."""
    store = plane.store
    if store.count_tokens() > 0:
        return None, False
    token = validate_supplied_token(supplied) if supplied else generate_token()
    with store.transaction():
        rec = TokenRecord(new_token_id(), "admin", Role.ADMIN.value, hash_token(token), plane.now())
        store.add_token(rec)
        store.append_audit(time=plane.now(), actor="system", action="CreateToken", target=rec.id,
                           result="ok", detail={"name": "admin", "role": "admin",
                                                "source": "PODFLEET_ADMIN_TOKEN" if supplied else "generated"})
    return token, bool(supplied)


def build_server(settings: Settings, store: StoreProtocol | None = None) -> Server:
    # The allow-lists first: a malformed one is refused before anything is opened.
    access = FabricAccess.parse(settings.ray_addresses, os.environ.get("PODFLEET_RAY_ADDRESS") or None,
                                settings.neuron_commands)
    if store is None:
        from podfleet.store import open_store

        # Serving for real: everything this process and its workers create is owner-only
        # (database, WAL, logs, checkpoints); files an older version left open are tightened.
        files.private_umask()
        store = open_store(settings.db)
        files.tighten(*files.sqlite_files(str(store.url)))
    elector, lock = elect(settings, store)
    # Only a leader mints keys: servers sharing a store must share one key provider, so a
    # follower whose provider lacks them is refused (below) rather than minting its own.
    leads = elector is None or elector.leads()
    # The audit chain is MACed with a key from the key provider before anything is
    # audited, and its head signed (Ed25519) into digests outside the database.
    provider = provider_for(key_dir=settings.key_dir, key_command=settings.key_command, key_url=settings.key_url)
    kid, mac, known = shared_key(provider, AUDIT_MAC_KEY, create=leads, shared=elector is not None)
    store.use_audit_keys(kid, mac, known)
    check_audit_key(store)
    signer = signing_key(provider, create=leads)
    where = settings.audit_digests_dir or default_digests_dir(str(store.url))
    tl = Timeline(seed=settings.seed, speed=settings.speed, log_keep=20_000)
    if settings.fabric not in available_fabrics():
        raise InfeasibleError(
            f"fabric {settings.fabric!r} not available; available: {', '.join(available_fabrics())}",
            field="fabric", allowed=available_fabrics(),
        )
    # Plane, health scans and alerts, recovery flows, firmware rollouts (podfleet.compose).
    factory = None
    if settings.local_agent:
        # Local workers are owned by the host's agent: a restart of this server leaves them running.
        factory = with_agent(workdir_root(None))
    parts = build(store, tl, fabric_factory=factory, telemetry_interval_s=settings.telemetry_interval_s,
                  default_fabric=settings.fabric,
                  fabric_access=access, connect_timeout_s=settings.fabric_connect_timeout_s,
                  hang_restarts=settings.hang_restarts, firmware_command=settings.firmware_command)
    plane = parts.plane
    supplied = settings.admin_token.get_secret_value() if settings.admin_token else None
    token, from_env = bootstrap_admin(plane, supplied) if leads else (None, False)
    digests = None
    if where:
        # Retention runs with the digests: old records archived (encrypted) beside them, then pruned.
        archive_key = shared_key(provider, ARCHIVE_KEY, create=leads, shared=elector is not None)[1]
        retention_s = settings.audit_retention_days * DAY_S
        archives = Path(where) / "archives"

        def retain() -> object:
            return archive_old(store, archives, key=archive_key, signer=signer, now=plane.now(),
                               retention_s=retention_s)

        copies = (copy_sink(settings.audit_digests, settings.audit_digests_command, primary=Path(where)),) \
            if settings.audit_digests else ()
        digests = DigestWriter(store.audit_head, Path(where), signer, settings.audit_digest_interval_s, retain,
                               every_records=settings.audit_digest_every, copies=copies)
    role = ServingRole(elector) if elector is not None else None
    # A sole server built here serves from the start: its caller starts the plane (tests,
    # embedding). ``run`` clears ``ready`` before it listens and sets it once it has reloaded.
    leadership: Leadership = role if role is not None else Sole(instance_name(settings))
    app = create_app(plane, parts.health, guard_config(settings), recovery=parts.recovery, firmware=parts.firmware,
                     maintenance=parts.maintenance,
                     leadership=leadership, metrics_per_chip=settings.metrics_per_chip)
    # Health reports: archived in the store with retention, every active cluster's generated daily.
    app.state.reports = reports.StoredReports(store, settings.report_retention_days)
    reports.schedule_daily(plane, parts.health, parts.recovery, app.state.reports)
    # Seals users' TOTP secrets.
    app.state.mfa_key = shared_key(provider, "mfa-seal", create=leads, shared=elector is not None)[1]
    if digests is not None:
        app.state.audit_trail = AuditTrail(digests.directory, signer.public_key(), digests.copies, digests)
    mount_console(app, ApiConsoleAuth())  # the web console at / (the API stays under /v1), through its auth port
    return Server(app, plane, store, token, from_env, digests, elector, role,
                  leadership if isinstance(leadership, Sole) else None, lock)


def instance_name(settings: Settings) -> str:
    return settings.instance or f"{socket.gethostname()}:{settings.port}"


def elect(settings: Settings, store: StoreProtocol) -> tuple[Elector | None, IO[str] | None]:
    """SQLite: this server alone (a second one is refused). PostgreSQL: this server's side
    of the lease, after one round, so the first server of a store leads from the start."""
    if not isinstance(store, Store):
        return None, None  # an in-memory store given by a test: nobody else can share it
    if store.dialect == "sqlite":
        db = store.url.removeprefix("sqlite:///").split("?", 1)[0]
        return None, (hold_sqlite(db) if db and db != ":memory:" and "://" not in db else None)
    url = settings.advertise_url or f"{'https' if settings.tls_cert else 'http'}://{settings.host}:{settings.port}"
    elector = Elector(Lease(store.write_engine, ttl_s=settings.lease_ttl_s), instance_name(settings), url)
    elector.step()
    # A round may fail on a busy lease row (a lock timeout): that is a follower's normal
    # start, its next round asks again. A database that does not answer is an error here.
    if elector.last_error is not None and not store.ping():
        raise PodfleetError(f"cannot take part in the leadership election on {store.url}: {elector.last_error}")
    if elector.term is not None:
        store.use_fence(Fence(elector.holder, elector.term))
    # Renewals start now, while the rest of the server is built: a term won here must not
    # lapse before the engine even starts.
    elector.on_lost = lambda term, why: lost_leadership(term, why)
    elector.start()
    return elector, None


def shared_key(provider: object, base: str, *, create: bool, shared: bool) -> tuple[str, bytes, dict[str, bytes]]:
    """``current_key``, with the sentence a follower needs when its provider lacks the key."""
    try:
        return current_key(provider, base, create=create)  # type: ignore[arg-type]
    except InvalidInputError as exc:
        if not shared:
            raise
        raise InvalidInputError(
            f"no {base} key in this server's key provider: servers sharing a store must share one "
            "(PODFLEET_KEY_DIR on a shared mount holding the leader's keys, or PODFLEET_KEY_COMMAND / "
            f"PODFLEET_KEY_URL naming one KMS); {exc.message}", field="key") from None


def check_audit_key(store: StoreProtocol) -> None:
    """Refuse to serve with an audit key that does not verify the chain's newest record:
    every server on a store must MAC with, and verify against, the same key."""
    why = store.audit_key_mismatch() if isinstance(store, Store) else None
    if why is not None:
        raise InvalidInputError(
            f"{why}: servers sharing a store must share one key provider (the same PODFLEET_KEY_DIR, "
            "PODFLEET_KEY_COMMAND or PODFLEET_KEY_URL as the server that wrote it)", field="key")


def guard_config(settings: Settings) -> GuardConfig:
    return GuardConfig(
        max_body_bytes=settings.max_body_bytes, route_body_bytes={"UploadCode": settings.code_max_bytes},
        token_rate_per_s=settings.rate_limit_per_s, token_burst=settings.rate_limit_burst,
        auth_fail_rate_per_s=settings.auth_fail_per_s, auth_fail_burst=settings.auth_fail_burst,
        body_timeout_s=settings.body_timeout_s, trusted_proxies=parse_trusted_proxies(settings.trusted_proxies),
        tls=bool(settings.tls_cert),
    )


def check_tls(cert: str | None, key: str | None) -> None:
    """Both or neither, and readable: a typo must not silently serve plain HTTP."""
    if bool(cert) != bool(key):
        raise InvalidInputError("--tls-cert and --tls-key go together; give both or neither",
                                field="tls_cert" if key else "tls_key")
    for flag, path in (("tls_cert", cert), ("tls_key", key)):
        if path and not os.path.isfile(path):
            raise InvalidInputError(f"{flag.replace('_', '-')} {path} is not a readable file", field=flag)


def ensure_default_cluster(plane: ControlPlane, name: str | None) -> str | None:
    """Create the simulated 64-chip pod ``name`` unless a live cluster has that name.
    Returns the id of the cluster created, else None (engine thread via call_sync)."""
    if not name or plane.store.find_cluster_by_name(name) is not None:
        return None
    view = plane.call_sync(plane.create_cluster, {"name": name, "type": "trn2-ultraserver", "spares": 2},
                           actor="system")
    return str(view["id"])


def run(server: Server, host: str, port: int, default_cluster: str | None = None, *,
        tls_cert: str | None = None, tls_key: str | None = None,
        header_timeout_s: float = connections.HEADER_TIMEOUT_S) -> None:
    """Listen, then reload + reconcile, and serve until interrupted.

    The socket is bound first and the engine reloads the store (re-attaching to what runs)
    on a thread of its own once it is: ``/healthz`` answers from the first moment, while
    ``/v1`` answers ``503 starting`` and ``/readyz`` not ready until the reload is done
    (``Leadership.reloaded``), so nothing is ever answered from a half-rebuilt plane."""
    check_tls(tls_cert, tls_key)
    warning = files.exposure_warning(host, tls=bool(tls_cert))
    if warning:
        bar = "!" * min(len(warning), 100)
        print(f"{bar}\n{warning}\n{bar}", file=sys.stderr, flush=True)
    once = threading.Lock()

    def lead() -> None:
        """The engine: reload the store (re-attach to what runs: ``plane.load``), serve."""
        if not once.acquire(blocking=False):
            return  # already leading
        try:
            reload_and_serve()
        except Exception as exc:  # a reload that fails ends the process, as it did before it listened
            detail = exc.message if isinstance(exc, PodfleetError) else f"{type(exc).__name__}: {exc}"
            print(f"podfleet: the engine could not reload the store: {detail}", file=sys.stderr, flush=True)
            log.exception("reload failed")
            os._exit(1)

    def reload_and_serve() -> None:
        term = server.elector.term if server.elector is not None else None
        if term is not None and isinstance(server.store, Store) and server.elector is not None:
            server.store.use_fence(Fence(server.elector.holder, term))
        if warmth is not None:
            warmth.stop()
        t0 = time.monotonic()
        server.plane.start()
        ensure_default_cluster(server.plane, default_cluster)
        if term is not None:
            warm = f" ({warmth.stats.specs_warm} job specs warm, {warmth.stats.specs_parsed} parsed)" \
                if warmth is not None else ""
            print(f"podfleet: leading with term {term}: store reloaded in {time.monotonic() - t0:.2f} s{warm}",
                  file=sys.stderr, flush=True)
        if server.digests is not None:
            server.digests.start()  # the start-up digest, then one every N records and every interval
        if leads_now:  # a follower froze its start-up when it began listening
            quiet_gc()  # what the reload built stays for the process's life: frozen with the imports
        if server.sole is not None:
            server.sole.ready.set()
        if server.role is not None:
            server.role.serving.set()
            watch_engine(server)

    elector = server.elector
    if server.sole is not None:
        server.sole.ready.clear()  # listening before the reload: /v1 answers 503 starting until it is done
    # A follower does the reload's read-only work ahead of its takeover (``control.warm``).
    warmth = follow_store(server) if elector is not None and not elector.leads() else None
    if elector is not None:
        elector.on_elected = lambda term: takeover(server, term, lead)
    leads_now = elector is None or elector.leads()

    def on_listening() -> None:
        if leads_now:
            threading.Thread(target=lead, name="podfleet-reload", daemon=True).start()
        else:
            threading.Thread(target=quiet_gc, name="podfleet-gc", daemon=True).start()

    # uvicorn re-raises SIGTERM after its graceful shutdown; by default that would end the
    # process before the cleanup below (the final audit digest, the store's close).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        config = uvicorn.Config(server.app, host=host, port=port, ssl_certfile=tls_cert, ssl_keyfile=tls_key,
                                **connections.options(header_timeout_s=header_timeout_s,
                                                      timeout_graceful_shutdown=GRACEFUL_S))
        ListeningServer(config, on_listening).run()
    finally:
        server.stopping.set()
        if warmth is not None:
            warmth.stop()
        # Refusals counted but not yet written as a summary row go to the trail now.
        with contextlib.suppress(Exception):
            server.plane.tl.submit(pending_denials, server.app).result(timeout=1.0)
        server.plane.stop()
        if server.digests is not None and server.app.state.leadership.reloaded:
            server.digests.stop()  # the last digest signs the chain's final head (a leader's)
        if server.elector is not None:
            server.elector.stop()  # a clean stop hands the lease on at once
        server.store.close()


class ListeningServer(uvicorn.Server):
    """uvicorn's server, calling ``on_listening`` (on the event loop: it must not block)
    once its sockets are bound."""

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.on_listening()


def follow_store(server: Server) -> Warmth:
    warmth = Warmth(server.store)
    server.plane.jobs.use_warmth(warmth)
    threading.Thread(target=warmth.run, args=(WARM_INTERVAL_S,), name="podfleet-warm", daemon=True).start()
    return warmth


def takeover(server: Server, term: int, lead: Callable[[], None]) -> None:
    """Elector thread: this server won ``term``. Its writes carry the term from now on; the
    engine reloads on a thread of its own, so the elector goes on renewing meanwhile."""
    if isinstance(server.store, Store) and server.elector is not None:
        server.store.use_fence(Fence(server.elector.holder, term))
    if server.role is not None and server.role.serving.is_set():
        # Its own term lapsed during a store outage and nobody took over: its memory is
        # the store's, so it leads on (writes carry the new term) without a reload.
        log.warning("leader again with term %d after a store outage", term)
        return
    log.warning("leader: took over with term %d; reloading the store", term)
    threading.Thread(target=lead, name="podfleet-takeover", daemon=True).start()


def lost_leadership(term: int, why: str) -> None:
    """The term ended (taken over while this server was paused or cut off): the store already
    refuses its writes; the process ends so that it starts again as a follower."""
    print(f"podfleet: leadership term {term} ended ({why}); exiting to restart as a follower",
          file=sys.stderr, flush=True)
    os._exit(LOST_LEADERSHIP_EXIT)


def watch_engine(server: Server) -> None:
    """A leader whose engine stopped (fail-stop) hands the lease on instead of holding it
    while nothing runs: the process ends, a follower takes over and reloads."""
    def watch() -> None:
        while server.plane.engine_running:
            server.stopping.wait(0.5)
        if server.stopping.is_set():
            return  # a clean shutdown
        print("podfleet: the engine stopped; exiting so another server takes over", file=sys.stderr, flush=True)
        os._exit(LOST_LEADERSHIP_EXIT)

    threading.Thread(target=watch, name="podfleet-engine-watch", daemon=True).start()


def quiet_gc() -> None:
    """Keep the cyclic garbage collector from pausing the server for long.

    A full collection walks every tracked object while holding the GIL, so it stops the
    event loop and the engine together: with the libraries, the fleet and a long job
    queue in memory, that was 100-260 ms, several times a minute under load, the worst of
    the API's tail. What exists once the server is up (imports, the reloaded fleet) stays for
    the process's life, so it is frozen out of collections; and full collections run ten
    times less often (requests allocate fast, but little of it forms cycles: reference
    counting frees the rest, and the young collections, short, still find the cycles).
    A frozen object that later becomes cyclic garbage is never collected: nothing alive
    at start-up is expected to."""
    gc.collect()
    gc.freeze()
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(gen0, gen1, GC_FULL_AFTER)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # The cleanup (jobs stopped, fabrics closed, the last digest) may wait on something
    # that hangs (a Ray head gone, a worker that ignores signals): it gets CLEANUP_S.
    watchdog = threading.Timer(CLEANUP_S, os._exit, args=(128 + signum,))
    watchdog.daemon = True
    watchdog.start()
    raise SystemExit(128 + signum)


def pending_denials(app: FastAPI) -> None:
    """Engine thread: write the denial summaries still pending (shutdown)."""
    plane = app.state.plane
    for r in app.state.denials.flush():
        plane.audit(r.actor, r.action, r.target, "denied", r.detail)
