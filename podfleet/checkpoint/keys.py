"""Key-encryption keys (KEKs) and data-key wrapping.

Until podfleet's security layer adds key management, the KEK comes from a key file
or an environment variable (``PODFLEET_CHECKPOINT_KEY`` by default) holding 32 bytes
as hex, base64 or raw bytes. Each shard gets a fresh random 256-bit data key, wrapped
with the KEK by AES key wrap (RFC 3394), so rotating the KEK rewraps keys, not data.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import secrets
from pathlib import Path

from podfleet.errors import ChecksumError, InvalidInputError

KEY_BYTES = 32
DEFAULT_KEY_ENV = "PODFLEET_CHECKPOINT_KEY"


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


def load_kek(key_file: str | None = None, key_env: str = DEFAULT_KEY_ENV) -> bytes:
    if key_file:
        try:
            data = Path(key_file).read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"cannot read key file {key_file}: {exc.strerror}", field="key_file") from exc
        return parse_key(data, source=f"key file {key_file}")
    value = os.environ.get(key_env)
    if value:
        return parse_key(value.encode(), source=f"${key_env}")
    raise InvalidInputError(
        f"no checkpoint key: set {key_env} (32 bytes, hex or base64) or pass a key file", field="key"
    )


def new_key_file(path: str | Path) -> Path:
    """Write a fresh random KEK (hex) readable only by its owner."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(KEY_BYTES))
    return p


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
