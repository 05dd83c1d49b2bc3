"""TOTP (RFC 6238): the RFC's vectors, skew of one step, replay refused, recovery codes,
secrets sealed at rest."""

from __future__ import annotations

import pytest

from podfleet.errors import AuthError, ChecksumError
from podfleet.security.mfa import (
    STEP_S,
    code_at,
    new_recovery_codes,
    new_secret,
    provisioning_uri,
    seal,
    unseal,
    use_recovery_code,
    verify_code,
)

RFC_SECRET = b"12345678901234567890"


@pytest.mark.parametrize(("t", "code"), [(59, "94287082"), (1111111109, "07081804"), (1111111111, "14050471"),
                                         (1234567890, "89005924"), (2000000000, "69279037")])
def test_rfc6238_sha1_vectors(t: int, code: str) -> None:
    assert code_at(RFC_SECRET, t, digits=8) == code


def test_skew_and_replay() -> None:
    secret, now = new_secret(), 1_900_000_000.0
    step = int(now) // STEP_S
    assert verify_code(secret, code_at(secret, now), now=now, last_step=0) == step
    assert verify_code(secret, code_at(secret, now - STEP_S), now=now, last_step=0) == step - 1  # one step late
    assert verify_code(secret, code_at(secret, now + STEP_S), now=now, last_step=0) == step + 1  # one step early
    for off in (-2 * STEP_S, 2 * STEP_S):
        with pytest.raises(AuthError, match="wrong or expired"):
            verify_code(secret, code_at(secret, now + off), now=now, last_step=0)
    with pytest.raises(AuthError, match="already used"):
        verify_code(secret, code_at(secret, now), now=now, last_step=step)
    with pytest.raises(AuthError, match="already used"):  # an older code after a newer one
        verify_code(secret, code_at(secret, now - STEP_S), now=now, last_step=step)
    with pytest.raises(AuthError, match="6 digits"):
        verify_code(secret, "12ab56", now=now, last_step=0)
    assert provisioning_uri(secret, "ops@pod").startswith("otpauth://totp/podfleet:ops%40pod?")


def test_recovery_codes_work_once() -> None:
    codes, hashes = new_recovery_codes()
    assert len(set(codes)) == 10 and not set(codes) & set(hashes)
    left = use_recovery_code(codes[3].upper(), hashes)
    assert len(left) == 9
    with pytest.raises(AuthError):
        use_recovery_code(codes[3], left)


def test_secrets_are_sealed_to_their_owner() -> None:
    key, secret = b"k" * 32, new_secret()
    sealed = seal(secret, key, owner="user/alice")
    assert secret not in sealed.to_bytes()
    assert unseal(sealed, key, owner="user/alice") == secret
    with pytest.raises(ChecksumError):
        unseal(sealed, key, owner="user/mallory")
    with pytest.raises(ChecksumError):
        unseal(sealed, b"x" * 32, owner="user/alice")
