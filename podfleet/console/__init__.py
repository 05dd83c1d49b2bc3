"""The web console, served by ``podfleet up`` at ``/`` beside the ``/v1`` API.

Its pages are built from ``console/`` (TypeScript, Vite, uPlot) into ``dist/`` here;
this package serves them, and holds the cookie sessions the pages sign in with.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from podfleet.console.auth_port import ConsoleAuth
from podfleet.console.csrf import CsrfGuard
from podfleet.console.live import SnapshotHub
from podfleet.console.routes import DIST, router
from podfleet.console.sessions import SessionStore

__all__ = ["mount"]


def mount(app: FastAPI, auth: ConsoleAuth, sessions: SessionStore | None = None) -> SessionStore:
    """Serve the console on ``app``: its pages, assets and sign-in routes, the CSRF
    check of cookie writes, and the cookie hook ``podfleet.api.auth.presented_token``
    asks for a token when no bearer is sent. ``auth``: how its routes authorise and audit
    refusals (the server passes ``api.console_port.ApiConsoleAuth()``). Call after ``create_app``, before
    serving."""
    store = sessions or SessionStore()
    app.state.console_auth = auth
    app.state.console_sessions = store
    app.state.cookie_auth = store.presented_token
    app.state.snapshot_hub = SnapshotHub(app.state.plane)  # the live streams' fan-out
    app.include_router(router)
    app.add_middleware(CsrfGuard, sessions=store)  # added last: outermost, before authentication
    if (DIST / "assets").is_dir():  # unbuilt: the pages answer 503 with how to build them
        app.mount("/assets", StaticFiles(directory=DIST / "assets"), name="console-assets")
    return store
