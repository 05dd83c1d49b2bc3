"""Which Ray clusters and which host commands a cluster spec may name (an allow-list).

A cluster's ``ray_address`` makes the control plane connect to that address over Ray's
protocol (pickled objects both ways), and ``neuron_ls`` / ``neuron_monitor`` are programs
it runs on its own host. Neither is left to whoever may create a cluster: an
administrator lists what is allowed when starting the server.

* ``PODFLEET_RAY_ADDRESSES``: the Ray addresses clusters may name (comma-separated,
  compared exactly: ``10.0.0.5:6379,ray://head:10001``). Unset: only the address the
  server itself was started with (``PODFLEET_RAY_ADDRESS``); no address at all (a private
  local Ray the server starts, or ``PODFLEET_RAY_ADDRESS``) is always allowed.
* ``PODFLEET_NEURON_COMMANDS``: a JSON list of command lines; a cluster's command is
  allowed when its words start with one entry's words (``"neuron-monitor"`` allows
  ``neuron-monitor -c /etc/nm.json``). Unset: the Neuron tools themselves,
  ``["neuron-ls", "neuron-monitor"]``. The default commands (what runs when a spec names
  none) are always allowed.

Pure: the settings are read once, by whoever builds the plane (``from_env``).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from podfleet.control.specs import ClusterSpec
from podfleet.errors import ForbiddenError, InvalidInputError
from podfleet.fabric.commands import DEFAULT_NEURON_LS, DEFAULT_NEURON_MONITOR

RAY_ADDRESSES_ENV = "PODFLEET_RAY_ADDRESSES"
NEURON_COMMANDS_ENV = "PODFLEET_NEURON_COMMANDS"
DEFAULT_NEURON_PROGRAMS = ("neuron-ls", "neuron-monitor")


@dataclass(frozen=True)
class FabricAccess:
    """``ray_addresses`` None: ``PODFLEET_RAY_ADDRESSES`` unset (only ``own_ray_address``)."""

    ray_addresses: tuple[str, ...] | None = None
    own_ray_address: str | None = None
    neuron_commands: tuple[str, ...] = DEFAULT_NEURON_PROGRAMS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FabricAccess:
        e = os.environ if env is None else env
        return cls.parse(e.get(RAY_ADDRESSES_ENV), e.get("PODFLEET_RAY_ADDRESS") or None,
                         e.get(NEURON_COMMANDS_ENV))

    @classmethod
    def parse(cls, ray_addresses: str | None, own_ray_address: str | None,
              neuron_commands: str | Sequence[str] | None) -> FabricAccess:
        """From the settings' text; a malformed value is an error naming the setting."""
        addrs = None if ray_addresses is None else tuple(a.strip() for a in ray_addresses.split(",") if a.strip())
        if neuron_commands is None:
            cmds: tuple[str, ...] = DEFAULT_NEURON_PROGRAMS
        elif isinstance(neuron_commands, str):
            try:
                raw = json.loads(neuron_commands)
            except json.JSONDecodeError:
                raw = None
            if not isinstance(raw, list) or not all(isinstance(c, str) and c.strip() for c in raw):
                raise InvalidInputError(f"{NEURON_COMMANDS_ENV} must be a JSON list of command lines, "
                                        f"got {neuron_commands[:200]!r}", field="neuron_commands")
            cmds = tuple(raw)
        else:
            cmds = tuple(neuron_commands)
        for c in cmds:
            _words(c, NEURON_COMMANDS_ENV)
        return cls(addrs, own_ray_address, cmds)

    def check(self, spec: ClusterSpec) -> None:
        """Refuse (403, naming the setting) a Ray address or a command not allowed."""
        if spec.ray_address is not None and not self.ray_allowed(spec.ray_address):
            if self.ray_addresses is None:
                why = (f"{RAY_ADDRESSES_ENV} is unset, so only the server's own Ray "
                       f"({self.own_ray_address or 'a private local Ray'}) may be used")
            else:
                why = f"it is not one of {RAY_ADDRESSES_ENV} ({', '.join(self.ray_addresses) or 'empty'})"
            raise ForbiddenError(f"ray_address {spec.ray_address!r} is not allowed: {why}; an administrator "
                                 f"adds it to {RAY_ADDRESSES_ENV} when starting the server", field="ray_address",
                                 setting=RAY_ADDRESSES_ENV)
        for flag, command in (("neuron_ls", spec.neuron_ls), ("neuron_monitor", spec.neuron_monitor)):
            if command is not None and not self.command_allowed(command):
                raise ForbiddenError(f"{flag} {command!r} is not allowed: it does not start with an entry of "
                                     f"{NEURON_COMMANDS_ENV} ({json.dumps(list(self.neuron_commands))}); an "
                                     f"administrator adds it there when starting the server", field=flag,
                                     setting=NEURON_COMMANDS_ENV)

    def ray_allowed(self, address: str) -> bool:
        if address == self.own_ray_address:
            return True
        return self.ray_addresses is not None and address in self.ray_addresses

    def command_allowed(self, command: str) -> bool:
        if command in (DEFAULT_NEURON_LS, DEFAULT_NEURON_MONITOR):
            return True  # what the server runs when a spec names nothing
        try:
            argv = shlex.split(command)
        except ValueError:
            return False  # the spec's own check names the problem
        return any(argv[:len(w)] == w for w in (_words(c, NEURON_COMMANDS_ENV) for c in self.neuron_commands))


def _words(command: str, setting: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise InvalidInputError(f"{setting}: entry {command!r} cannot be split: {exc}", field="neuron_commands") \
            from None
    if not words:
        raise InvalidInputError(f"{setting}: an entry is empty", field="neuron_commands")
    return words
