"""TOTP second factor (RFC 6238) and recovery codes (pure; clock and keys passed in).

30-second steps, 6 digits, HMAC-SHA1 (what authenticator apps implement), one step of
clock skew either way. A code is accepted once: the step it matched is remembered and any
code for that step or an earlier one is refused (replay). Recovery codes are stored
hashed and each works once. Wrong codes are counted per user, TOTP and recovery codes
apart (``Attempts``): after the first ``FREE_FAILURES`` (a mistyped code) each failure makes
the next try wait twice as long (1 s, 2 s, 4 s... up to ``BACKOFF_CAP_S``), and after ``MAX_FAILURES`` in a row the user's second factor is
locked until an admin unlocks it. A six-digit code has a million values; ten tries leave an
attacker holding a stolen token a one-in-100,000 chance. TOTP secrets are sealed at rest with AES-256-GCM under a key
from the key provider, bound to the user they belong to (associated data), so a sealed
secret copied onto another user does not open.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA1
from cryptography.hazmat.primitives.twofactor import InvalidToken
from cryptography.hazmat.primitives.twofactor.totp import TOTP

from podfleet.errors import AuthError, ChecksumError, InvalidInputError

STEP_S = 30
DIGITS = 6
SKEW_STEPS = 1
SECRET_BYTES = 20  # 160 bits, RFC 4226's recommendation for HMAC-SHA1
RECOVERY_CODES = 10
MAX_FAILURES = 10  # consecutive wrong codes of one kind before the second factor locks
FREE_FAILURES = 2  # wrong codes in a row before the back-off starts
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 300.0


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def _totp(secret: bytes, digits: int = DIGITS) -> TOTP:
    return TOTP(secret, digits, SHA1(), STEP_S, enforce_key_length=False)


def code_at(secret: bytes, t: float, digits: int = DIGITS) -> str:
    return _totp(secret, digits).generate(int(t)).decode()


def provisioning_uri(secret: bytes, account: str, issuer: str = "podfleet") -> str:
    """``otpauth://`` URI for an authenticator app (shown once, at enrolment)."""
    return _totp(secret).get_provisioning_uri(account, issuer)


def verify_code(secret: bytes, code: str, *, now: float, last_step: int) -> int:
    """The time step ``code`` is valid for (now, or one step either side), after
    ``last_step``; raises AuthError for a wrong, stale or replayed code."""
    if not (isinstance(code, str) and len(code) == DIGITS and code.isdigit()):
        raise AuthError(f"an MFA code is {DIGITS} digits")
    step_now = int(now) // STEP_S
    totp = _totp(secret)
    for step in (step_now, step_now - SKEW_STEPS, step_now + SKEW_STEPS):
        try:
            totp.verify(code.encode(), step * STEP_S)
        except InvalidToken:
            continue
        if step <= last_step:
            raise AuthError("this MFA code was already used; wait for the next one")
        return step
    raise AuthError("wrong or expired MFA code")


def new_recovery_codes(n: int = RECOVERY_CODES) -> tuple[list[str], list[str]]:
    """(codes to show once, their hashes to keep)."""
    codes = [f"{secrets.token_hex(4)}-{secrets.token_hex(4)}" for _ in range(n)]
    return codes, [_hash_code(c) for c in codes]


def _hash_code(code: str) -> str:
    return hashlib.sha256(code.strip().lower().encode()).hexdigest()


def use_recovery_code(code: str, hashes: list[str]) -> list[str]:
    """The hashes left after spending ``code``; AuthError when it is not one of them."""
    h = _hash_code(code)
    for i, kept in enumerate(hashes):
        if hmac.compare_digest(h, kept):
            return hashes[:i] + hashes[i + 1:]
    raise AuthError("not a valid recovery code (each works once)")


@dataclass(frozen=True)
class Sealed:
    nonce: bytes
    ciphertext: bytes

    def to_bytes(self) -> bytes:
        return self.nonce + self.ciphertext

    @classmethod
    def from_bytes(cls, data: bytes) -> Sealed:
        if len(data) < 12 + 16:
            raise InvalidInputError("sealed MFA secret is truncated", field="mfa")
        return cls(data[:12], data[12:])


def seal(secret: bytes, key: bytes, *, owner: str) -> Sealed:
    nonce = os.urandom(12)
    return Sealed(nonce, AESGCM(key).encrypt(nonce, secret, owner.encode()))


def unseal(sealed: Sealed, key: bytes, *, owner: str) -> bytes:
    try:
        return AESGCM(key).decrypt(sealed.nonce, sealed.ciphertext, owner.encode())
    except InvalidTag:
        raise ChecksumError(f"MFA secret of {owner} does not open with this key (altered, or not theirs)",
                            field="mfa") from None


@dataclass(frozen=True)
class Attempts:
    """A user's failed second-factor attempts (persisted with the user)."""

    totp_failures: int = 0
    recovery_failures: int = 0
    blocked_until: float = 0.0  # wall-clock seconds: no code is even checked before then
    locked: bool = False


def backoff_s(failures: int) -> float:
    """How long the next try waits after ``failures`` consecutive wrong codes."""
    if failures <= FREE_FAILURES:
        return 0.0
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** (failures - FREE_FAILURES - 1))


def gate(attempts: Attempts, *, now: float, user: str) -> None:
    """Refuse before checking a code while the user is locked or backing off (a code
    checked during the back-off would still be an oracle for the attacker)."""
    if attempts.locked:
        raise AuthError(f"MFA for user {user} is locked after {MAX_FAILURES} wrong codes; an admin unlocks it "
                        f"with `podfleet user unlock {user}`")
    wait = attempts.blocked_until - now
    if wait > 0:
        raise AuthError(f"too many wrong MFA codes for user {user}: retry in {math.ceil(wait)} s",
                        retry_after_s=math.ceil(wait))


def after_failure(attempts: Attempts, *, recovery: bool, now: float) -> Attempts:
    """The attempts after one more wrong code of its kind: longer back-off, maybe locked."""
    totp = attempts.totp_failures + (0 if recovery else 1)
    rec = attempts.recovery_failures + (1 if recovery else 0)
    n = rec if recovery else totp
    return Attempts(totp, rec, now + backoff_s(n), attempts.locked or n >= MAX_FAILURES)
