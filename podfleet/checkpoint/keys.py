"""Key-encryption keys (KEKs) and data-key wrapping (envelope encryption).

The KEK comes from a key file or an environment variable (``PODFLEET_CHECKPOINT_KEY`` by
default) holding 32 bytes as hex, base64 or raw bytes. Each shard gets a fresh random
256-bit data key, wrapped with the KEK by AES key wrap (RFC 3394), so rotating the KEK
rewraps keys, not data.

A key file may instead hold a *key ring* (JSON): numbered versions, the newest live one
encrypting, every live one decrypting, retired ones refused. ``rotate`` adds a version,
``rewrap_tree`` moves a checkpoint tree's data keys to the current version without
touching the data, ``retire`` then refuses an old version.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import secrets
from pathlib import Path

from podfleet.errors import ChecksumError, InvalidInputError

KEY_BYTES = 32
DEFAULT_KEY_ENV = "PODFLEET_CHECKPOINT_KEY"
KEY_DIR_ENV = "PODFLEET_KEY_DIR"


def parse_key(text: bytes, *, source: str) -> bytes:
    """32 bytes from raw bytes, hex or base64 (whitespace ignored)."""
    if len(text) == KEY_BYTES:
        return bytes(text)
    s = text.strip()
    if len(s) == 2 * KEY_BYTES:
        try:
            return binascii.unhexlify(s)
        except (binascii.Error, ValueError):
            pass
    try:
        raw = base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == KEY_BYTES:
        return raw
    raise InvalidInputError(
        f"checkpoint key from {source} is not 32 bytes as raw, hex (64 chars) or base64", field="key"
    )


class KeyRing(bytes):
    """The current KEK (this object's bytes, so every caller that takes a KEK takes a
    ring unchanged) and the versions still allowed to decrypt (``shard.decode`` asks
    ``for_id``)."""

    versions: dict[str, bytes]  # name (v1, v2...) -> key, oldest first
    retired: frozenset[str]  # names

    def __new__(cls, versions: dict[str, bytes], retired: frozenset[str] = frozenset()) -> KeyRing:
        live = [n for n in versions if n not in retired]
        if not live:
            raise InvalidInputError("key ring has no live version", field="key_file")
        ring = super().__new__(cls, versions[live[-1]])
        ring.versions, ring.retired = dict(versions), frozenset(retired)
        return ring

    @property
    def current(self) -> str:
        return [n for n in self.versions if n not in self.retired][-1]

    def for_id(self, kid: str, *, shard: str) -> bytes:
        for name, key in self.versions.items():
            if key_id(key) == kid:
                if name in self.retired:
                    raise ChecksumError(f"checkpoint shard {shard}: its key version {name} is retired; "
                                        "rewrap the checkpoints before retiring a version", field="key")
                return key
        raise ChecksumError(f"checkpoint shard {shard}: encrypted under key {kid}, which is no version of "
                            f"this key ring ({', '.join(self.versions)})", field="key")

    def to_json(self) -> bytes:
        return json.dumps({"versions": [{"name": n, "key": k.hex(), "retired": n in self.retired}
                                         for n, k in self.versions.items()]}, indent=1).encode()


def parse_key_file(data: bytes, *, source: str) -> bytes:
    """A single key (raw, hex, base64) or a key ring (JSON)."""
    if data.lstrip().startswith(b"{"):
        try:
            doc = json.loads(data)
            versions = {str(v["name"]): bytes.fromhex(v["key"]) for v in doc["versions"]}
            retired = frozenset(str(v["name"]) for v in doc["versions"] if v.get("retired"))
        except (ValueError, KeyError, TypeError):
            raise InvalidInputError(f"{source} is not a valid key ring", field="key_file") from None
        if any(len(k) != KEY_BYTES for k in versions.values()):
            raise InvalidInputError(f"{source}: every key ring version must be 32 bytes", field="key_file")
        return KeyRing(versions, retired)
    return parse_key(data, source=source)


def load_ring(key_file: str | Path) -> KeyRing:
    """The key file as a ring (a single key is version v1)."""
    try:
        data = Path(key_file).read_bytes()
    except OSError as exc:
        raise InvalidInputError(f"cannot read key file {key_file}: {exc.strerror}", field="key_file") from exc
    kek = parse_key_file(data, source=f"key file {key_file}")
    return kek if isinstance(kek, KeyRing) else KeyRing({"v1": kek})


def _save_ring(key_file: str | Path, ring: KeyRing) -> None:
    p = Path(key_file)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(ring.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)


def rotate(key_file: str | Path) -> str:
    """Add a new random version; it encrypts from now on, older ones still decrypt."""
    ring = load_ring(key_file)
    name = f"v{len(ring.versions) + 1}"
    _save_ring(key_file, KeyRing({**ring.versions, name: secrets.token_bytes(KEY_BYTES)}, ring.retired))
    return name


def retire(key_file: str | Path, name: str) -> None:
    """Refuse ``name`` from now on (shards still under it no longer decrypt)."""
    ring = load_ring(key_file)
    if name not in ring.versions:
        raise InvalidInputError(f"no key version {name!r}; versions: {', '.join(ring.versions)}", field="version")
    if name == ring.current:
        raise InvalidInputError(f"{name} is the current version; rotate first", field="version")
    _save_ring(key_file, KeyRing(ring.versions, ring.retired | {name}))


def load_kek(key_file: str | None = None, key_env: str = DEFAULT_KEY_ENV) -> bytes:
    if key_file:
        try:
            data = Path(key_file).read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"cannot read key file {key_file}: {exc.strerror}", field="key_file") from exc
        return parse_key_file(data, source=f"key file {key_file}")
    value = os.environ.get(key_env)
    if value:
        return parse_key(value.encode(), source=f"${key_env}")
    raise InvalidInputError(
        f"no checkpoint key: set {key_env} (32 bytes, hex or base64) or pass a key file", field="key"
    )


def new_key_file(path: str | Path) -> Path:
    """Write a fresh random KEK (hex) readable only by its owner, in a 0700 directory."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(KEY_BYTES))
    return p


