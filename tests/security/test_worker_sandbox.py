"""Local workers run as an unprivileged user under resource limits (issue 14).

Where the server is root, a job's code runs as ``PODFLEET_WORKER_USER``: it can write its
job's directory (logs, encrypted checkpoints) but not read the server's database or the
checkpoint key-encryption key, which it receives over a pipe instead.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import podfleet
from podfleet.checkpoint import keys, manifest, shard
from podfleet.errors import InvalidInputError, PodfleetError
from podfleet.security import sandbox
from podfleet.security.code import pack_dir, store_artifact
from podfleet.security.jobfiles import prepare_job_dir
from podfleet.security.sandbox import WorkerSandbox, from_env

TEST_USER = "podfleet-test-worker"


@pytest.fixture(scope="module")
def worker_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0:
        pytest.skip(f"switching a worker's user needs a root server (these tests run as uid {os.geteuid()})")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed: cannot create the test worker user")
    created = False
    try:
        pw = pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER],
                       check=True, capture_output=True)
        created, pw = True, pwd.getpwnam(TEST_USER)
    yield pw
    if created:
        subprocess.run(["userdel", TEST_USER], check=False, capture_output=True)


@pytest.fixture
def outside() -> Iterator[Path]:
    """A directory outside pytest's own: pytest resets its base directory to 0700 when any
    other session starts, which would take away the search permission a job's directory needs."""
    d = Path(tempfile.mkdtemp(prefix="podfleet-sandbox-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def worker_python(worker_user: pwd.struct_passwd) -> dict[str, str]:
    """Settings under which the test user can run a worker: none when it can reach this
    interpreter; else (an interpreter under /root, say) the system's Python of the same
    version, given this environment's packages on PYTHONPATH."""
    probe = WorkerSandbox(TEST_USER, worker_user.pw_uid, worker_user.pw_gid)
    if sandbox.unreachable(probe) is None:
        return {}
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    env = {"PODFLEET_WORKER_PYTHON": str(system),
           "PYTHONPATH": os.pathsep.join(dict.fromkeys([
               sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
               str(Path(podfleet.__file__).resolve().parents[1])]))}
    blocked = sandbox.unreachable(WorkerSandbox(TEST_USER, worker_user.pw_uid, worker_user.pw_gid,
                                                python=str(system)))
    if not system.exists() or blocked is not None:
        pytest.skip(f"{TEST_USER} cannot reach this interpreter ({sandbox.unreachable(probe)} is in the way) "
                    f"and there is no usable {system}")
    return env


def test_settings_choose_the_user_and_refuse_an_unknown_one(worker_user: pwd.struct_passwd,
                                                            worker_python: dict[str, str], tmp_path: Path) -> None:
    sb = from_env({"PODFLEET_WORKER_USER": TEST_USER, **worker_python})
    assert (sb.uid, sb.gid, sb.switches_user) == (worker_user.pw_uid, worker_user.pw_gid, True)
    assert sb.env(Path("/j")) == {"USER": TEST_USER, "LOGNAME": TEST_USER, "HOME": "/j"}
    assert not from_env({"PODFLEET_WORKER_USER": "root"}).switches_user  # root on purpose
    with pytest.raises(InvalidInputError, match="no such user"):
        from_env({"PODFLEET_WORKER_USER": "no-such-user-here"})
    sb = from_env({"PODFLEET_WORKER_USER": TEST_USER, "PODFLEET_WORKER_LIMIT_NOFILE": "256",
                   "PODFLEET_WORKER_LIMIT_AS": "0", **worker_python})
    assert json.loads(sb.limits_arg()) == {"CORE": 0, "NOFILE": 256, "NPROC": 16384}
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    (hidden / "python").symlink_to(sys.executable)
    with pytest.raises(InvalidInputError, match=r"cannot reach /.*where any user can read"):  # at start, not per job
        from_env({"PODFLEET_WORKER_USER": TEST_USER, "PODFLEET_WORKER_PYTHON": str(hidden / "python")})


def test_limits_only_go_down_and_hold_in_the_worker() -> None:
    spec = json.dumps({"NOFILE": 300, "CORE": 0})
    code = ("import resource, sys; from podfleet.security.sandbox import apply_limits; apply_limits(sys.argv[1]);"
            "print(resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_CORE))")
    out = subprocess.run([sys.executable, "-c", code, spec], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "(300, 300) (0, 0)"


def test_the_job_dir_is_handed_over_without_following_links(worker_user: pwd.struct_passwd, outside: Path) -> None:
    base = outside / "root"
    jobdir = base / "clusters" / "c" / "jobs" / "job-1"
    (jobdir / "checkpoints").mkdir(parents=True)
    for d in (base, base / "clusters", base / "clusters" / "c"):
        d.chmod(0o700)
    secret = base / "secret.kek"
    secret.write_bytes(b"k" * 32)
    secret.chmod(0o600)
    (jobdir / "manifest.json").write_text("{}")  # written by the server: the worker must read it to resume
    (jobdir / "link").symlink_to(secret)
    os.link(secret, jobdir / "hardlink")
    sb = WorkerSandbox(TEST_USER, worker_user.pw_uid, worker_user.pw_gid)
    prepare_job_dir(sb, jobdir)
    assert jobdir.stat().st_uid == worker_user.pw_uid and (jobdir / "manifest.json").stat().st_uid == worker_user.pw_uid
    assert (jobdir / "checkpoints").stat().st_uid == worker_user.pw_uid
    assert secret.stat().st_uid == 0 and secret.stat().st_mode & 0o777 == 0o600  # neither link handed it over
    assert (base / "clusters").stat().st_mode & 0o777 == 0o701  # crossable, not listable


SCRIPT = """
    import json, os, resource, sys
    import torch
    from podfleet.training import helpers as pf

    probe = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": os.getcwd(),
             "home": os.environ.get("HOME"), "env": sorted(k for k in os.environ if k.startswith("PODFLEET_")),
             "nofile": resource.getrlimit(resource.RLIMIT_NOFILE), "core": resource.getrlimit(resource.RLIMIT_CORE)}
    for name, path in {"db": sys.argv[1], "kek": sys.argv[2]}.items():
        try:
            open(path, "rb").read()
            probe[name] = "read"
        except OSError as exc:
            probe[name] = type(exc).__name__
    got = pf.load_state()
    start, w = (got[0], got[1]["w"]) if got else (0, torch.zeros(2))
    probe["resumed_from"] = start
    for step in range(start + 1, pf.config().steps + 1):
        w = w + 1.0
        pf.report(step=step, loss=float(w.sum()))
        if step % 2 == 0:
            pf.save_state({"w": w}, step=step)
    with open(f"probe-{pf.rank()}-{start}.json", "w") as f:
        json.dump(probe, f)
"""


def _logs(jobdir: Path) -> str:
    logs = [*sorted(jobdir.glob("*.log")), *sorted((jobdir.parent.parent / "standby").glob("*.log"))]
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs)


@pytest.mark.realproc
def test_workers_run_unprivileged_and_still_train_with_encrypted_checkpoints(
        worker_user: pwd.struct_passwd, worker_python: dict[str, str], outside: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from podfleet.fabric.base import RunState, WorkerGroupSpec
    from podfleet.fabric.local import LocalFabric

    for k, v in worker_python.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PODFLEET_WORKER_USER", TEST_USER)
    monkeypatch.setenv("PODFLEET_WORKER_LIMIT_NOFILE", "512")
    monkeypatch.setenv("PODFLEET_ADMIN_TOKEN", "pf_never-for-a-worker")
    monkeypatch.delenv("PODFLEET_KEY_DIR", raising=False)
    monkeypatch.delenv("PODFLEET_CHECKPOINT_KEY", raising=False)
    root = outside / "data"
    root.mkdir(mode=0o700)
    db = root / "podfleet.db"
    db.write_bytes(b"SQLite format 3\x00 tokens...")
    db.chmod(0o600)
    src = outside / "src"
    src.mkdir()
    (src / "train.py").write_text(textwrap.dedent(SCRIPT))
    # A pushed code artifact: private to the server (0700/0600), so it is staged into the job's directory.
    art = store_artifact(pack_dir(src), root / "code")
    entry = str(root / "code" / art.digest / "train.py")
    # One warm standby: rank 0 of the first gang is a standby given its job (key and all on stdin).
    fab = LocalFabric(2, workdir=root / "clusters" / "c1", hang_timeout_s=30, warm_workers=1)
    try:
        kek_file = Path(fab.key_file or "")
        assert kek_file == root / "keys" / "c1.kek" and kek_file.stat().st_mode & 0o777 == 0o600
        args = {"entrypoint_args": [str(db), str(kek_file)]}
        # Two ranks: the server commits each checkpoint's manifest (as root), the resumed gang reads it.
        fab.launch(WorkerGroupSpec("job-sbx", (0, 1), "custom", 4, entrypoint=entry,
                                   options=args))
        st = fab.wait("job-sbx", 150)
        assert st.state is RunState.FINISHED, _logs(fab.workdir / "jobs" / "job-sbx")
        jobdir = fab.workdir / "jobs" / "job-sbx"
        # Staged read-only for the job (the server's file, the job's group), beside its directory.
        staged = fab.workdir / "staged" / "job-sbx" / art.digest / "train.py"
        assert (staged.stat().st_uid, staged.stat().st_gid) == (0, worker_user.pw_gid)
        assert (root / "code" / art.digest / "train.py").stat().st_uid == 0  # the store stays the server's
        # The standby opened its own log (in the directory handed to it); the fresh worker got an open one.
        assert (jobdir / "attempt-1-rank-0.log").stat().st_uid == worker_user.pw_uid
        for r in (0, 1):
            probe = json.loads((jobdir / f"probe-{r}-0.json").read_text())
            assert (probe["uid"], probe["gid"], probe["groups"]) == (worker_user.pw_uid, worker_user.pw_gid, [])
            assert probe["db"] == probe["kek"] == "PermissionError"
            assert probe["nofile"] == [512, 512] and probe["core"] == [0, 0]
            assert probe["cwd"] == probe["home"] == str(jobdir)
            assert probe["env"] == ["PODFLEET_CHECKPOINT_DIR", "PODFLEET_CHIP", "PODFLEET_JOB_ID"]
        d = manifest.latest(jobdir / "checkpoints")
        assert d is not None
        m = manifest.read(d)
        assert m.step == 4
        blob = manifest.read_shard(d, m.shards[0])
        assert (d / m.shards[0].file).stat().st_uid == worker_user.pw_uid
        kek = keys.load_kek(str(kek_file))
        with pytest.raises(PodfleetError):  # encrypted: no key, no payload
            shard.decode(blob, job_id="job-sbx", step=4, rank=0, kek=None, name="s")
        assert shard.decode(blob, job_id="job-sbx", step=4, rank=0, kek=kek, name="s")

        fab.launch(WorkerGroupSpec("job-sbx", (0, 1), "custom", 6, entrypoint=entry,
                                   options=args))
        st = fab.wait("job-sbx", 150)
        assert st.state is RunState.FINISHED, _logs(fab.workdir / "jobs" / "job-sbx")
        assert json.loads((jobdir / "probe-1-4.json").read_text())["resumed_from"] == 4
    finally:
        fab.close()


def test_key_material_goes_by_pipe_not_by_name(tmp_path: Path) -> None:
    f = tmp_path / "k.kek"
    f.write_text("ab" * 32)
    got = sandbox.key_material(str(f), "UNUSED", {})
    assert got is not None
    fd = sandbox.key_pipe(got)
    with os.fdopen(fd, "rb") as r:
        line = r.read()
    doc = json.loads(line)
    assert doc["source"] == f"key file {f}"
    assert sandbox.key_material(None, "PODFLEET_CHECKPOINT_KEY", {"PODFLEET_CHECKPOINT_KEY": "cd" * 32})
    assert sandbox.key_material(str(tmp_path / "missing"), "X", {}) is None


@pytest.mark.realproc
def test_a_key_from_the_environment_reaches_the_worker_by_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from podfleet.fabric.base import RunState, WorkerGroupSpec
    from podfleet.fabric.local import LocalFabric

    key_hex = "cd" * 32
    monkeypatch.setenv("PODFLEET_CHECKPOINT_KEY", key_hex)
    monkeypatch.setenv("PODFLEET_WORKER_USER", "root")  # this one is about the key, not the user
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    fab = LocalFabric(1, workdir=tmp_path / "work")
    try:
        assert fab.key_file is None  # the fabric takes the key from the environment
        fab.launch(WorkerGroupSpec("job-envkey", (0,), "custom", 2, entrypoint=str(script),
                                   options={"entrypoint_args": ["/nonexistent-db", "/nonexistent-kek"]}))
        st = fab.wait("job-envkey", 120)
        jobdir = fab.workdir / "jobs" / "job-envkey"
        assert st.state is RunState.FINISHED, _logs(jobdir)
        probe = json.loads((jobdir / "probe-0-0.json").read_text())
        assert "PODFLEET_CHECKPOINT_KEY" not in probe["env"]  # not in its environment...
        d = manifest.latest(jobdir / "checkpoints")
        assert d is not None
        entry = manifest.read(d).shards[0]
        kek = keys.parse_key(key_hex.encode(), source="test")  # ...yet it encrypted with it
        assert shard.decode(manifest.read_shard(d, entry), job_id="job-envkey", step=2, rank=0, kek=kek, name="s")
    finally:
        fab.close()


def test_the_server_never_writes_through_a_link_planted_in_a_workers_directory(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_bytes(b"keep me")
    d = tmp_path / "step-00000004"  # a worker's checkpoint directory; the server commits manifests here
    d.mkdir()
    (d / f".manifest.json.tmp-{os.getpid()}").symlink_to(target)
    shard.atomic_write(d / "manifest.json", b"{}")
    assert target.read_bytes() == b"keep me" and (d / "manifest.json").read_bytes() == b"{}"
