"""Bearer tokens and roles.

A token is ``pf_`` followed by 43 URL-safe characters from ``secrets`` (256 bits). Only
its SHA-256 is stored. A plain, unsalted, fast hash is the right tool *for generated
tokens*: with 256 bits of entropy nobody can brute-force the preimage, so salts and slow
KDFs (which exist to protect low-entropy passwords) buy nothing, and a deterministic hash
lets the store find a token by an indexed equality lookup on every API call. Tokens that
a person chooses (``PODFLEET_ADMIN_TOKEN``) are held to a minimum length for that reason.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from enum import StrEnum

from podfleet.errors import InvalidInputError, UnknownNameError

TOKEN_PREFIX = "pf_"
TOKEN_ENTROPY_BYTES = 32
# A supplied token must be long enough that an unsalted SHA-256 of it stays unguessable.
MIN_SUPPLIED_TOKEN_CHARS = 24


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def allows(self, required: Role | str) -> bool:
        """True when this role may do what ``required`` may (admin > operator > viewer)."""
        return self.rank >= Role.parse(required).rank

    @classmethod
    def parse(cls, value: Role | str, *, field: str = "role") -> Role:
        if isinstance(value, Role):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise UnknownNameError("role", value, [r.value for r in cls], field=field) from None


_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


def generate_token() -> str:
    """A new bearer token; show it once, store only ``hash_token`` of it."""
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_ENTROPY_BYTES)


def new_token_id() -> str:
    return "tok-" + secrets.token_hex(8)


def hash_token(token: str) -> str:
    """Hex SHA-256 of the token (what ``tokens.token_hash`` holds)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(token: str, token_hash: str) -> bool:
    """Constant-time check of a presented token against a stored hash."""
    return hmac.compare_digest(hash_token(token), token_hash)


def looks_like_token(value: str) -> bool:
    return value.startswith(TOKEN_PREFIX) and len(value) > len(TOKEN_PREFIX) + 20


def validate_supplied_token(token: str, *, field: str = "PODFLEET_ADMIN_TOKEN") -> str:
    """Check a token an operator chose (not generated) is long enough to hash unsalted."""
    if len(token) < MIN_SUPPLIED_TOKEN_CHARS or token.strip() != token:
        raise InvalidInputError(
            f"{field} must be at least {MIN_SUPPLIED_TOKEN_CHARS} characters without "
            f"surrounding spaces (got {len(token)}); generate one with "
            "`python -c 'import secrets; print(\"pf_\" + secrets.token_urlsafe(32))'`",
            field=field,
        )
    return token
