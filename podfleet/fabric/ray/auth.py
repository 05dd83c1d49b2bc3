"""Ray's token authentication, as podfleet says it: one line naming the fix.

Imports no Ray (the API maps a stray ``ray.exceptions.AuthenticationError`` by its class,
which must not load Ray into a server that never made a Ray cluster)."""

from __future__ import annotations

from typing import Any

from podfleet.errors import InfeasibleError, UnavailableError

# Where Ray's token authentication looks for the token (docs/ray.md, "Token authentication").
AUTH_FIX = ("set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, default ~/.ray/auth_token) to the cluster's token "
            "and RAY_AUTH_MODE=token in the server's environment, then restart it")
_GENERIC = "authentication token is missing or incorrect"


def auth_error(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's token-authentication error (``ray.exceptions.AuthenticationError``, raised
    when token auth is on and this process has no token or a wrong one); none on a Ray
    without token auth."""
    cls = getattr(getattr(ray, "exceptions", None), "AuthenticationError", None)
    return (cls,) if isinstance(cls, type) and issubclass(cls, BaseException) else ()


def is_auth_error(exc: BaseException) -> bool:
    """Whether ``exc`` is Ray's AuthenticationError (by class and module: Ray stays unloaded)."""
    return any(c.__name__ == "AuthenticationError" and c.__module__.split(".")[0] == "ray"
               for c in type(exc).__mro__)


def _why(exc: BaseException) -> str:
    why = str(getattr(exc, "message", "") or exc or _GENERIC).strip()
    return why.splitlines()[0].rstrip(".") if why else _GENERIC


def auth_refused(address: str | None, exc: BaseException) -> InfeasibleError:
    """At connect: one line naming the fix, instead of Ray's multi-sentence error (or a 500)."""
    return InfeasibleError(f"cannot connect to Ray at {address!r}: the cluster uses token authentication "
                           f"and refused this server ({_why(exc)}): {AUTH_FIX}", field="ray_address")


def auth_lost(exc: BaseException) -> UnavailableError:
    """After connect (a token rotated on the cluster, a call the connect did not make): the
    request changed nothing and works again once the server has the cluster's token."""
    return UnavailableError(f"the Ray cluster needs an authentication token and refused this server's "
                            f"({_why(exc)}): {AUTH_FIX}", field="ray_address")
