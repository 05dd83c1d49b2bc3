"""An admin's maintenance command on one Ray node (``HostCommands`` of the Ray fabric): a
Ray task pinned to the node (hard node affinity, no CPU reserved, so it runs beside the
node's workers), which runs the command there as ``fabric.commands.run_host_command`` runs
it on this host: no shell, a scrubbed environment, the output's tail kept. The task
runs as the raylet's user; its result comes back through the object store."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from podfleet.fabric.base import CommandResult
from podfleet.fabric.commands import run_host_command
from podfleet.fabric.ray.nodes import RayNode

# Beyond the command's own timeout: scheduling the task on the node and returning its result.
SLACK_S = 60.0


def _on_node(host: str, argv: list[str], env: dict[str, str], timeout_s: float) -> CommandResult:
    return run_host_command(host, argv, env, timeout_s)


def node_command(ray: Any, node_id: str, host: str, argv: Sequence[str], env: Mapping[str, str],
                 timeout_s: float) -> CommandResult:
    """Run on node ``node_id`` (blocks: call it on a thread of its own)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    t0 = time.monotonic()
    task = ray.remote(num_cpus=0, max_retries=0)(_on_node).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
    try:
        got = ray.get(task.remote(host, list(argv), dict(env), timeout_s), timeout=timeout_s + SLACK_S)
    except Exception as exc:  # Ray's errors (node lost, GCS gone, timeout): the command's outcome
        return CommandResult(host, None, "", time.monotonic() - t0,
                             f"could not run on Ray node {node_id[:12]} ({host}): {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0][:200] if str(exc) else ''}")
    if not isinstance(got, CommandResult):
        return CommandResult(host, None, "", time.monotonic() - t0, f"Ray node {node_id[:12]} answered {got!r}")
    return got


def node_task(ray: Any, chip: int, node: RayNode | None, unreachable: str | None, argv: Sequence[str],
              env: Mapping[str, str], timeout_s: float) -> Callable[[], CommandResult]:
    """``HostCommands.host_command`` for ``chip`` on ``node``: refused at once (a result
    that says why) while the Ray cluster is unreachable or the chip has no live node."""
    down = unreachable or (None if node is not None and node.alive else f"chip {chip} has no live Ray node")
    if down is not None or node is None:
        why = down or f"chip {chip} has no live Ray node"
        return lambda: CommandResult("", None, "", 0.0, why)
    return functools.partial(node_command, ray, node.node_id, node.ip, tuple(argv), dict(env), timeout_s)
