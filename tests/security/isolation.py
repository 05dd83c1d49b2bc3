"""Shared by the worker-isolation tests (security, fabric/ray, fabric/neuron)."""

from __future__ import annotations

import pytest

from podfleet.errors import InvalidInputError
from podfleet.security.sandbox import from_env


def skip_unless_workers_can_run() -> None:
    """A host whose Python and packages no unprivileged uid can read (all under /root, no
    system python3.X) cannot run isolated workers: the server refuses, and so these skip."""
    try:
        from_env()
    except InvalidInputError as exc:
        if "cannot reach" not in exc.message:
            raise
        pytest.skip(exc.message)
