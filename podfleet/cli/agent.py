"""``podfleet agent``: the host's worker supervisor; ``agent status`` / ``agent stop``.

``podfleet agent`` runs in the foreground (systemd: docs/operations.md, "Agents and
upgrades"); ``podfleet up`` starts one itself when none answers for its data directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from podfleet.cli.output import OutputFormat, OutputOpt, emit, errors, stderr

app = typer.Typer(help="The worker supervisor: owns local workers across control-plane restarts.",
                  invoke_without_command=True)

DirOpt = typer.Option(None, "--dir", help="the agent's directory (default: <PODFLEET_WORKDIR>/agent)")


def _where(d: str | None) -> Path:
    from podfleet.control.workdir import workdir_root
    from podfleet.fabric.local.agent.protocol import agent_dir

    return Path(d) if d else agent_dir(workdir_root(None))


@app.callback()
def agent(
    ctx: typer.Context,
    d: str | None = DirOpt,
    grace_s: float | None = typer.Option(None, "--grace-s", min=0, help="stop the workers of a plane gone this "
                                         "long (default: never)"),
) -> None:
    """Run the worker supervisor in the foreground (SIGTERM: its workers stop too)."""
    if ctx.invoked_subcommand is not None:
        return
    with errors():
        from podfleet.fabric.local.agent.launch import answers
        from podfleet.fabric.local.agent.server import run

        where = _where(d)
        if answers(where):
            from podfleet.errors import ConflictError

            raise ConflictError(f"an agent already serves {where} (podfleet agent status)", field="dir")
        stderr.print(f"podfleet agent serving {where}")
        run(where, grace_s=grace_s)


@app.command("status")
def status(d: str | None = DirOpt, output: OutputFormat = OutputOpt) -> None:
    """What the agent holds: its workers (job, rank, pid, alive), undelivered reports, attached planes."""
    with errors():
        from podfleet.fabric.local.agent.client import agent_status

        st: dict[str, Any] = agent_status(_where(d))
        if output == OutputFormat.json:
            emit(st, output)
            return
        stderr.print(f"agent pid {st['pid']} at {st['dir']} (protocol {st['version']}, grace "
                     f"{'never' if st['grace_s'] is None else st['grace_s']})")
        for scope, sc in st["scopes"].items():
            stderr.print(f"  {scope}: {'attached' if sc['attached'] else 'no control plane attached'}")
        rows = [{k: w[k] for k in ("job_id", "rank", "attempt", "chip", "pid", "alive", "exit_code", "undelivered",
                                   "heartbeat_age_s")} for w in st["workers"]]
        emit(rows, output, title="workers")


@app.command("stop")
def stop(d: str | None = DirOpt, output: OutputFormat = OutputOpt) -> None:
    """Stop the agent and its workers (their jobs resume from checkpoints on the next plane)."""
    with errors():
        from podfleet.fabric.local.agent.client import stop_agent

        where = _where(d)
        stop_agent(where)
        emit({"stopped": str(where)}, output)
