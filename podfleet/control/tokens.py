"""Access tokens: issue, list and revoke (engine thread, through ``ControlPlane.mutation``
so each is persisted and audited before it is acknowledged). The token itself is
returned once, at creation; only its hash is stored."""

from __future__ import annotations

from podfleet.control.logbuf import rfc3339
from podfleet.control.ports import PlaneCore
from podfleet.errors import ConflictError, NotFoundError
from podfleet.security.tokens import Role, generate_token, hash_token, new_token_id
from podfleet.store.protocol import StoreProtocol
from podfleet.store.records import TokenRecord
from podfleet.wire import JsonObject


def view(rec: TokenRecord) -> JsonObject:
    return {"id": rec.id, "name": rec.name, "role": rec.role, "revoked": rec.revoked,
            "created_at": rfc3339(rec.created_at)}


def create(plane: PlaneCore, name: str, role: str, *, actor: str) -> JsonObject:
    def do() -> tuple[JsonObject, str]:
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


def revoke(plane: PlaneCore, token_id: str, *, actor: str, own_id: str | None = None) -> JsonObject:
    def do() -> tuple[JsonObject, str]:
        rec = plane.store.get_token(token_id)
        if rec is None:
            raise NotFoundError(f"token {token_id!r} does not exist", field="token_id")
        if token_id == own_id:
            raise ConflictError("a token cannot revoke itself; use another admin token", field="token_id")
        if rec.revoked:
            return view(rec), rec.id
        plane.store.revoke_token(token_id)
        rec.revoked = True
        return view(rec), rec.id

    return plane.mutation("RevokeAccessToken", actor, token_id, do, body={"token_id": token_id})


def listing(plane: PlaneCore) -> list[JsonObject]:
    return [view(t) for t in plane.store.list_tokens()]


def reset_admin(store: StoreProtocol, now: float, *, actor: str) -> tuple[str, JsonObject]:
    """Issue a new admin token straight into the store (``podfleet token reset-admin``):
    for an operator who lost the admin token but can reach the store's files. The live
    tokens named ``admin`` are revoked, so a lost one stops working. Audited; returns the
    new token (shown once) and its view."""
    with store.transaction():
        revoked = [t.id for t in store.list_tokens() if t.name == "admin" and not t.revoked]
        for token_id in revoked:
            store.revoke_token(token_id)
        token = generate_token()
        rec = TokenRecord(new_token_id(), "admin", Role.ADMIN.value, hash_token(token), now)
        store.add_token(rec)
        store.append_audit(time=now, actor=actor, action="ResetAdminToken", target=rec.id, result="ok",
                           detail={"revoked": revoked, "source": "local store access"})
    return token, view(rec)
