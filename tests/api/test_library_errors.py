"""A fabric library's own refusal that reaches the API is answered in podfleet's words:
Ray's token refusal after the connect (the connect maps its own) is a 503 naming the fix,
never ``internal error (AuthenticationError)``."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI

from podfleet.api import problems
from podfleet.fabric.ray.auth import is_auth_error


def _get(exc: BaseException) -> httpx.Response:
    """GET a route that raises ``exc``, through the API's own error handlers."""
    app = FastAPI()
    problems.install(app)

    @app.get("/boom")
    def boom() -> None:
        raise exc

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.get("/boom")

    return asyncio.run(go())


def test_a_ray_token_refusal_is_a_503_naming_the_fix() -> None:
    ray = pytest.importorskip("ray")
    exc = ray.exceptions.AuthenticationError("Token authentication is enabled but no token was found.\nMore.")
    r = _get(exc)
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["code"] == "unavailable" and "AuthenticationError" not in body["detail"]
    assert body["detail"].startswith("the Ray cluster needs an authentication token")
    assert "no token was found" in body["detail"] and "RAY_AUTH_TOKEN" in body["detail"]
    assert "\n" not in body["detail"]


def test_any_other_library_error_is_still_an_internal_error() -> None:
    r = _get(KeyError("x"))
    assert r.status_code == 500 and "internal error (KeyError)" in r.json()["detail"]


def test_the_refusal_is_known_by_its_class_without_loading_ray() -> None:
    # What the API sees of a Ray it never imported: the class's name and module (Ray's
    # own subclasses count too); a same-named class of another library does not.
    fake = type("AuthenticationError", (RuntimeError,), {"__module__": "ray.exceptions"})
    sub = type("TokenMissing", (fake,), {"__module__": "ray._private.auth"})
    other = type("AuthenticationError", (RuntimeError,), {"__module__": "paramiko.ssh_exception"})
    assert is_auth_error(fake("no token")) and is_auth_error(sub("no token"))
    assert not is_auth_error(other("bad key")) and not is_auth_error(RuntimeError("x"))
    assert _get(sub("Token authentication is enabled")).status_code == 503
    assert _get(other("bad key")).status_code == 500
