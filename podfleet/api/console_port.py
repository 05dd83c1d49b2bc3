"""The API's side of the console's authentication port (``console.auth_port.ConsoleAuth``).

The server hands this to ``console.mount``: the console never imports the API, and its
routes authorise, audit, rate-limit failed sign-ins and re-check stream credentials
exactly as every ``/v1`` route does."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.requests import HTTPConnection

from podfleet.api import auth, guard


class ApiConsoleAuth:
    async def authorize(self, request: Request) -> object:
        return await auth.authorize(request)

    def client_address(self, conn: HTTPConnection) -> str:
        return auth.client_address(conn)

    async def deny(self, app: Any, *, client: str, actor: str, action: str, target: str,
                   detail: dict[str, Any]) -> None:
        await auth.deny(app, client=client, actor=actor, action=action, target=target, detail=detail)

    def credential_live(self, conn: HTTPConnection) -> bool:
        return auth.credential_live(conn)

    def failed_authentication(self, app: Any, client: str) -> float | None:
        return guard.failed_authentication(app, client)
