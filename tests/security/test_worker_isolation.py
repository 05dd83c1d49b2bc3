"""Worker isolation on a root server (issue 24): one uid per job, undumpable workers,
nothing of the server reachable, nothing a worker plants followed by root.

Each finding of the probe is a test here: a job reading the server's environment through
``/proc/<ppid>/environ`` (finding 2), another job's files, memory and processes (3), a
root server with no isolation refusing (1, 2), a link planted in a job's directory not
followed on the retry (8); the Ray actor's half is in tests/fabric/ray/test_ray_isolation.py.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podfleet.errors import ConflictError, InvalidInputError
from podfleet.fabric.factory import check_worker_settings
from podfleet.security import harden, jobfiles, uids
from podfleet.security.redact import MASK, Redactor
from podfleet.security.sandbox import REFUSED, WorkerSandbox, from_env
from tests.security.isolation import skip_unless_workers_can_run

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="switching uids needs a root server")
ADMIN = "pf_" + "Q" * 43  # what a server's admin token looks like


def _range(width: int = 16) -> str:
    """A block of the uid range of its own for this test process (other sessions run too)."""
    start = 1879200000 + (os.getpid() % 4000) * width
    return f"{start}-{start + width - 1}"


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Settings of a root server left at its defaults (tests/conftest.py opts the rest of the
    suite into root workers): per-job uids, from a block and lease file of this test's own."""
    monkeypatch.delenv("PODFLEET_WORKER_USER", raising=False)
    monkeypatch.delenv("PODFLEET_WORKER_PYTHON", raising=False)
    monkeypatch.setenv("PODFLEET_WORKER_UIDS", _range())
    monkeypatch.setenv("PODFLEET_WORKER_UID_DIR", str(tmp_path / "leases"))
    if os.geteuid() == 0:
        skip_unless_workers_can_run()
    d = Path(tempfile.mkdtemp(prefix="podfleet-iso-"))  # outside pytest's 0700 base directory
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


# --- settings: refuse root, name the fix -------------------------------------------------------


