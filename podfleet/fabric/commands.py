"""Commands a fabric runs on the control-plane host (the Neuron tools, an admin's
maintenance command), as operators give them: defaults, limits, how a command line is
split (no shell) and how a maintenance command runs. Neutral ground
for the cluster spec, which validates them, and the fabric, which runs them."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence

from podfleet.errors import InvalidInputError
from podfleet.fabric.base import CommandResult

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


OUTPUT_TAIL_CHARS = 4000  # of a maintenance command's output, kept with its record
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run_host_command(host: str, argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CommandResult:
    """Run ``argv`` here (no shell) with only ``env`` and a ``PATH``: the control plane's
    own variables (tokens, keys, the database URL) never reach an admin's maintenance
    command. Blocks; the output kept is the tail of stdout and stderr together."""
    t0 = time.monotonic()
    try:
        done = subprocess.run(list(argv), env={"PATH": _PATH, "LANG": "C.UTF-8", **env}, cwd="/",
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else ""
        return CommandResult(host, None, out[-OUTPUT_TAIL_CHARS:], time.monotonic() - t0,
                             f"ran past its {timeout_s:g} s timeout and was killed")
    except OSError as exc:
        return CommandResult(host, None, "", time.monotonic() - t0, f"could not start {argv[0]!r}: {exc.strerror}")
    out = done.stdout.decode("utf-8", "replace")
    return CommandResult(host, done.returncode, out[-OUTPUT_TAIL_CHARS:], time.monotonic() - t0)
