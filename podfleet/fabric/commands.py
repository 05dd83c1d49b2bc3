"""Commands a fabric runs on the control-plane host (the Neuron tools), as operators
give them: defaults, limits and how a command line is split (no shell). Neutral ground
for the cluster spec, which validates them, and the fabric, which runs them."""

from __future__ import annotations

import shlex

from podfleet.errors import InvalidInputError

DEFAULT_NEURON_LS = "neuron-ls --json-output"
DEFAULT_NEURON_MONITOR = "neuron-monitor"
MAX_COMMAND_CHARS = 1024


def split_command(command: object, flag: str) -> list[str]:
    """``command`` as argv; an ``InvalidInputError`` naming ``flag`` when it is not one."""
    field = flag.replace("-", "_")
    if not isinstance(command, str) or not command.strip():
        raise InvalidInputError(f"{flag} must be a non-empty command line, got {command!r}", field=field)
    if len(command) > MAX_COMMAND_CHARS or "\x00" in command:
        raise InvalidInputError(f"{flag} must be at most {MAX_COMMAND_CHARS} characters without NUL",
                                field=field)
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise InvalidInputError(f"{flag} command {command!r} cannot be split: {exc}", field=field) from None
    if not argv:
        raise InvalidInputError(f"{flag} must be a non-empty command line, got {command!r}", field=field)
    return argv
