"""Which proxies may say who the client is (``PODFLEET_TRUSTED_PROXIES``).

A client address decides whose failed authentications a rate-limit bucket counts, and
appears in the audit trail. ``X-Forwarded-For`` is a header anyone can send, so it is
honoured only on connections from a proxy the operator named; by default none is, and
the address is the connection's own. (uvicorn would otherwise trust it from loopback,
so a client on the host could pick any address: `podfleet up` turns that off.)
"""

from __future__ import annotations

import ipaddress

from podfleet.errors import InvalidInputError


def parse_trusted_proxies(text: str | None) -> tuple[str, ...]:
    """Comma-separated addresses or CIDRs, checked; ``()`` when ``text`` is empty or None."""
    out = []
    for raw in (text or "").split(","):
        item = raw.strip()
        if not item:
            continue
        try:
            net = ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise InvalidInputError(f"PODFLEET_TRUSTED_PROXIES: {item!r} is not an IP address or CIDR "
                                    "(e.g. 10.0.0.5, 10.0.0.0/24, ::1)", field="trusted_proxies") from None
        out.append(str(net) if "/" in item else str(net.network_address))
    return tuple(out)
