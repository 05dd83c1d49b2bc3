"""Access tokens: issue, list and revoke (engine thread, through ``ControlPlane.mutation``
so each is persisted and audited before it is acknowledged). The token itself is
returned once, at creation; only its hash is stored."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from podfleet.control.logbuf import rfc3339
from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.security.tokens import Role, generate_token, hash_token, new_token_id
from podfleet.store.records import TokenRecord

if TYPE_CHECKING:
    from podfleet.control.plane import ControlPlane


def view(rec: TokenRecord) -> dict[str, Any]:
    return {"id": rec.id, "name": rec.name, "role": rec.role, "revoked": rec.revoked,
            "created_at": rfc3339(rec.created_at)}


def create(plane: ControlPlane, name: str, role: str, *, actor: str) -> dict[str, Any]:
    def do() -> tuple[dict[str, Any], str]:
        r = Role.parse(role)
        if any(t.name == name and not t.revoked for t in plane.store.list_tokens()):
            raise ConflictError(f"a live token named {name!r} exists; revoke it or pick another name",
                                field="name")
        token = generate_token()
        rec = TokenRecord(new_token_id(), name, r.value, hash_token(token), plane.now())
        plane.store.add_token(rec)
        return {**view(rec), "token": token}, rec.id

    # The body is audited without the secret (it has none: the token is generated here).
    return plane.mutation("CreateAccessToken", actor, name, do, body={"name": name, "role": role})


def revoke(plane: ControlPlane, token_id: str, *, actor: str, own_id: str | None = None) -> dict[str, Any]:
    def do() -> tuple[dict[str, Any], str]:
        rec = plane.store.get_token(token_id)
        if rec is None:
            raise NotFoundError(f"token {token_id!r} does not exist", field="token_id")
        if token_id == own_id:
            raise InvalidInputError("a token cannot revoke itself; use another admin token", field="token_id")
        if rec.revoked:
            return view(rec), rec.id
        plane.store.revoke_token(token_id)
        rec.revoked = True
        return view(rec), rec.id

    return plane.mutation("RevokeAccessToken", actor, token_id, do, body={"token_id": token_id})


def listing(plane: ControlPlane) -> list[dict[str, Any]]:
    return [view(t) for t in plane.store.list_tokens()]