@ROOT_ONLY
def test_a_root_server_with_no_worker_isolation_refuses_with_the_fix(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("PODFLEET_WORKER_USER", raising=False)
    monkeypatch.setenv("PODFLEET_WORKER_UIDS", "off")
    for kind in ("local", "neuron", "ray"):
        with pytest.raises(InvalidInputError) as err:
            check_worker_settings(kind)  # what `podfleet up` and `cluster create` ask
        assert err.value.message == REFUSED
        assert "PODFLEET_WORKER_UIDS=START-END" in REFUSED and "PODFLEET_WORKER_USER=root" in REFUSED
    check_worker_settings("sim")  # the twin runs no job code
    check_worker_settings("ray", ray_address="10.0.0.1:6379")  # a Ray cluster of its own: its nodes decide
    with pytest.raises(InvalidInputError, match="START-END"):
        from_env({"PODFLEET_WORKER_UIDS": "lots"})
    # The single-user opt-in stays, loudly, every time a fabric starts.
    with caplog.at_level(logging.WARNING, logger="podfleet.security.sandbox"):
        sb = from_env({"PODFLEET_WORKER_USER": "root"})
        from_env({"PODFLEET_WORKER_USER": "root"})
    assert sb.root_opt_in and not sb.switches_user
    assert sum("SECURITY" in r.getMessage() and "ROOT" in r.getMessage() for r in caplog.records) == 2


@ROOT_ONLY
def test_cluster_create_on_a_root_server_with_no_isolation_is_refused_in_one_line(
        api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PODFLEET_WORKER_USER", raising=False)
    monkeypatch.setenv("PODFLEET_WORKER_UIDS", "off")
    with api.client() as c:
        r = c.post("/v1/clusters", json={"name": "iso-refused", "fabric": "local", "chips": 1})
        assert r.status_code == 400, r.text
        assert r.json()["detail"] == REFUSED
        assert c.get("/v1/clusters/iso-refused").status_code == 404  # nothing half-made


@ROOT_ONLY
def test_by_default_a_root_server_gives_jobs_uids_of_their_own(isolated: Path) -> None:
    sb = from_env()
    assert sb.per_job and sb.uid is None and not sb.root_opt_in
    job = sb.for_uid(sb.uid_range[0] if sb.uid_range else -1)
    assert (job.uid, job.gid, job.switches_user) == (job.uid, job.uid, True)
    # Whichever interpreter it settled on, a job's uid can run it (else from_env refused).
    from podfleet.security.sandbox import unreachable

    assert unreachable(job) is None


def test_a_worker_that_is_root_when_its_job_is_due_refuses() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    from podfleet.training.config import WorkerConfig

    cfg = WorkerConfig(job_id="job-root", rank=0, world_size=1, model="debug", steps=1).to_json()
    r, w = os.pipe()
    proc = subprocess.run([sys.executable, "-m", "podfleet.training.worker", "--config", cfg, "--report-fd", str(w)],
                          pass_fds=(w,), capture_output=True, timeout=60, check=False)
    os.close(w)
    with os.fdopen(r) as f:
        msgs = [json.loads(line) for line in f]
    assert proc.returncode == 2
    assert msgs[-1]["type"] == "error" and "refusing to run job code as root" in msgs[-1]["message"]


def test_a_worker_is_undumpable_before_it_is_handed_a_key() -> None:
    code = ("import os; from podfleet.security.harden import set_undumpable, is_dumpable;"
            "a = is_dumpable(); set_undumpable(); print(a, is_dumpable())")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["True", "False"]
    assert harden.is_dumpable()  # only the child changed


# --- uid leases ---------------------------------------------------------------------------------


def test_uid_ranges_parse_and_refuse() -> None:
    assert uids.parse_range(None) == uids.DEFAULT_RANGE
    assert uids.parse_range("off") is None
    assert uids.parse_range("200000-200009") == (200000, 200009)
    for bad in ("0-10", "9-3", "x", "5000"):
        with pytest.raises(InvalidInputError):
            uids.parse_range(bad)


@ROOT_ONLY
def test_leases_give_one_uid_per_job_and_the_last_release_kills_what_is_left(tmp_path: Path) -> None:
    lo, hi = (int(x) for x in _range(4).split("-"))
    pool = uids.UidLeases((lo, hi), tmp_path / "leases")
    a, b = pool.acquire("job-a"), pool.acquire("job-b")
    assert a != b and lo <= a <= hi and lo <= b <= hi
    assert pool.acquire("job-a", holder=1) == a  # another holder (a second rank's actor): the same uid
    stray = subprocess.Popen(["sleep", "60"], user=a, group=a, extra_groups=[])  # a daemon the job left behind
    try:
        assert uids.processes_of(a) == [stray.pid]
        assert pool.release("job-a") is None  # pid 1 still holds it
        assert pool.release("job-a", holder=1) == a
        assert stray.wait(timeout=10) == -9  # killed with the lease
    finally:
        stray.kill()
    assert [lease.owner for lease in pool.leases()] == ["job-b"]


@ROOT_ONLY
def test_a_restarted_server_does_not_reuse_the_uid_of_a_job_still_running(tmp_path: Path) -> None:
    lo, _ = (int(x) for x in _range(2).split("-"))
    pool = uids.UidLeases((lo, lo + 1), tmp_path / "leases")
    dead = subprocess.Popen(["true"])
    dead.wait()
    uid = pool.acquire("job-a", holder=dead.pid)  # the server that leased it is gone...
    live = subprocess.Popen(["sleep", "60"], user=uid, group=uid, extra_groups=[])  # ...its worker is not
    try:
        assert pool.acquire("job-b") == lo + 1
        with pytest.raises(ConflictError, match="widen the range"):
            pool.acquire("job-c")
        assert pool.acquire("job-a") == uid  # the restarted server finds its job's uid again
    finally:
        live.kill()
        live.wait()
    assert uid == lo
    pool.release("job-a")
    dead2 = subprocess.Popen(["true"])
    dead2.wait()
    assert pool.acquire("job-d", holder=dead2.pid) == lo
    # Its holder is dead and nothing runs as it: the lease is stale and reclaimed.
    assert pool.acquire("job-e") == lo
    assert [(le.uid, le.owner) for le in pool.leases()] == [(lo, "job-e"), (lo + 1, "job-b")]


# --- files: nothing a worker plants is followed by root -------------------------------------------


@ROOT_ONLY
def test_staging_replaces_the_code_and_never_follows_a_planted_link(isolated: Path) -> None:
    art = isolated / "store" / ("ab" * 32)
    art.mkdir(parents=True)
    (art / "train.py").write_text("print('v1')\n")
    sb = WorkerSandbox(uid_range=(1, 2)).for_uid(int(_range().split("-")[0]))
    stage = isolated / "work" / "staged" / "job-1"
    path = jobfiles.stage_code(sb, str(art / "train.py"), stage)
    assert path == str(stage / art.name / "train.py")
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, sb.gid, 0o640)  # the job reads, cannot write
    assert stage.stat().st_uid == 0 and stage.stat().st_mode & 0o777 == 0o750
    (art / "train.py").write_text("print('v2')\n")
    assert Path(jobfiles.stage_code(sb, str(art / "train.py"), stage)).read_text() == "print('v2')\n"  # afresh
    victim = isolated / "victim"
    victim.mkdir()
    shutil.rmtree(stage)
    stage.symlink_to(victim)  # should a link ever stand there, the server refuses to go through it
    with pytest.raises(OSError):
        jobfiles.stage_code(sb, str(art / "train.py"), stage)
    assert list(victim.iterdir()) == []


def test_log_tails_and_logs_never_follow_a_link(tmp_path: Path) -> None:
    from podfleet.security.files import open_private_append

    secret = tmp_path / "cluster.kek"
    secret.write_text("k" * 64)
    log = tmp_path / "attempt-1-rank-0.log"
    log.symlink_to(secret)
    assert jobfiles.read_tail(log, 5) == []  # a log swapped for a link to the key shows nothing
    os.close(open_private_append(log))  # the server's next log there replaces the link, not the key
    assert secret.read_text() == "k" * 64 and not log.is_symlink()
    log.write_text("a\nb\nc\n")
    assert jobfiles.read_tail(log, 2) == ["b", "c"]


def test_output_is_redacted_of_tokens_and_the_servers_keys(tmp_path: Path) -> None:
    kek = tmp_path / "c.kek"
    key = bytes(range(32))
    kek.write_text(key.hex())
    red = Redactor.for_server({"PODFLEET_ADMIN_TOKEN": "not-a-pf-token-but-secret",
                               "PODFLEET_DB": "postgresql://u:hunter2-pass@db/x", "PODFLEET_PORT": "8470"},
                              key_files=[str(kek)])
    line = (f"leak {ADMIN} and not-a-pf-token-but-secret, db hunter2-pass, kek {key.hex()}, port 8470, "
            f"b64 {__import__('base64').b64encode(key).decode()}")
    out = red.redact(line)
    assert ADMIN not in out and "secret" not in out and "hunter2" not in out and key.hex() not in out
    assert out.count(MASK) == 5 and "port 8470" in out


# --- jobs for real: one cannot reach another, nor the server ----------------------------------------

VICTIM = """
    import os, sys, time
    import torch
    from podfleet.training import helpers as pf

    with open("secret.txt", "w") as f:
        f.write("victim-data")
    pf.save_state({"w": torch.ones(2)}, step=1)  # an encrypted shard: the key is in this process
    pf.report(step=1, loss=1.0)
    deadline = time.time() + 90
    while not os.path.exists("release") and time.time() < deadline:
        time.sleep(0.1)
        pf.report(step=1, loss=1.0)
"""

ATTACKER = """
    import json, os, signal, sys

    victim_pid, victim_dir, kek, token = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    probe = {"uid": os.getuid(), "ppid_environ_has_token": None}

    def attempt(name, fn):
        try:
            fn()
            probe[name] = "ok"
        except OSError as exc:
            probe[name] = type(exc).__name__

    def server_env():
        data = open(f"/proc/{os.getppid()}/environ", "rb").read()
        probe["ppid_environ_has_token"] = b"PODFLEET_ADMIN_TOKEN" in data

    attempt("server_environ", server_env)
    attempt("victim_environ", lambda: open(f"/proc/{victim_pid}/environ", "rb").read())
    attempt("victim_mem", lambda: open(f"/proc/{victim_pid}/mem", "rb").read(1))
    attempt("victim_file", lambda: open(os.path.join(victim_dir, "secret.txt")).read())
    attempt("victim_list", lambda: os.listdir(os.path.join(victim_dir, "checkpoints")))
    attempt("victim_kill", lambda: os.kill(victim_pid, signal.SIGSTOP))
    attempt("kek", lambda: open(kek, "rb").read())
    with open("probe.json", "w") as f:
        json.dump(probe, f)
    print(f"found {token}")  # as if it had found the token after all: the tail must not show it
    raise RuntimeError(f"leaking {token}")
"""


def _write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.write_text(textwrap.dedent(text))
    p.chmod(0o644)
    return p


@ROOT_ONLY
@pytest.mark.realproc
def test_a_job_reaches_neither_the_server_nor_another_job(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from podfleet.fabric.base import RunState, WorkerGroupSpec
    from podfleet.fabric.local import LocalFabric

    monkeypatch.setenv("PODFLEET_ADMIN_TOKEN", ADMIN)  # the server's environment holds it
    monkeypatch.delenv("PODFLEET_CHECKPOINT_KEY", raising=False)
    monkeypatch.delenv("PODFLEET_KEY_DIR", raising=False)
    src = isolated / "src"
    src.mkdir(mode=0o755)
    victim, attacker = _write(src, "victim.py", VICTIM), _write(src, "attacker.py", ATTACKER)
    data = isolated / "data"
    data.mkdir(mode=0o700)
    fab = LocalFabric(2, workdir=data / "clusters" / "c1", hang_timeout_s=60)
    try:
        fab.launch(WorkerGroupSpec("job-victim", (0,), "custom", 1, entrypoint=str(victim)))
        st = fab.wait("job-victim", 120, until=lambda s: s.step >= 1)
        assert st.state is RunState.RUNNING, st
        vpid = fab.pids("job-victim")[0]
        vdir = fab.workdir / "jobs" / "job-victim"
        deadline = time.monotonic() + 30
        while not (vdir / "secret.txt").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        fab.launch(WorkerGroupSpec("job-attacker", (1,), "custom", 1, entrypoint=str(attacker),
                                   options={"entrypoint_args": [str(vpid), str(vdir), str(fab.key_file), ADMIN]}))
        st = fab.wait("job-attacker", 120)
        adir = fab.workdir / "jobs" / "job-attacker"
        assert st.state is RunState.FAILED, st
        probe = json.loads((adir / "probe.json").read_text())
        vuid = int(next(ln for ln in Path(f"/proc/{vpid}/status").read_text().splitlines()
                        if ln.startswith("Uid:")).split()[1])
        assert probe["uid"] != 0 and vuid != 0 and probe["uid"] != vuid  # a uid each, neither root
        assert Path(f"/proc/{vpid}/mem").stat().st_uid == 0  # undumpable: its /proc files are root's
        assert probe["server_environ"] == "PermissionError" and probe["ppid_environ_has_token"] is None
        for name in ("victim_environ", "victim_mem", "victim_file", "victim_list", "victim_kill", "kek"):
            assert probe[name] == "PermissionError", (name, probe)
        # The second line of defence: what it printed and raised is redacted where people read it.
        shown = "\n".join([*st.log_tail, st.reason or "", *fab.job_logs("job-attacker")])
        assert ADMIN not in shown and MASK in shown, shown
        # Its uid went back to the pool with its directory; the victim still holds its own.
        assert adir.stat().st_uid == 0 and (adir / "probe.json").stat().st_uid == 0
        assert [le.uid for le in uids.UidLeases(from_env().uid_range or (0, 0)).leases()] == [vuid]
        (vdir / "release").write_text("")
        assert fab.wait("job-victim", 60).state is RunState.FINISHED
        assert uids.UidLeases(from_env().uid_range or (0, 0)).leases() == []
    finally:
        fab.close()


RETRY = """
    import json, os, sys

    target_dir, target_file = sys.argv[1], sys.argv[2]
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.exists("attempt-1.json"):
        tried = {}
        try:
            open(os.path.join(here, "planted.py"), "w").write("x")
            tried["write_staged"] = "ok"
        except OSError as exc:
            tried["write_staged"] = type(exc).__name__
        # Links where the server writes or stages on the next attempt (the probe's finding 8).
        os.symlink(target_dir, "code")
        os.symlink(target_file, "attempt-2-rank-0.log")
        os.symlink(target_file, "work_split.json.tmp")
        with open("attempt-1.json", "w") as f:
            json.dump(tried, f)
        sys.exit(1)  # a user error: the job is retried
    with open("attempt-2.json", "w") as f:
        json.dump({"file": os.path.abspath(__file__), "code": open(__file__).read()[:20]}, f)
"""


@ROOT_ONLY
@pytest.mark.realproc
def test_links_a_job_plants_are_not_followed_on_its_retry(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from podfleet.fabric.base import RunState, WorkerGroupSpec
    from podfleet.fabric.local import LocalFabric
    from podfleet.security.code import pack_dir, store_artifact

    monkeypatch.delenv("PODFLEET_CHECKPOINT_KEY", raising=False)
    src = isolated / "src"
    src.mkdir(mode=0o755)
    _write(src, "train.py", RETRY)
    data = isolated / "data"
    data.mkdir(mode=0o700)
    art = store_artifact(pack_dir(src), data / "code")  # pushed code: private to the server, staged per gang
    target_dir, target_file = isolated / "target-dir", isolated / "target-file"
    target_dir.mkdir()
    target_file.write_text("precious\n")
    fab = LocalFabric(1, workdir=data / "clusters" / "c1", hang_timeout_s=60)
    try:
        fab.launch(WorkerGroupSpec("job-retry", (0,), "custom", 1,
                                   entrypoint=str(data / "code" / art.digest / "train.py"),
                                   options={"max_retries": 1, "entrypoint_args": [str(target_dir), str(target_file)]}))
        st = fab.wait("job-retry", 150)
        jobdir = fab.workdir / "jobs" / "job-retry"
        assert st.state is RunState.FINISHED, (st, jobfiles.read_tail(jobdir / "attempt-1-rank-0.log", 20))
        assert json.loads((jobdir / "attempt-1.json").read_text()) == {"write_staged": "PermissionError"}
        second = json.loads((jobdir / "attempt-2.json").read_text())
        assert second["file"] == str(fab.workdir / "staged" / "job-retry" / art.digest / "train.py")
        assert second["code"].strip().startswith("import json")
        assert target_file.read_text() == "precious\n" and list(target_dir.iterdir()) == []
        log2 = jobdir / "attempt-2-rank-0.log"
        assert log2.is_file() and not log2.is_symlink()
        assert not (fab.workdir / "staged" / "job-retry").exists()  # the job's end took the staged copy away
    finally:
        fab.close()


STANDBY_PROBE = """
    import json, os
    with open("probe.json", "w") as f:
        json.dump({"ids": [os.getresuid(), os.getresgid(), os.getgroups()], "pid": os.getpid()}, f)
"""


@ROOT_ONLY
@pytest.mark.realproc
def test_a_warm_standby_drops_to_its_jobs_uid_before_the_job(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from podfleet.fabric.base import RunState, WorkerGroupSpec
    from podfleet.fabric.local import LocalFabric

    src = isolated / "src"
    src.mkdir(mode=0o755)
    script = _write(src, "probe.py", STANDBY_PROBE)
    data = isolated / "data"
    data.mkdir(mode=0o700)
    fab = LocalFabric(1, workdir=data / "clusters" / "c1", hang_timeout_s=60, warm_workers=1)
    try:
        deadline = time.monotonic() + 120
        while fab.warm_ready() < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert fab.warm_ready() == 1
        import psutil

        standbys = [p.pid for p in psutil.Process().children() if "--standby" in p.cmdline()]
        assert len(standbys) == 1 and psutil.Process(standbys[0]).uids().real == 0  # root until assigned
        fab.launch(WorkerGroupSpec("job-warm", (0,), "custom", 1, entrypoint=str(script)))
        st = fab.wait("job-warm", 120)
        jobdir = fab.workdir / "jobs" / "job-warm"
        assert st.state is RunState.FINISHED, (st, jobfiles.read_tail(jobdir / "attempt-1-rank-0.log", 20))
        probe = json.loads((jobdir / "probe.json").read_text())
        (ruid, euid, suid), (rgid, egid, sgid), groups = probe["ids"]
        lo, hi = (int(x) for x in _range().split("-"))
        assert lo <= ruid <= hi and ruid == euid == suid == rgid == egid == sgid and groups == []
        assert probe["pid"] == standbys[0]  # the standby ran the job, under the job's uid
    finally:
        fab.close()


def test_a_step_directory_swapped_for_a_link_is_not_written_through(tmp_path: Path) -> None:
    from podfleet.checkpoint.shard import atomic_write

    victim = tmp_path / "victim"
    victim.mkdir()
    step = tmp_path / "checkpoints" / "step-00000004"  # the job owns this tree
    step.parent.mkdir()
    step.symlink_to(victim)  # swapped in after the server checked it
    with pytest.raises(OSError):
        atomic_write(step / "manifest.json", b"{}")
    assert list(victim.iterdir()) == []
