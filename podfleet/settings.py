"""Settings from ``PODFLEET_*`` environment variables (pydantic-settings); CLI flags override.

    PODFLEET_DB                  store URL (default: ~/.podfleet/podfleet.db, SQLite)
    PODFLEET_HOST / _PORT        where ``podfleet up`` listens (127.0.0.1:8470)
    PODFLEET_FABRIC              default fabric for new clusters (sim)
    PODFLEET_SPEED               timeline pace: 1 = wall clock, 10 = ten times faster
    PODFLEET_SEED                seed of the timeline's RNG
    PODFLEET_TELEMETRY_INTERVAL_S  how often hardware snapshots are rendered (timeline s)
    PODFLEET_ADMIN_TOKEN         fixes the first admin token (set before the first start)
    PODFLEET_URL / _TOKEN        where the CLI and SDK find the server, and as whom
    PODFLEET_TLS_CERT / _TLS_KEY serve HTTPS with this certificate and key (PEM files)
    PODFLEET_MAX_BODY_BYTES      largest request body (1 MiB); code uploads: _CODE_MAX_BYTES
    PODFLEET_RATE_LIMIT_PER_S / _RATE_LIMIT_BURST  requests per token
    PODFLEET_AUTH_FAIL_PER_S / _AUTH_FAIL_BURST    failed authentications per client address
    PODFLEET_TRUSTED_PROXIES     addresses/CIDRs (comma-separated) whose X-Forwarded-For names
                                 the client (default none: the connection's own address)
    PODFLEET_HEADER_TIMEOUT_S / _BODY_TIMEOUT_S  a request's headers (10 s) and body (60 s)
                                 must arrive within these, or 408 and the connection closes
    PODFLEET_CODE_DIRS           directories (os.pathsep-separated) an admin allows job
                                 entrypoints from, besides pushed code artifacts
    PODFLEET_KEY_DIR / _KEY_COMMAND / _KEY_URL  where podfleet's keys come from
    PODFLEET_LEASE_TTL_S         servers on one PostgreSQL store: how long a leader's lease
                                 lasts unrenewed, the most a takeover waits (4)
    PODFLEET_ADVERTISE_URL       the URL other servers forward to when this one leads
                                 (default http(s)://HOST:PORT)
    PODFLEET_INSTANCE            this server's name in the lease and podfleet_leader{server} (never `instance`: Prometheus sets that)
                                 (default HOSTNAME:PORT)
    PODFLEET_AUDIT_DIGESTS_DIR   signed audit digests (default: beside a SQLite file)
    PODFLEET_AUDIT_DIGEST_EVERY / _AUDIT_DIGEST_INTERVAL_S  a digest every N records (100)
                                 and every S seconds while the chain grows (60)
    PODFLEET_AUDIT_DIGESTS       a second location for every digest: a directory, or a URL
                                 (s3://...) stored through PODFLEET_AUDIT_DIGESTS_COMMAND
    PODFLEET_AUDIT_RETENTION_DAYS  audit records kept in the database (90); older ones archived
    PODFLEET_WORKER_USER         who workers run as when the server is root (default: one
                                 uid per job from PODFLEET_WORKER_UIDS; "root": root, loudly)
    PODFLEET_WORKER_UIDS         START-END: the uids jobs are given (default 0x70000000+64Ki)
    PODFLEET_WORKER_PYTHON       the interpreter workers run (default: the server's own)
    PODFLEET_RAY_ADDRESSES       Ray addresses clusters may name (comma-separated); unset:
                                 only PODFLEET_RAY_ADDRESS or a private local Ray
    PODFLEET_NEURON_COMMANDS     JSON list of command lines neuron_ls/neuron_monitor may start
                                 with (default ["neuron-ls", "neuron-monitor"])
    PODFLEET_FABRIC_CONNECT_TIMEOUT_S  how long connecting a cluster's fabric (Ray,
                                 neuron-ls) may take before the cluster fails (60)
    PODFLEET_HANG_RESTARTS       restarts of a job whose workers stopped heartbeating before
                                 it fails as hung user code (2)
    PODFLEET_WORKER_LIMIT_NOFILE / _NPROC / _CORE / _AS  workers' resource limits (16384,
                                 16384, 0, unchanged); 0 leaves NOFILE/NPROC/AS as they are
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from podfleet.errors import InvalidInputError
from podfleet.validation import range_of, refusal


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PODFLEET_", extra="ignore")

    db: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8470, ge=0, le=65535)
    fabric: Literal["sim", "local", "ray", "neuron"] = "sim"
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
    # /metrics for a large fleet cluster: per-pod rollups instead of a series per chip and
    # link (api/chip_metrics.py); True keeps the per-chip series for every cluster.
    metrics_per_chip: bool = False
    # security (docs/security.md)
    tls_cert: str | None = None
    tls_key: str | None = None
    max_body_bytes: int = Field(1 << 20, ge=1024)
    code_max_bytes: int = Field(64 << 20, ge=1024)
    rate_limit_per_s: float = Field(1000.0, gt=0)
    rate_limit_burst: float = Field(2000.0, ge=1)
    auth_fail_per_s: float = Field(2.0, gt=0)
    auth_fail_burst: float = Field(60.0, ge=1)
    trusted_proxies: str | None = None  # api/proxies.py
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(60.0, gt=0)
    code_dirs: str | None = None
    key_dir: str | None = None  # default ~/.podfleet/keys (outside the data directory)
    key_command: str | None = None  # an external KMS: `CMD NAME` prints the key
    key_url: str | None = None  # an external KMS: GET URL/NAME answers the key
    # Several servers on one PostgreSQL store (store/lease.py, api/leadership.py).
    lease_ttl_s: float = Field(4.0, ge=1.0, le=300.0)
    advertise_url: str | None = None  # default http(s)://host:port
    instance: str | None = None  # default hostname:port
    audit_digests_dir: str | None = None  # default: beside the SQLite file, or ~/.podfleet/audit-digests
    audit_digest_interval_s: float = Field(60.0, gt=0)
    audit_digest_every: int = Field(100, ge=1, le=1_000_000)
    audit_digests: str | None = None  # a second location: a directory, or a URL for the command below
    audit_digests_command: str | None = None  # `CMD put|get|list LOCATION [NAME]` (security/digest_sinks.py)
    audit_retention_days: float = Field(90.0, gt=0)  # older records are archived, then pruned
    report_retention_days: float = Field(30.0, gt=0)  # health reports older than this are pruned
    # Fabrics that reach outside (control/fabricaccess.py, control/connect.py).
    ray_addresses: str | None = None
    neuron_commands: str | None = None
    fabric_connect_timeout_s: float = Field(60.0, gt=0)
    hang_restarts: int = Field(2, ge=0)  # control plane -> fabrics and the process driver
    # What `firmware update` runs on each host of a cluster that updates through a maintenance
    # rollout (local; recovery/rollouts.py): a command line, `{version}` replaced by the version.
    firmware_command: str | None = None
    # Local clusters' workers owned by the host's agent (``podfleet agent``), so they outlive
    # a restart of the server. None: on for ``podfleet up``, off for an embedded plane.
    local_agent: bool | None = None
    # Local workers (security/sandbox.py reads these variables where it starts workers).
    worker_user: str | None = None  # default: one uid per job; "root" to keep root (loudly)
    worker_uids: str | None = None  # START-END (security/uids.py); "off" refuses root workers
    worker_uid_dir: str | None = None  # where uid leases live (default /run/podfleet/worker-uids)
    worker_python: str | None = None  # the interpreter workers run (default: the server's)
    worker_limit_nofile: int = Field(16384, ge=-1)
    worker_limit_nproc: int = Field(16384, ge=-1)
    worker_limit_core: int = Field(0, ge=-1)
    worker_limit_as: int = Field(-1, ge=-1)  # bytes; -1: unchanged (CUDA reserves huge address space)


def get_settings(**overrides: object) -> Settings:
    """Environment, then non-None ``overrides`` (CLI flags) on top."""
    # Unvalidated input on its way into the validator: pydantic checks and coerces each
    # value against its field, so the mapping is typed as what the validator accepts.
    given: dict[str, Any] = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        # One line naming where the value came from: the flag, or the environment variable.
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err.get("loc") else "settings"
        where = f"--{name.replace('_', '-')}" if name in given else f"PODFLEET_{name.upper()}"
        out = refusal(err, where, allowed=range_of(Settings, err.get("loc", ())), what=name)
        raise InvalidInputError(out.message, field=name, allowed=out.allowed) from None
