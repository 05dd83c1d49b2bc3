"""Ed25519 public keys as hex text: how digests and archive manifests name their signer.

Below both ``digests`` and ``retention`` (each signs with the digest key), so neither
imports the other for it.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def public_key_hex(key: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def public_key_from_hex(text: str) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(text.strip()))
