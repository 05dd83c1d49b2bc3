"""A root Ray actor never runs job code as root (issue 24, finding 1): the rank runs as a
child under the job's own uid, cannot read the actor's environment (a private Ray
instance inherits the server's, admin token included) or the cluster's KEK, and still
trains with checkpoints encrypted under that KEK, handed over a pipe."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.realproc,
              pytest.mark.skipif(os.geteuid() != 0, reason="a root raylet is what this is about")]
ray = pytest.importorskip("ray")

SCRIPT = """
    import json, os, sys
    import torch
    from podfleet.training import helpers as pf

    probe = {"uid": os.getuid(), "gid": os.getgid(), "env": sorted(os.environ)}
    for name, path in {"parent_environ": f"/proc/{os.getppid()}/environ", "kek": sys.argv[1]}.items():
        try:
            open(path, "rb").read()
            probe[name] = "read"
        except OSError as exc:
            probe[name] = type(exc).__name__
    pf.save_state({"w": torch.ones(2)}, step=1)
    pf.report(step=1, loss=1.0)
    pf.log("found " + sys.argv[2])  # as if it had found the admin token: the job log must not show it
    with open("probe.json", "w") as f:
        json.dump(probe, f)
"""


@pytest.fixture
def outside() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="podfleet-rayiso-"))  # outside pytest's 0700 base directory
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_root_actor_runs_job_code_under_the_jobs_own_uid(outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from podfleet.checkpoint import keys, manifest, shard
    from podfleet.fabric.base import WorkerGroupSpec
    from podfleet.fabric.ray import RayFabric
    from podfleet.security.uids import UidLeases

    start = 1879300000 + (os.getpid() % 4000) * 4
    # The raylet (and so the actor) inherits these: the server's settings at their defaults.
    monkeypatch.delenv("PODFLEET_WORKER_USER", raising=False)
    monkeypatch.delenv("PODFLEET_WORKER_PYTHON", raising=False)
    monkeypatch.delenv("PODFLEET_CHECKPOINT_KEY", raising=False)
    monkeypatch.setenv("PODFLEET_WORKER_UIDS", f"{start}-{start + 3}")
    monkeypatch.setenv("PODFLEET_WORKER_UID_DIR", str(outside / "leases"))
    admin = "pf_" + "R" * 43
    monkeypatch.setenv("PODFLEET_ADMIN_TOKEN", admin)
    from tests.security.isolation import skip_unless_workers_can_run

    skip_unless_workers_can_run()
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024 * 1024,
             log_to_driver=False, configure_logging=False)
    work = outside / "ray"
    kek_file = keys.ensure_kek_file(work)
    fabric = RayFabric(None, None, per_chip=1.0, workdir=str(work), key_file=str(kek_file))
    try:
        src = outside / "src"
        src.mkdir()
        os.chmod(outside, 0o755)
        script = src / "probe.py"
        script.write_text(textwrap.dedent(SCRIPT))
        fabric.launch(WorkerGroupSpec("job-iso", (0,), "custom", 1, 1, entrypoint=str(script),
                                      options={"entrypoint_args": [str(kek_file), admin]}))
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            st = fabric.run_status("job-iso")
            if st is not None and st.state.value in ("finished", "failed", "stopped"):
                break
            time.sleep(0.5)
        jobdir = work / "job-iso"
        assert st is not None and st.state.value == "finished", (st, fabric.run_logs("job-iso"),
                                                                 [p.read_text()[-2000:] for p in jobdir.glob("*.log")])
        probe = json.loads((jobdir / "probe.json").read_text())
        assert start <= probe["uid"] <= start + 3 and probe["gid"] == probe["uid"]
        assert probe["parent_environ"] == "PermissionError" and probe["kek"] == "PermissionError"
        assert not [n for n in probe["env"] if n.startswith("RAY_") or n == "PODFLEET_ADMIN_TOKEN"], probe["env"]
        logs = "\n".join(fabric.run_logs("job-iso"))
        assert "found [redacted]" in logs and admin not in logs, logs
        d = manifest.latest(jobdir / "checkpoints")
        assert d is not None
        entry = manifest.read(d).shards[0]
        assert shard.decode(manifest.read_shard(d, entry), job_id="job-iso", step=1, rank=0,
                            kek=keys.load_kek(str(kek_file)), name="s")
        # The job's end gave the uid back and the directory to root.
        assert UidLeases((start, start + 3), outside / "leases").leases() == []
        assert jobdir.stat().st_uid == 0 and (jobdir / "probe.json").stat().st_uid == 0
    finally:
        fabric.close()
        ray.shutdown()