def kek_path_for(workdir: str | Path) -> Path:
    """Where the KEK of the checkpoints under ``workdir`` lives: never inside ``workdir``
    (a checkpoint tree that is copied, shared or exposed must not carry its own key).
    ``$PODFLEET_KEY_DIR`` when set; else a ``keys`` directory beside the clusters'
    directories (``<root>/keys/<cluster>.kek`` for ``<root>/clusters/<cluster>``), or
    ``<workdir>.keys/`` for any other workdir."""
    wd = Path(workdir)
    if os.environ.get(KEY_DIR_ENV):
        tag = hashlib.sha256(str(wd.resolve()).encode()).hexdigest()[:12]
        return Path(os.environ[KEY_DIR_ENV]) / f"{wd.name}-{tag}.kek"
    if wd.parent.name == "clusters":
        return wd.parent.parent / "keys" / f"{wd.name}.kek"
    return wd.with_name(wd.name + ".keys") / "checkpoint.kek"


def ensure_kek_file(workdir: str | Path) -> Path:
    """The KEK file for ``workdir``, created on first use. A KEK an older version kept
    inside the workdir (``keys/checkpoint.kek``) is moved out, so its checkpoints stay
    readable."""
    path = kek_path_for(workdir)
    legacy = Path(workdir) / "keys" / "checkpoint.kek"
    if not path.exists() and legacy.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.replace(legacy, path)
        with contextlib.suppress(OSError):
            legacy.parent.rmdir()
    if path.exists():
        return path
    try:
        return new_key_file(path)
    except FileExistsError:  # another process created it meanwhile: use theirs
        return path


def key_id(kek: bytes) -> str:
    """A short public fingerprint so errors can say *which* key a shard expects."""
    return hashlib.sha256(b"podfleet-kek-id" + kek).hexdigest()[:16]


# cryptography is imported where it is used, so plain (unencrypted) checkpoints work on
# hosts that lack it (e.g. a bare GPU image); the package is a hard dependency otherwise.
def wrap(kek: bytes, data_key: bytes) -> bytes:
    from cryptography.hazmat.primitives.keywrap import aes_key_wrap

    return aes_key_wrap(kek, data_key)


def unwrap(kek: bytes, wrapped: bytes, *, shard: str) -> bytes:
    from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap

    try:
        return aes_key_unwrap(kek, wrapped)
    except InvalidUnwrap as exc:
        raise ChecksumError(
            f"checkpoint shard {shard}: the key-encryption key does not unwrap its data key (wrong key?)",
            field="key",
        ) from exc
