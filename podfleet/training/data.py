"""A deterministic corpus generated in-process (no downloads) and per-step batches.

The corpus is synthetic English-like operations text from a seeded grammar, so it
has learnable structure (the loss falls quickly) and is identical on every host.
A step's global batch is a pure function of (seed, step): rank r takes rows
``[r*B/W, (r+1)*B/W)`` (or, with an uneven split ``shares``, its own contiguous
``shares[r]`` rows), which is what makes W-rank data parallelism equal one
process on the global batch, and makes a resumed run see the same data.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def split_samples(shares: Sequence[float], global_batch: int) -> tuple[int, ...]:
    """Relative per-rank work (e.g. micro-batches) as samples of the global batch: each
    >= 1, summing to ``global_batch`` (largest remainder)."""
    w = np.asarray(list(shares), dtype=float)
    n = len(w)
    if n == 0 or global_batch < n or (w <= 0).any():
        raise ValueError(f"cannot split {global_batch} samples over shares {list(shares)[:8]}")
    exact = 1 + (global_batch - n) * w / w.sum()
    out = np.floor(exact).astype(np.int64)
    for i in np.argsort(-(exact - out), kind="stable")[: global_batch - int(out.sum())]:
        out[i] += 1
    return tuple(int(x) for x in out)


def batch(
    seed: int, step: int, global_batch: int, seq_len: int, rank: int = 0, world_size: int = 1,
    shares: Sequence[int] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) int64 arrays of shape [this rank's share, seq_len] (default: an
    even share, global_batch/world_size)."""
    data = corpus_bytes()
    starts = global_batch_indices(seed, step, global_batch, seq_len)
    if shares:
        lo = int(sum(shares[:rank]))
        mine = starts[lo : lo + int(shares[rank])]
    else:
        per = global_batch // world_size
        mine = starts[rank * per : (rank + 1) * per]
    idx = mine[:, None] + np.arange(seq_len + 1)[None, :]
    rows = data[idx].astype(np.int64)
    return rows[:, :-1], rows[:, 1:]
