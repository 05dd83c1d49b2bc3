"""Users, their policies and their second factor: commands on the engine thread, each
persisted and audited through ``ControlPlane.mutation`` (secrets never in the audit).

A user owns the tokens named after it: a token whose name is a user's is decided by
that user's policies (plus ``MFARequired``: policy changes, token creation, key rotation
and cluster deletion need a fresh TOTP code), not by the token's role.
"""

from __future__ import annotations

import base64
import time
from typing import Protocol

from podfleet.control.logbuf import rfc3339
from podfleet.control.ports import PlaneCore
from podfleet.errors import AuthError, ConflictError, InvalidInputError, NotFoundError
from podfleet.security import mfa
from podfleet.security.policy import BUILTIN, Policy, builtin, parse_policy
from podfleet.store.records import UserRecord
from podfleet.wire import JsonObject

MAX_INLINE = 20
BOOTSTRAP_ADMIN = "admin"  # the name of the bootstrap administrator's tokens (control/tokens.py)


def view(u: UserRecord) -> JsonObject:
    return {"name": u.name, "policies": list(u.policies), "inline_policies": sorted(u.inline),
            "mfa": u.mfa_secret is not None, "recovery_codes_left": len(u.recovery or []),
            "mfa_locked": u.mfa_locked, "mfa_failures": u.mfa_failures, "recovery_failures": u.recovery_failures,
            "created_at": rfc3339(u.created_at)}


def policies_of(u: UserRecord) -> list[Policy]:
    """What decides for this user: attached built-ins, inline policies, and MFARequired."""
    out = [builtin(p) for p in u.policies]
    out += [parse_policy(name, doc) for name, doc in sorted(u.inline.items())]
    return [*out, BUILTIN["MFARequired"]]


class UserReader(Protocol):
    """What ListUsers and DescribeUser read of the store (the API's wiring hands the
    plane's store in as this port; they read no plane)."""

    def get_user(self, name: str) -> UserRecord | None: ...

    def list_users(self) -> list[UserRecord]: ...


def _get(plane: PlaneCore, name: str) -> UserRecord:
    return _found(plane.store, name)


def _found(store: UserReader, name: str) -> UserRecord:
    u = store.get_user(name)
    if u is None:
        raise NotFoundError(f"user {name!r} does not exist", field="user")
    return u


def create(plane: PlaneCore, name: str, policies: list[str], *, actor: str) -> JsonObject:
    def do() -> tuple[JsonObject, str]:
        if name == BOOTSTRAP_ADMIN:
            # A user owns the tokens named after it: a user "admin" would put the bootstrap
            # administrator's token under that user's policies (and MFARequired), locking the
            # server's own recovery path out of admin rights.
            raise ConflictError(f"user name {name!r} is reserved for the bootstrap administrator's token "
                                "(PODFLEET_ADMIN_TOKEN, token reset-admin): choose another name", field="name")
        if plane.store.get_user(name) is not None:
            raise ConflictError(f"user {name!r} exists", field="name")
        for p in policies:
            builtin(p)  # an unknown name lists the valid ones
        u = UserRecord(name, list(dict.fromkeys(policies)), {}, plane.now())
        plane.store.save_user(u)
        return view(u), name

    return plane.mutation("CreateUser", actor, name, do, body={"name": name, "policies": policies})


def put_policy(plane: PlaneCore, name: str, policy: str, doc: JsonObject | None, *,
               actor: str) -> JsonObject:
    """Attach a built-in policy (``doc`` None) or set an inline one."""
    def do() -> tuple[JsonObject, str]:
        u = _get(plane, name)
        if doc is None:
            if policy not in BUILTIN:  # attaching names a policy that must exist: 404 lists them
                raise NotFoundError(f"no built-in policy {policy!r}; built-in: {', '.join(sorted(BUILTIN))}",
                                    field="policy", allowed=sorted(BUILTIN))
            u.policies = list(dict.fromkeys([*u.policies, policy]))
        else:
            if policy in BUILTIN:
                # The name is taken (by a built-in policy): a conflict, as a second resource of one name is.
                raise ConflictError(f"{policy} is a built-in policy name; pick another", field="policy")
            parse_policy(policy, doc)  # every field checked before it is stored
            if policy not in u.inline and len(u.inline) >= MAX_INLINE:
                raise InvalidInputError(f"a user holds at most {MAX_INLINE} inline policies", field="policy")
            u.inline[policy] = doc
        plane.store.save_user(u)
        return view(u), name

    return plane.mutation("PutUserPolicy", actor, f"{name}/{policy}", do,
                          body={"user": name, "policy": policy, "document": doc})


