"""Where signed audit digests are kept: the directory beside the database, and a second
location that whoever can write the database (and the directory beside it) cannot
rewrite: another directory (a mount of another host, a WORM volume), or an object store
reached through a command the admin configures (``PODFLEET_AUDIT_DIGESTS_COMMAND``).

The command is run without a shell, as ``CMD put LOCATION NAME`` (the digest on stdin),
``CMD get LOCATION NAME`` (the digest on stdout) and ``CMD list LOCATION`` (the names,
one a line), so any store with a client works: ``aws s3 cp`` / ``aws s3 ls`` in a
three-line script for S3 or an S3-compatible store (MinIO, R2...), ``gsutil``, ``rclone``.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Protocol

from podfleet.errors import InvalidInputError
from podfleet.security.files import private_dir, write_private

# What a digest file is called (``digest-<seq>-<ms>.json``); a listing's other names are
# not digests (and never reach a path).
NAME = re.compile(r"^digest-\d{12}-\d{15}\.json$")
MAX_DIGEST_BYTES = 64 * 1024


class SinkError(Exception):
    """A location could not be read or written (its message says which and why)."""


class DigestSink(Protocol):
    where: str  # for messages

    def put(self, name: str, data: bytes) -> None: ...

    def names(self) -> list[str]: ...

    def get(self, name: str) -> bytes: ...


def _checked(name: str) -> str:
    if not NAME.match(name):
        raise SinkError(f"{name!r} is not a digest name")
    return name


class DirectorySink:
    """Digest files in a directory (0700, files 0600)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.where = str(directory)

    def put(self, name: str, data: bytes) -> None:
        try:
            private_dir(self.directory)
            write_private(self.directory / _checked(name), data)
        except OSError as exc:
            raise SinkError(f"cannot write {self.directory}: {exc.strerror or exc}") from None

    def names(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.name for p in self.directory.iterdir() if NAME.match(p.name))

    def get(self, name: str) -> bytes:
        try:
            return (self.directory / _checked(name)).read_bytes()
        except OSError as exc:
            raise SinkError(f"cannot read {self.directory / name}: {exc.strerror or exc}") from None


class CommandSink:
    """Digests stored and read back through the admin's command (see the module docstring)."""

    def __init__(self, location: str, command: str, timeout_s: float = 30.0) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise InvalidInputError("PODFLEET_AUDIT_DIGESTS_COMMAND is empty", field="audit_digests_command")
        self.location, self.timeout_s = location, timeout_s
        self.where = location

    def _run(self, *args: str, data: bytes | None = None) -> bytes:
        try:
            out = subprocess.run([*self.argv, *args], input=data, capture_output=True, timeout=self.timeout_s,
                                 check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SinkError(f"digest command {self.argv[0]} {args[0]} failed: {exc}") from None
        if out.returncode != 0:
            why = " ".join(out.stderr.decode(errors="replace").strip().splitlines()[:1])
            raise SinkError(f"digest command {self.argv[0]} {args[0]} {self.location} exited {out.returncode}: {why}")
        return out.stdout

    def put(self, name: str, data: bytes) -> None:
        self._run("put", self.location, _checked(name), data=data)

    def names(self) -> list[str]:
        text = self._run("list", self.location).decode(errors="replace")
        # A listing may print sizes and dates before a key or path (``aws s3 ls``): the
        # name is the last segment of the last word.
        names = (line.split()[-1].rsplit("/", 1)[-1] for line in text.splitlines() if line.strip())
        return sorted({n for n in names if NAME.match(n)})

    def get(self, name: str) -> bytes:
        data = self._run("get", self.location, _checked(name))
        if len(data) > MAX_DIGEST_BYTES:
            raise SinkError(f"digest {name} from {self.location} is {len(data)} bytes; a digest is under 1 KiB")
        return data


def copy_sink(location: str, command: str | None, *, primary: Path | None = None) -> DigestSink:
    """The second location of ``PODFLEET_AUDIT_DIGESTS``: through the command when one is
    set, else a directory; a URL without a command is refused with what to set."""
    if command:
        return CommandSink(location, command)
    if "://" in location:
        raise InvalidInputError(f"PODFLEET_AUDIT_DIGESTS {location} is a URL: set PODFLEET_AUDIT_DIGESTS_COMMAND to "
                                "the command that stores digests there (`CMD put|get|list LOCATION [NAME]`)",
                                field="audit_digests")
    path = Path(location).expanduser()
    if primary is not None and path.resolve() == primary.resolve():
        raise InvalidInputError(f"PODFLEET_AUDIT_DIGESTS {location} is the digests directory itself; name a second "
                                "place (another host's mount, an object store)", field="audit_digests")
    return DirectorySink(path)
