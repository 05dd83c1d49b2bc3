"""Is the Ray cluster's GCS reachable? A plain TCP check, no Ray call.

A Ray driver whose GCS is gone must make no Ray call until it reconnects: a call that is
in flight when a *new* head answers at the same address makes Ray abort the process
("WrongClusterID"), and by default Ray ends a driver whose GCS stays away 60 s. So the
fabric watches the GCS port itself, and its process tells Ray to wait (docs/ray.md,
"When the Ray cluster fails").
"""

from __future__ import annotations

import socket

from podfleet.errors import InfeasibleError

# How long this process's Ray driver waits for a lost GCS before Ray itself ends the
# process ("Failed to connect to GCS within 60 seconds ... The program will terminate",
# Ray's default ``gcs_rpc_server_reconnect_timeout_s``). The control plane must outlive its
# Ray cluster: a year, and the fabric's own probe notices the loss in seconds instead.
GCS_RECONNECT_TIMEOUT_S = 365 * 24 * 3600
GCS_RECONNECT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
# The GCS check the poller makes every NODE_REFRESH_S: a TCP connect this long, failing
# this many times in a row, means the Ray cluster is unreachable (one slow answer under
# load is not a lost head).
GCS_CHECK_TIMEOUT_S = 3.0
GCS_CHECK_FAILURES = 2


def gcs_hostport(address: str | None) -> tuple[str, int] | None:
    """The GCS host and port of a ``HOST:PORT`` address (None: a private instance,
    ``auto`` or a Ray Client address, whose liveness Ray alone knows)."""
    if address is None or address.startswith("ray://"):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def gcs_unreachable(hostport: tuple[str, int], timeout_s: float = GCS_CHECK_TIMEOUT_S) -> str | None:
    """Why the GCS port does not accept a connection now, or None when it does."""
    try:
        with socket.create_connection(hostport, timeout=timeout_s):
            return None
    except OSError as exc:
        return "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))


# How long the plain TCP check of a HOST:PORT address may take before ray.init, which
# would otherwise retry a refused or unrouted address for many minutes.
PROBE_TIMEOUT_S = 5.0


def probe_address(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Refuse at once a Ray address whose port does not accept a TCP connection (``auto``
    and unparsable addresses are left to ray.init)."""
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise InfeasibleError(f"cannot connect to Ray at {address!r}: {why}", field="ray_address") from None
