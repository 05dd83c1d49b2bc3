"""Where a cluster of worker processes keeps its jobs' checkpoints, logs and its key."""

from __future__ import annotations

import os
from pathlib import Path


def cluster_workdir(root: str | Path | None, cluster_id: str) -> Path:
    """Stable across restarts of the control plane, so a reloaded job resumes from its
    checkpoints (default root: $PODFLEET_WORKDIR or ~/.podfleet/work)."""
    base = Path(root) if root else Path(os.environ.get("PODFLEET_WORKDIR") or Path.home() / ".podfleet" / "work")
    return base / "clusters" / cluster_id
