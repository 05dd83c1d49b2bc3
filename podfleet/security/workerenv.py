"""The environment a worker process starts with: an allow-list, never the server's own.

A job's code runs inside the worker, so whatever the worker inherits the job can read.
The server's environment holds ``PODFLEET_ADMIN_TOKEN``, database URLs with passwords,
cloud credentials; none of it may reach a worker. What passes: the variables a Python,
PyTorch or Neuron process needs to run (paths, locale, device selection), plus what the
fabric sets for the rank. ``PODFLEET_*`` never passes, except the names the caller
lists in ``keep`` (the checkpoint key's variable when the key lives in the environment:
the worker encrypts its own checkpoints, so it holds that key either way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SAFE_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR", "TEMP", "TMP",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV",
    "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "HF_HOME", "TORCH_HOME", "XDG_CACHE_HOME",
})
# Device runtimes, collectives and locale; coverage tooling so tests can measure workers.
SAFE_PREFIXES = ("LC_", "CUDA_", "NCCL_", "NEURON_", "XLA_", "TORCH_", "GLOO_", "COV_CORE_", "COVERAGE_")
SECRET_PREFIX = "PODFLEET_"
# The server's own credentials: a process it starts to outlive it (the local agent, a
# private Ray head) gets its environment less these, which it never needs.
SERVER_SECRETS = ("PODFLEET_ADMIN_TOKEN", "PODFLEET_TOKEN")


def worker_env(base: Mapping[str, str], extra: Mapping[str, str] | None = None, *,
               keep: Iterable[str] = ()) -> dict[str, str]:
    """``base`` filtered to the allow-list, then ``extra`` (what the fabric sets) on top.
    ``extra`` may set ``PODFLEET_*`` names (the rank's chip, its job id): those are the
    fabric's, not the server's."""
    kept = set(keep)
    env = {k: v for k, v in base.items()
           if k in kept or (not k.startswith(SECRET_PREFIX) and (k in SAFE_NAMES or k.startswith(SAFE_PREFIXES)))}
    env.update(extra or {})
    return env
