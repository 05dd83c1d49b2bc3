"""Device check (not a benchmark): a 1-rank CUDA job on the local fabric, NVML telemetry, resume.

Run on a GPU host: python bench/_cuda_smoke.py   (prints JSON; exit 1 on failure)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

from podfleet.fabric.base import WorkerGroupSpec
from podfleet.fabric.local import LocalFabric

try:  # a bare GPU image may lack cryptography; the check then runs with plain checkpoints
    import cryptography.hazmat.primitives.ciphers.aead  # noqa: F401

    ENCRYPT = True
except ImportError:
    ENCRYPT = False


def main() -> int:
    out: dict[str, object] = {"encrypted_checkpoints": ENCRYPT}
    with tempfile.TemporaryDirectory() as wd:
        fab = LocalFabric(1, workdir=wd, hang_timeout_s=10, sample_interval_s=0.2)
        out["n_gpus"], out["chip_type"] = fab.n_gpus, fab.topology.chip_type
        fab.launch(WorkerGroupSpec("job-cuda", (0,), "small", 300, checkpoint_interval=100,
                                   options={"global_batch": 32, "seq_len": 128, "encrypt_checkpoints": ENCRYPT}))
        fab.wait("job-cuda", 240, until=lambda s: s.step >= 150)
        time.sleep(0.5)
        out["metrics_mid_run"] = {k: float(v[0]) for k, v in fab.chip_metrics().items()}
        st = fab.wait("job-cuda", 240)
        out["state"], out["reason"] = st.state.value, st.reason
        out["loss_1"], out["loss_300"] = st.losses.get(1), st.losses.get(300)
        out["logs"] = fab.job_logs("job-cuda")[-6:]
        prog = [e for e in fab.events if e.kind == "progress"]
        out["tokens_per_s_last"] = prog[-1].detail["tokens_per_s"] if prog else None
        # Resume the same job from its last checkpoint for 20 more steps.
        fab.launch(WorkerGroupSpec("job-cuda", (0,), "small", 320, checkpoint_interval=100,
                                   options={"global_batch": 32, "seq_len": 128, "resume": True,
                                            "encrypt_checkpoints": ENCRYPT}))
        st2 = fab.wait("job-cuda", 240)
        out["resume_state"], out["resume_first_step"] = st2.state.value, min(s for s in st2.losses if s > 300)
        out["resume_logs"] = [ln for ln in fab.job_logs("job-cuda") if "restored" in ln][-1:]
        fab.close()
    print(json.dumps(out, indent=1, default=str))
    ok = out["state"] == "finished" and out["resume_state"] == "finished" and out["n_gpus"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
