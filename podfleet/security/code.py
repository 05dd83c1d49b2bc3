"""What code a job may run, and the store of pushed code artifacts.

A job runs a built-in workload (a model preset: no entrypoint), a code artifact pushed
through the API (``podfleet code push DIR`` -> ``code:<sha256>/<path>``), or a script in a
directory an admin allowed in the server's settings (``PODFLEET_CODE_DIRS``). Anything
else is refused at submit, before a worker exists: an entrypoint of ``/etc/passwd``
would otherwise run (or fail with its first line in a log viewers can read).

Artifacts are gzipped tarballs, stored content-addressed (the SHA-256 of the upload) and
unpacked once into ``<code root>/<sha256>/``: regular files and directories only, no
absolute paths, no ``..``, no links, bounded in size and count.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from podfleet.errors import ForbiddenError, InfeasibleError, InvalidInputError, NotFoundError

CODE_DIRS_ENV = "PODFLEET_CODE_DIRS"
CODE_PREFIX = "code:"
MAX_FILES = 10_000
MAX_UNPACKED_BYTES = 512 << 20
_REF_RE = re.compile(r"^code:(?:sha256:)?([0-9a-f]{64})/(.+)$")


@dataclass(frozen=True)
class CodeArtifact:
    digest: str  # hex SHA-256 of the uploaded tarball
    files: int
    bytes: int  # unpacked
    created: bool  # False: the same content was pushed before

    @property
    def ref(self) -> str:
        return f"{CODE_PREFIX}{self.digest}/"


def allowed_code_dirs(env: dict[str, str] | None = None) -> list[Path]:
    raw = (env if env is not None else os.environ).get(CODE_DIRS_ENV, "")
    return [Path(p).resolve() for p in raw.split(os.pathsep) if p.strip()]


def _safe_relpath(rel: str, *, field: str) -> PurePosixPath:
    p = PurePosixPath(rel)
    if not rel or "\x00" in rel or p.is_absolute() or any(part in ("..", "") for part in p.parts) or "\\" in rel:
        raise InvalidInputError(f"{field}: path {rel!r} must be relative, without '..'", field=field)
    return p


def confine_entrypoint(entrypoint: str, *, code_root: Path, allowed_dirs: Sequence[Path]) -> str:
    """The absolute path a job's ``entrypoint`` may run, or a 4xx naming why not."""
    if not isinstance(entrypoint, str) or not entrypoint or len(entrypoint) > 4096 or "\x00" in entrypoint:
        raise InvalidInputError("entrypoint must be a non-empty path or code:<sha256>/<path>", field="entrypoint")
    m = _REF_RE.match(entrypoint)
    if m:
        digest, rel = m.group(1), _safe_relpath(m.group(2), field="entrypoint")
        root = (code_root / digest).resolve()
        if not root.is_dir():
            raise NotFoundError(f"code artifact {digest[:12]}... was never pushed; push it with "
                                "`podfleet code push DIR`", field="entrypoint")
        path = (root / rel).resolve()
        if root not in path.parents or not path.is_file():
            raise InvalidInputError(f"entrypoint: {rel} is not a file of code artifact {digest[:12]}...",
                                    field="entrypoint")
        return str(path)
    if entrypoint.startswith(CODE_PREFIX):
        raise InvalidInputError("entrypoint: a code reference is code:<64 hex sha256>/<path inside it>",
                                field="entrypoint")
    p = Path(entrypoint)
    if not p.is_absolute():
        raise InvalidInputError(f"entrypoint {entrypoint!r} must be an absolute path in an allowed code "
                                "directory, or code:<sha256>/<path> from `podfleet code push`", field="entrypoint")
    # Resolve links first: a link inside an allowed directory may point anywhere.
    real = p.resolve()
    if not any(d == real or d in real.parents for d in allowed_dirs):
        where = ", ".join(map(str, allowed_dirs)) or f"none (set {CODE_DIRS_ENV})"
        # The message names the allowed places, never anything about the file itself.
        raise ForbiddenError(f"entrypoint {entrypoint} is outside the allowed code directories ({where}); "
                             "push the code with `podfleet code push DIR` instead", field="entrypoint")
    return str(real)


def store_artifact(data: bytes, code_root: Path) -> CodeArtifact:
    """Unpack a gzipped tarball into ``code_root/<sha256>/`` (once per content)."""
    digest = hashlib.sha256(data).hexdigest()
    dest = code_root / digest
    if dest.is_dir():
        files = sum(1 for p in dest.rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        return CodeArtifact(digest, files, size, created=False)
    code_root.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=code_root))
    try:
        files, size = _unpack(data, tmp)
        try:
            os.rename(tmp, dest)
        except OSError:  # pushed concurrently: the other copy is identical
            if not dest.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return CodeArtifact(digest, files, size, created=True)


def _unpack(data: bytes, into: Path) -> tuple[int, int]:
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")  # noqa: SIM115 (closed by the with below)
    except (tarfile.TarError, EOFError, OSError) as exc:
        # The schema can say "bytes", not "a tar archive": well formed, but unprocessable (422).
        raise InfeasibleError(f"code upload is not a (gzipped) tar archive: {exc}", field="body") from None
    files = size = 0
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise InfeasibleError(f"code upload is a damaged tar archive: {exc}", field="body") from None
        for m in members:
            rel = _safe_relpath(m.name.removeprefix("./") or ".", field="body") if m.name not in (".", "./") else None
            if rel is None:
                continue
            target = into / rel
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True, mode=0o700)
                continue
            if not m.isfile():
                raise InvalidInputError(f"code upload: {m.name} is not a regular file or directory "
                                        "(links and devices are refused)", field="body")
            files += 1
            size += m.size
            if files > MAX_FILES or size > MAX_UNPACKED_BYTES:
                raise InvalidInputError(f"code upload unpacks to more than {MAX_FILES} files or "
                                        f"{MAX_UNPACKED_BYTES >> 20} MiB", field="body")
            src = tar.extractfile(m)
            if src is None:
                raise InvalidInputError(f"code upload: cannot read {m.name}", field="body")
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out)
    if files == 0:
        raise InvalidInputError("code upload holds no files", field="body")
    return files, size


def pack_dir(directory: str | Path, *, max_bytes: int = 64 << 20) -> bytes:
    """A directory as a gzipped tarball, for ``podfleet code push`` (links are skipped)."""
    root = Path(directory)
    if not root.is_dir():
        raise InvalidInputError(f"{directory} is not a directory", field="dir")
    buf = io.BytesIO()
    # The gzip header carries a timestamp too: zero it, or the same tree packed a second
    # later gets another digest and is stored twice.
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root)
            if p.is_symlink() or any(part in ("__pycache__", ".git") for part in rel.parts):
                continue
            if p.is_file():
                info = tar.gettarinfo(str(p), arcname=rel.as_posix())
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0  # the same tree gives the same digest
                with p.open("rb") as f:
                    tar.addfile(info, f)
    data = buf.getvalue()
    if len(data) > max_bytes:
        raise InvalidInputError(f"{directory} packs to {len(data)} bytes, over the {max_bytes}-byte limit",
                                field="dir")
    return data
