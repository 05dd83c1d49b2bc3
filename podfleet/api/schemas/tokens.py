"""Access tokens."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from podfleet.api.schemas.base import RequestBody


class CreateAccessTokenRequest(RequestBody):
    name: str = Field(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    role: Literal["admin", "operator", "viewer"]
