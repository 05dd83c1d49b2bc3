"""Where a cluster of worker processes keeps its jobs' checkpoints, logs and its key."""

from __future__ import annotations

import os
from pathlib import Path


def workdir_root(root: str | Path | None) -> Path:
    """Default root: $PODFLEET_WORKDIR or ~/.podfleet/work."""
    return Path(root) if root else Path(os.environ.get("PODFLEET_WORKDIR") or Path.home() / ".podfleet" / "work")


def cluster_workdir(root: str | Path | None, cluster_id: str) -> Path:
    """Stable across restarts of the control plane, so a reloaded job resumes from its
    checkpoints."""
    return workdir_root(root) / "clusters" / cluster_id


def code_root(root: str | Path | None) -> Path:
    """Where pushed code artifacts are unpacked (``security/code.py``), one per digest."""
    return workdir_root(root) / "code"
