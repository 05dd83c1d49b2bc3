"""Access tokens."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from podfleet.api.schemas.base import RequestBody, ResponseBody


class CreateAccessTokenRequest(RequestBody):
    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    role: Literal["admin", "operator", "viewer"]


class AccessToken(ResponseBody):
    id: str
    name: str
    role: str
    revoked: bool = False
    created_at: str
    token: str | None = Field(None, description="only in the CreateAccessToken response")


class AccessTokenList(BaseModel):
    tokens: list[AccessToken]
