"""Settings from ``PODFLEET_*`` environment variables (pydantic-settings); CLI flags override.

    PODFLEET_DB                  store URL (default: ~/.podfleet/podfleet.db, SQLite)
    PODFLEET_HOST / _PORT        where ``podfleet up`` listens (127.0.0.1:8470)
    PODFLEET_FABRIC              default fabric for new clusters (sim)
    PODFLEET_SPEED               timeline pace: 1 = wall clock, 10 = ten times faster
    PODFLEET_SEED                seed of the timeline's RNG
    PODFLEET_TELEMETRY_INTERVAL_S  how often hardware snapshots are rendered (timeline s)
    PODFLEET_ADMIN_TOKEN         fixes the first admin token (set before the first start)
    PODFLEET_URL / _TOKEN        where the CLI and SDK find the server, and as whom
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PODFLEET_", extra="ignore")

    db: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8470, ge=0, le=65535)
    fabric: str = "sim"
    speed: float = Field(1.0, gt=0)
    seed: int = 0
    telemetry_interval_s: float = Field(1.0, gt=0)
    admin_token: SecretStr | None = None
    url: str = "http://127.0.0.1:8470"
    token: SecretStr | None = None
    request_timeout_s: float = Field(30.0, gt=0)
    # ``podfleet up`` creates this simulated trn2-ultraserver cluster on start when no
    # live cluster has the name (``make run`` uses "pod-0"); None: start empty.
    default_cluster: str | None = None


def get_settings(**overrides: object) -> Settings:
    """Environment, then non-None ``overrides`` (CLI flags) on top."""
    # Unvalidated input on its way into the validator: pydantic checks and coerces each
    # value against its field, so the mapping is typed as what the validator accepts.
    given: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**given)
