"""A Ray actor of a private Ray instance inherits the server's environment; the job's
code must not see it (issue 14): only the allow-list, Ray's own variables and what the
fabric's ``runtime_env`` declares, with a declared checkpoint key taken out of the
environment and still used to encrypt."""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.realproc]
ray = pytest.importorskip("ray")

SCRIPT = """
    import json, os, sys
    import torch
    from podfleet.training import helpers as pf

    pf.report(step=1, loss=1.0)
    pf.save_state({"w": torch.ones(2)}, step=1)
    with open(sys.argv[1], "w") as f:
        json.dump(sorted(os.environ), f)
"""


def test_actor_scrubs_the_servers_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from podfleet.checkpoint import keys, manifest, shard
    from podfleet.fabric.base import WorkerGroupSpec
    from podfleet.fabric.ray import RayFabric

    monkeypatch.setenv("PODFLEET_ADMIN_TOKEN", "pf_server-secret")  # the raylet inherits it
    monkeypatch.setenv("PODFLEET_DB", "postgresql://podfleet:hunter2@db/podfleet")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024 * 1024,
             log_to_driver=False, configure_logging=False)
    key_hex = "ab" * 32
    fabric = RayFabric(None, None, per_chip=1.0, workdir=str(tmp_path / "ray"),
                       runtime_env={"env_vars": {"PODFLEET_CHECKPOINT_KEY": key_hex, "JOB_DECLARED": "1"}})
    try:
        script = tmp_path / "env.py"
        script.write_text(textwrap.dedent(SCRIPT))
        out = tmp_path / "env.json"
        fabric.launch(WorkerGroupSpec("job-env", (0,), "custom", 1, 1, entrypoint=str(script),
                                      options={"entrypoint_args": [str(out)], "checkpoint_dir": str(tmp_path / "ck")}))
        deadline = time.monotonic() + 120
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        names = json.loads(out.read_text())
        assert not [n for n in names if n.startswith("PODFLEET_") and n not in
                    ("PODFLEET_JOB_ID", "PODFLEET_CHECKPOINT_DIR")], names
        assert "JOB_DECLARED" in names and "PATH" in names
        d = manifest.latest(tmp_path / "ck")
        assert d is not None  # encrypted with the declared key, which left the environment
        entry = manifest.read(d).shards[0]
        kek = keys.parse_key(key_hex.encode(), source="test")
        assert shard.decode(manifest.read_shard(d, entry), job_id="job-env", step=1, rank=0, kek=kek, name="s")
    finally:
        fabric.close()
        ray.shutdown()
