"""What the console asks of the API's authentication (``podfleet.api.console_port`` answers it).

The console is mounted by the server (``api.server.build_server``), which hands it
``api.console_port.ApiConsoleAuth`` as this port; the console never imports the API, so the two meet
in one direction only (server -> console) and its routes authorise and audit exactly as
every ``/v1`` route does.
"""

from __future__ import annotations

from typing import Any, Protocol

from fastapi import Request
from starlette.requests import HTTPConnection


class ConsoleAuth(Protocol):
    async def authorize(self, request: Request) -> object:
        """The caller may run the route's operation (its ``operation_id``), or raise 401/403."""

    def client_address(self, conn: HTTPConnection) -> str: ...

    async def deny(self, app: Any, *, client: str, actor: str, action: str, target: str,
                   detail: dict[str, Any]) -> None:
        """Audit a refusal the console made itself (a sign-in with a bad token)."""

    def credential_live(self, conn: HTTPConnection) -> bool:
        """Whether the token (or console session) a stream was let in with still stands."""

    def failed_authentication(self, app: Any, client: str) -> float | None:
        """Spend one failed authentication of ``client``: None, or seconds until it may retry."""


def auth_of(request: Request) -> ConsoleAuth:
    auth: ConsoleAuth = request.app.state.console_auth  # set by ``console.mount``
    return auth


async def authorized(request: Request) -> object:
    """A route dependency: authorise as the route's operation through the mounted port."""
    return await auth_of(request).authorize(request)