def delete_policy(plane: PlaneCore, name: str, policy: str, *, actor: str) -> JsonObject:
    def do() -> tuple[JsonObject, str]:
        u = _get(plane, name)
        if policy not in u.policies and policy not in u.inline:
            raise NotFoundError(f"user {name!r} has no policy {policy!r}", field="policy")
        u.policies = [p for p in u.policies if p != policy]
        u.inline.pop(policy, None)
        plane.store.save_user(u)
        return view(u), name

    return plane.mutation("DeleteUserPolicy", actor, f"{name}/{policy}", do, body={"user": name, "policy": policy})


def enable_mfa(plane: PlaneCore, name: str, seal_key: bytes, *, actor: str) -> JsonObject:
    """Enrol a TOTP secret: the URI and recovery codes are in this answer only."""
    secret = mfa.new_secret()
    codes, hashes = mfa.new_recovery_codes()

    def do() -> tuple[JsonObject, str]:
        u = _get(plane, name)
        if u.mfa_secret is not None:
            raise ConflictError(f"user {name!r} already has MFA; an admin resets it by deleting the user",
                                field="user")
        u.mfa_secret = base64.b64encode(mfa.seal(secret, seal_key, owner=f"user/{name}").to_bytes()).decode()
        u.mfa_last_step, u.recovery = 0, hashes
        plane.store.save_user(u)
        return {**view(u), "otpauth_uri": mfa.provisioning_uri(secret, name), "recovery_codes": codes}, name

    # The secret and codes are generated here, never part of the audited body.
    return plane.mutation("EnableMfa", actor, name, do, body={"user": name})


def _attempts(u: UserRecord) -> mfa.Attempts:
    return mfa.Attempts(u.mfa_failures, u.recovery_failures, u.mfa_blocked_until, u.mfa_locked)


def _set_attempts(u: UserRecord, a: mfa.Attempts) -> None:
    u.mfa_failures, u.recovery_failures = a.totp_failures, a.recovery_failures
    u.mfa_blocked_until, u.mfa_locked = a.blocked_until, a.locked


def check_mfa(plane: PlaneCore, name: str, code: str, seal_key: bytes, *, now: float | None = None) -> None:
    """Accept a fresh TOTP code (or a recovery code) for ``name``; remembers what was used.

    A wrong code is counted and persisted before the refusal is raised (a restart keeps
    the count); while the user backs off or is locked no code is checked at all. The
    lock is audited when it falls. ``now``: wall-clock seconds (tests pass their own)."""
    # Wall-clock time: authenticator apps know no timeline (which may run faster).
    now = time.time() if now is None else now
    u = _get(plane, name)
    if u.mfa_secret is None:
        raise InvalidInputError(f"user {name!r} has no MFA enrolled", field="mfa")
    mfa.gate(_attempts(u), now=now, user=name)
    recovery = not (len(code) == mfa.DIGITS and code.isdigit())
    try:
        if recovery:
            u.recovery = mfa.use_recovery_code(code, u.recovery or [])
        else:
            secret = mfa.unseal(mfa.Sealed.from_bytes(base64.b64decode(u.mfa_secret)), seal_key, owner=f"user/{name}")
            u.mfa_last_step = mfa.verify_code(secret, code, now=now, last_step=u.mfa_last_step)
    except AuthError:
        was_locked = u.mfa_locked
        after = mfa.after_failure(_attempts(u), recovery=recovery, now=now)
        _set_attempts(u, after)
        with plane.store.transaction():
            plane.store.save_user(u)
            if after.locked and not was_locked:
                plane.audit("system", "LockMfa", name, "ok",
                            {"user": name, "totp_failures": after.totp_failures,
                             "recovery_failures": after.recovery_failures})
        raise
    _set_attempts(u, mfa.Attempts())
    plane.store.save_user(u)


def unlock(plane: PlaneCore, name: str, *, actor: str) -> JsonObject:
    """Clear a user's failed-code count and lock (admin; audited)."""
    def do() -> tuple[JsonObject, str]:
        u = _get(plane, name)
        before = _attempts(u)
        _set_attempts(u, mfa.Attempts())
        plane.store.save_user(u)
        return {**view(u), "was_locked": before.locked}, name

    return plane.mutation("UnlockUser", actor, name, do, body={"user": name})


def listing(store: UserReader) -> list[JsonObject]:
    return [view(u) for u in store.list_users()]


def describe(store: UserReader, name: str) -> JsonObject:
    return view(_found(store, name))
