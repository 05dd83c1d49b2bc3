"""What a job may run and where it may write: the probe's attacks on job submission."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path
from unittest.mock import patch

import httpx
import pytest

from podfleet.errors import ForbiddenError, InvalidInputError, NotFoundError
from podfleet.sdk.client import PodfleetClient
from podfleet.security.code import confine_entrypoint, pack_dir, store_artifact
from podfleet.security.workerenv import worker_env
from tests.security.conftest import Api


@pytest.fixture(scope="module")
def local(api: Api) -> str:
    with api.client("admin") as c:
        r = c.post("/v1/clusters", json={"name": "loc", "fabric": "local", "chips": 2})
        assert r.status_code == 201, r.text
    return "loc"


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_worker_environment_is_scrubbed() -> None:
    server = {"PATH": "/usr/bin", "HOME": "/root", "PODFLEET_ADMIN_TOKEN": "pf_secret", "PODFLEET_DB": "postgres://u:p@h",
              "AWS_SECRET_ACCESS_KEY": "x", "LC_ALL": "C", "NEURON_RT_LOG_LEVEL": "INFO",
              "PODFLEET_CHECKPOINT_KEY": "k" * 64}
    env = worker_env(server, {"PODFLEET_CHIP": "3"})
    assert env == {"PATH": "/usr/bin", "HOME": "/root", "LC_ALL": "C", "NEURON_RT_LOG_LEVEL": "INFO",
                   "PODFLEET_CHIP": "3"}
    # A name the caller keeps passes (the local pool keeps none: the key goes over a pipe).
    assert worker_env(server, keep=("PODFLEET_CHECKPOINT_KEY",))["PODFLEET_CHECKPOINT_KEY"] == "k" * 64


def test_entrypoints_are_confined(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "train.py").write_text("print('hi')\n")
    (allowed / "escape.py").symlink_to("/etc/passwd")
    root = tmp_path / "code"
    dirs = [allowed.resolve()]
    assert confine_entrypoint(str(allowed / "train.py"), code_root=root, allowed_dirs=dirs).endswith("train.py")
    for bad in ("/etc/passwd", "../../../../etc/passwd", str(allowed / ".." / "x.py"), str(allowed / "escape.py")):
        with pytest.raises((ForbiddenError, InvalidInputError)) as exc:
            confine_entrypoint(bad, code_root=root, allowed_dirs=dirs)
        assert "root:" not in str(exc.value)  # never the file's content
    with pytest.raises(ForbiddenError, match="none"):
        confine_entrypoint("/etc/passwd", code_root=root, allowed_dirs=[])
    art = store_artifact(pack_dir(allowed), root)
    assert art.created and art.files == 1  # the link was left out
    assert confine_entrypoint(f"{art.ref}train.py", code_root=root, allowed_dirs=[]).startswith(str(root))
    for bad in (f"{art.ref}../x", f"{art.ref}nope.py", "code:abc/train.py"):
        with pytest.raises(InvalidInputError):
            confine_entrypoint(bad, code_root=root, allowed_dirs=[])
    with pytest.raises(NotFoundError):
        confine_entrypoint("code:" + "0" * 64 + "/train.py", code_root=root, allowed_dirs=[])
    packed_now = pack_dir(allowed)
    assert not store_artifact(packed_now, root).created  # content-addressed
    # Packed an hour later, the same tree is still the same bytes (the gzip header's
    # timestamp once made this test fail whenever the two packs straddled a second).
    with patch("time.time", return_value=time.time() + 3600):
        packed_later = pack_dir(allowed)
    assert packed_later == packed_now and not store_artifact(packed_later, root).created


@pytest.mark.parametrize(("name", "kind", "why"), [
    ("../evil.py", tarfile.REGTYPE, "relative"), ("/abs.py", tarfile.REGTYPE, "relative"),
    ("link", tarfile.SYMTYPE, "links"), ("dev", tarfile.CHRTYPE, "links"),
])
def test_hostile_code_archives_are_refused(tmp_path: Path, name: str, kind: bytes, why: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
    with pytest.raises(InvalidInputError, match=why):
        store_artifact(_tar([(info, b"x" if kind == tarfile.REGTYPE else b"")]), tmp_path / "code")
    assert not list((tmp_path / "code").glob("[0-9a-f]*"))
    with pytest.raises(InvalidInputError, match="tar"):
        store_artifact(b"not a tarball", tmp_path / "code")


def test_an_operator_cannot_run_a_host_file(api: Api, local: str) -> None:
    with api.client("operator") as c:
        for ep in ("/etc/passwd", "../../../../etc/passwd"):
            r = c.post(f"/v1/clusters/{local}/jobs", json={"entrypoint": ep, "chips": 1, "steps": 3})
            assert r.status_code in (400, 403) and r.json()["field"] == "entrypoint", r.text
            assert "root:" not in r.text
        assert c.get("/v1/jobs", params={"cluster": local}).json()["jobs"] == []


def test_pushed_code_runs_by_reference(api: Api, local: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('trained')\n")
    sdk = PodfleetClient(api.url, api.tokens["operator"])
    out = sdk.push_code(str(tmp_path))
    assert out["ref"] == f"code:{out['digest']}/" and out["files"] == 1
    job = sdk.submit_training_job(local, entrypoint=out["ref"] + "train.py", chips=1, steps=3)
    assert job["id"].startswith("job-")
    with api.client("admin") as c:
        events = c.get("/v1/audit", params={"max_results": 1000}).json()["events"]
    upload = [e for e in events if e["action"] == "UploadCode"]
    assert upload and upload[-1]["detail"]["digest"] == out["digest"] and upload[-1]["actor"].endswith(":operator")
    with api.client("viewer") as c:  # viewers may not push code
        assert c.post("/v1/code", content=pack_dir(tmp_path), headers={"content-type": "application/gzip"}
                      ).status_code == 403


@pytest.mark.parametrize("options", [{"checkpoint_dir": "/tmp/anywhere"}, {"key_file": "/etc/shadow"},
                                     {"encrypt_checkpoints": False}])
def test_checkpoint_options_are_admin_only_and_audited(api: Api, local: str, options: dict) -> None:
    before = len(list(api.store.iter_audit()))
    body = {"model": "debug", "chips": 1, "steps": 3, "options": options}
    with api.client("operator") as c:
        r = c.post(f"/v1/clusters/{local}/jobs", json=body)
        assert r.status_code == 403 and r.json()["field"] == "options", r.text
    api.flush_denials()  # repeats of one kind are written as a summary row
    denied = api.denied(before)
    assert denied and denied[-1].detail["options"] == list(options)
    with api.client("operator") as c:  # keeping encryption on is everyone's right
        ok = c.post(f"/v1/clusters/{local}/jobs", json={**body, "options": {"encrypt_checkpoints": True}})
        assert ok.status_code == 201, ok.text
    if "key_file" not in options:
        with api.client("admin") as c:
            r = c.post(f"/v1/clusters/{local}/jobs", json=body)
            assert r.status_code == 201, r.text
        rec = [e for e in list(api.store.iter_audit())[before:] if e.action == "SubmitTrainingJob" and e.result == "ok"]
        assert rec and rec[-1].actor.endswith(":admin")


def test_files_and_keys_are_private(api: Api, local: str) -> None:
    cluster_dirs = list((api.workdir / "clusters").iterdir())
    assert cluster_dirs and all(os.stat(d).st_mode & 0o077 == 0 for d in cluster_dirs)
    keys = list((api.workdir / "keys").glob("*.kek"))
    assert keys and all(os.stat(k).st_mode & 0o777 == 0o600 for k in keys)
    assert not list((api.workdir / "clusters").rglob("*.kek"))  # never inside the checkpoint tree
    assert httpx.get(f"{api.url}/healthz").status_code == 200


@pytest.mark.realproc
def test_a_job_cannot_read_the_servers_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from podfleet.fabric.base import WorkerGroupSpec
    from podfleet.fabric.local import LocalFabric

    monkeypatch.setenv("PODFLEET_ADMIN_TOKEN", "pf_the-servers-admin-token-000000000")
    monkeypatch.setenv("PODFLEET_DB", "postgresql://podfleet:hunter2@db/podfleet")
    script = tmp_path / "steal.py"
    script.write_text("import os\nleaked = sorted(k for k in os.environ if k.startswith('PODFLEET_'))\n"
                      "raise RuntimeError(f'leaked={leaked} cwd={os.getcwd()}')\n")
    fab = LocalFabric(1, workdir=tmp_path / "work")
    try:
        fab.launch(WorkerGroupSpec("job-steal", (0,), "script", 1, entrypoint=str(script)))
        deadline = time.monotonic() + 120
        while (st := fab.run_status("job-steal")) is None or "leaked=" not in (st.reason or ""):
            assert time.monotonic() < deadline, st
            time.sleep(0.2)
        # Only what the fabric and the worker set for this job: never the server's own.
        assert "leaked=['PODFLEET_CHECKPOINT_DIR', 'PODFLEET_CHIP', 'PODFLEET_JOB_ID']" in (st.reason or ""), st.reason
        assert f"cwd={tmp_path / 'work' / 'jobs' / 'job-steal'}" in (st.reason or "")
        logs = list((tmp_path / "work" / "jobs" / "job-steal").glob("*.log"))
        assert logs and all(os.stat(p).st_mode & 0o777 == 0o600 for p in logs)
    finally:
        fab.close()
