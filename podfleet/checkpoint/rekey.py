"""Move a checkpoint tree's data keys to the key ring's current version (``podfleet keys
rewrap``): each shard is authenticated under the version it names, its header rewritten
with the data key wrapped by the current version, and its manifest entry updated. The
encrypted bodies are never rewritten."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from podfleet.checkpoint import keys, manifest, shard


@dataclass
class RewrapReport:
    rewrapped: int = 0
    current: int = 0  # already under the current version
    plain: int = 0  # unencrypted shards (nothing to wrap)
    legacy: int = 0  # format-1 shards: they bind their wrap and keep their version

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def rewrap_tree(root: str | Path, ring: keys.KeyRing) -> RewrapReport:
    report = RewrapReport()
    target = bytes(ring)
    target_id = keys.key_id(target)
    for mpath in sorted(Path(root).rglob(manifest.MANIFEST)):
        d = mpath.parent
        m = manifest.read(d)
        doc = json.loads(mpath.read_text())
        changed = False
        for i, entry in enumerate(m.shards):
            p = d / entry.file
            blob = p.read_bytes()
            h, _, _ = shard.split(blob, name=str(p))
            if not h["encrypted"]:
                report.plain += 1
                continue
            # Authenticate first: a damaged or foreign shard is reported, never rewrapped.
            shard.decode(blob, job_id=m.job_id, step=m.step, rank=entry.rank, kek=ring, name=str(p))
            if h["kek_id"] == target_id:
                report.current += 1
            elif h["format"] != shard.ENC_FORMAT:
                report.legacy += 1
            else:
                old = ring.for_id(str(h["kek_id"]), shard=str(p))
                blob = shard.rewrap(blob, name=str(p), old_kek=old, new_kek=target)
                shard.atomic_write(p, blob)
                report.rewrapped += 1
            doc["shards"][i] = {**doc["shards"][i], "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
            changed = True
        if changed:
            shard.atomic_write(mpath, json.dumps(doc, indent=1).encode())
    return report
