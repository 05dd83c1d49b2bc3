"""Encrypted, sharded, atomic checkpoints.

torch-free here (keys, shard format, manifests) so the control plane can commit and
inspect checkpoints; ``podfleet.checkpoint.torch_state`` (imports torch) snapshots,
writes asynchronously and restores model/optimizer state in workers.
"""

from podfleet.checkpoint.keys import DEFAULT_KEY_ENV, load_kek, new_key_file
from podfleet.checkpoint.manifest import Manifest, commit, latest, read, step_dir

__all__ = ["DEFAULT_KEY_ENV", "Manifest", "commit", "latest", "load_kek", "new_key_file", "read", "step_dir"]
