"""A deterministic corpus generated in-process (no downloads) and per-step batches.

The corpus is synthetic English-like operations text from a seeded grammar, so it
has learnable structure (the loss falls quickly) and is identical on every host.
A step's global batch is a pure function of (seed, step): rank r takes rows
``[r*B/W, (r+1)*B/W)``, which is what makes W-rank data parallelism equal one
process on the global batch, and makes a resumed run see the same data.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

CORPUS_SEED = 20261129
_SUBJECTS = ("chip", "node", "link", "pod", "rank", "worker", "spare", "switch")
_VERBS = ("reports", "reaches", "holds", "drops to", "rises to", "settles at")
_UNITS = ("c", "gbps", "watts", "percent", "ms", "steps")
_TAILS = ("after the update.", "during training.", "at idle.", "under load.", "since boot.")


@lru_cache(maxsize=2)
def corpus_bytes(n_sentences: int = 6000) -> np.ndarray:
    rng = np.random.default_rng(CORPUS_SEED)
    n = n_sentences
    cols = zip(
        rng.integers(0, len(_SUBJECTS), n), rng.integers(0, 64, n), rng.integers(0, len(_VERBS), n),
        rng.integers(0, 400, n), rng.integers(0, len(_UNITS), n), rng.integers(0, len(_TAILS), n),
        strict=True,
    )
    parts = [
        f"{_SUBJECTS[s]} {a} {_VERBS[v]} {b} {_UNITS[u]} {_TAILS[t]}\n" for s, a, v, b, u, t in cols
    ]
    return np.frombuffer("".join(parts).encode(), dtype=np.uint8).copy()


def global_batch_indices(seed: int, step: int, global_batch: int, seq_len: int) -> np.ndarray:
    """Start offsets of the ``global_batch`` sequences of ``step`` (1-based)."""
    data = corpus_bytes()
    rng = np.random.default_rng([seed, step])
    return rng.integers(0, len(data) - seq_len - 1, size=global_batch)


def batch(
    seed: int, step: int, global_batch: int, seq_len: int, rank: int = 0, world_size: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) int64 arrays of shape [global_batch/world_size, seq_len] for this rank."""
    data = corpus_bytes()
    starts = global_batch_indices(seed, step, global_batch, seq_len)
    per = global_batch // world_size
    mine = starts[rank * per : (rank + 1) * per]
    idx = mine[:, None] + np.arange(seq_len + 1)[None, :]
    rows = data[idx].astype(np.int64)
    return rows[:, :-1], rows[:, 1:]
