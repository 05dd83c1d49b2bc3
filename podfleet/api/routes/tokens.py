"""Access tokens (admin only): issue one for a role, list them, revoke one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import Plane, TokenRef
from podfleet.api.schemas import AccessToken, AccessTokenList, CreateAccessTokenRequest
from podfleet.control import tokens

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


@router.post("", operation_id="CreateAccessToken", response_model=AccessToken, status_code=201)
async def create_token(body: CreateAccessTokenRequest, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Issue a token for ``role``; the token is in this response only (stored hashed)."""
    return await plane.call(tokens.create, plane, body.name, body.role, actor=who.actor)


@router.get("", operation_id="ListAccessTokens", response_model=AccessTokenList)
def list_tokens(plane: Plane) -> dict[str, Any]:
    return {"tokens": tokens.listing(plane)}


@router.delete("/{token_id}", operation_id="RevokeAccessToken", response_model=AccessToken)
async def revoke_token(token_id: TokenRef, request: Request, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Revoke a token: refused by this server from the next request on (by other servers
    sharing the store within the auth cache's 5 s)."""
    out = await plane.call(tokens.revoke, plane, token_id, actor=who.actor, own_id=who.id)
    request.app.state.tokens.forget(token_id)
    return out
