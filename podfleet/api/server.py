"""``podfleet up``: store + timeline + control plane + API, served by uvicorn."""

from __future__ import annotations

from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from podfleet.api.main import create_app
from podfleet.compose import build
from podfleet.control.plane import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.errors import InfeasibleError
from podfleet.fabric.factory import available_fabrics
from podfleet.security.tokens import (
    Role,
    generate_token,
    hash_token,
    new_token_id,
    validate_supplied_token,
)
from podfleet.settings import Settings
from podfleet.store.protocol import StoreProtocol
from podfleet.store.records import TokenRecord


@dataclass
class Server:
    app: FastAPI
    plane: ControlPlane
    store: StoreProtocol
    admin_token: str | None  # set only when this start created it (show once)
    admin_from_env: bool


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
    if store is None:
        from podfleet.store import open_store

        store = open_store(settings.db)
    tl = Timeline(seed=settings.seed, speed=settings.speed, log_keep=20_000)
    if settings.fabric not in available_fabrics():
        raise InfeasibleError(
            f"fabric {settings.fabric!r} not available; available: {', '.join(available_fabrics())}",
            field="fabric", allowed=available_fabrics(),
        )
    # Plane, health scans and alerts, recovery flows, firmware rollouts (podfleet.compose).
    parts = build(store, tl, telemetry_interval_s=settings.telemetry_interval_s, default_fabric=settings.fabric)
    plane = parts.plane
    supplied = settings.admin_token.get_secret_value() if settings.admin_token else None
    token, from_env = bootstrap_admin(plane, supplied)
    return Server(create_app(plane, parts.health), plane, store, token, from_env)


def ensure_default_cluster(plane: ControlPlane, name: str | None) -> str | None:
    """Create the simulated 64-chip pod ``name`` unless a live cluster has that name.
    Returns the id of the cluster created, else None (engine thread via call_sync)."""
    if not name or plane.store.find_cluster_by_name(name) is not None:
        return None
    view = plane.call_sync(plane.create_cluster, {"name": name, "type": "trn2-ultraserver", "spares": 2},
                           actor="system")
    return str(view["id"])


def run(server: Server, host: str, port: int, default_cluster: str | None = None) -> None:
    """Reload + reconcile, then serve until interrupted."""
    server.plane.start()
    ensure_default_cluster(server.plane, default_cluster)
    try:
        uvicorn.run(server.app, host=host, port=port, log_level="warning", access_log=False)
    finally:
        server.plane.stop()
        server.store.close()
