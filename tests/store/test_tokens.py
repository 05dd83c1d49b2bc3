from __future__ import annotations

import pytest

from podfleet.errors import InvalidInputError, UnknownNameError
from podfleet.security.tokens import (
    TOKEN_PREFIX,
    Role,
    generate_token,
    hash_token,
    looks_like_token,
    token_matches,
    validate_supplied_token,
)


def test_tokens_are_prefixed_unique_and_hashed() -> None:
    tokens = {generate_token() for _ in range(50)}
    assert len(tokens) == 50
    tok = tokens.pop()
    assert tok.startswith(TOKEN_PREFIX) and len(tok) >= 40 and looks_like_token(tok)
    h = hash_token(tok)
    assert len(h) == 64 and tok not in h
    assert token_matches(tok, h)
    assert not token_matches(tok[:-1], h)
    assert not looks_like_token("hunter2")


def test_role_order() -> None:
    assert Role.ADMIN.allows(Role.OPERATOR) and Role.ADMIN.allows("viewer")
    assert Role.OPERATOR.allows(Role.OPERATOR) and not Role.OPERATOR.allows(Role.ADMIN)
    assert not Role.VIEWER.allows("operator")
    assert sorted(Role, key=lambda r: r.rank) == [Role.VIEWER, Role.OPERATOR, Role.ADMIN]
    assert Role.parse("Admin") is Role.ADMIN


def test_unknown_role_lists_valid_ones() -> None:
    with pytest.raises(UnknownNameError) as err:
        Role.parse("root")
    assert err.value.field == "role" and err.value.valid == ["admin", "operator", "viewer"]


def test_supplied_tokens_must_be_long() -> None:
    assert validate_supplied_token("x" * 30) == "x" * 30
    with pytest.raises(InvalidInputError) as err:
        validate_supplied_token("short")
    assert err.value.field == "PODFLEET_ADMIN_TOKEN"
