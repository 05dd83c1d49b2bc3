"""The seam between a ``LocalFabric`` and whoever parents its worker processes.

Two implementations: ``pool.WorkerPool`` spawns them in this process (they end with it:
their report pipes break), ``agent.client.AgentSpawner`` has the per-host agent spawn
and own them (they outlive this process; ``outlives_fabric``). The fabric calls only
what this Protocol names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from podfleet.fabric.local.process import OnExit, OnMessage, WorkerProcess
from podfleet.training.config import WorkerConfig


class Spawner(Protocol):
    # True when the workers live on after the fabric closes (an agent owns them).
    outlives_fabric: bool

    def spawn(self, cfg: WorkerConfig, chip: int, attempt: int, log_path: Path, on_message: OnMessage,
              on_exit: OnExit, group: Mapping[str, Any] | None = None) -> WorkerProcess:
        """Start rank ``cfg.rank`` of a gang (``group``: its WorkerGroupSpec, kept for a re-attach)."""

    def job_owner(self, jobdir: Path) -> tuple[int, int] | None: ...

    def release(self, jobdir: Path) -> None: ...

    def gang_started(self) -> None: ...

    def refill(self) -> None: ...

    def ready(self) -> int: ...

    def close(self) -> None: ...
