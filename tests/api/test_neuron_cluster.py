"""A ``--fabric neuron`` cluster through the REST API and the CLI, with replayed Neuron
tools: neuron-ls (``tests/fabric/neuron/replay_ls.py``) gives a trn2.48xlarge's 16
devices, neuron-monitor (``replay.py``) streams reports for all of them and then an
uncorrectable SRAM ECC error on device 5.

One control plane (paced timeline, in-memory store, built by the composition root as
``podfleet up`` builds it) for the module.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.cli.main import app
from podfleet.compose import build
from podfleet.control import ControlPlane
from podfleet.control.fabricaccess import FabricAccess
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore

pytestmark = pytest.mark.realproc

TOKEN = "pf_test-admin-token-0123456789abcdef"
NEURON = Path(__file__).parents[1] / "fabric" / "neuron"
DATA = NEURON / "data"
ECC_DEVICE = 5  # tests/fabric/neuron/data/make_trn2_48xlarge.py


def ls_cmd(doc: str = "neuron-ls-trn2-48xlarge.json", *extra: str) -> str:
    return shlex.join([sys.executable, str(NEURON / "replay_ls.py"), str(DATA / doc), *extra])


def monitor_cmd(doc: str = "neuron-monitor-trn2-48xlarge.jsonl", *extra: str) -> str:
    return shlex.join([sys.executable, str(NEURON / "replay.py"), str(DATA / doc), *extra])


class Env:
    def __init__(self, url: str, plane: ControlPlane) -> None:
        self.url, self.plane = url, plane
        self.c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    # The replayed tools (and a missing one) are what an administrator allowed.
    allowed = FabricAccess(neuron_commands=(shlex.join([sys.executable, str(NEURON / "replay_ls.py")]),
                                            shlex.join([sys.executable, str(NEURON / "replay.py")]),
                                            "/nonexistent/neuron-ls"))
    parts = build(MemoryStore(), Timeline(seed=1, speed=1.0), telemetry_interval_s=0.5,
                  workdir=str(tmp_path_factory.mktemp("work")), fabric_access=allowed)
    plane = parts.plane
    bootstrap_admin(plane, TOKEN)
    with serve_in_thread(plane, parts=parts) as url:
        e = Env(url, plane)
        yield e
        e.c.close()


def wait(cond: Callable[[], object], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s")
        time.sleep(0.1)


def create(env: Env, name: str, **body: object) -> dict:
    r = env.c.post("/v1/clusters", json={"name": name, "fabric": "neuron", **body})
    assert r.status_code == 201, r.text
    wait(lambda: env.c.get(f"/v1/clusters/{name}").json()["state"] != "deploying")
    return env.c.get(f"/v1/clusters/{name}").json()


@pytest.fixture(scope="module")
def trn(env: Env) -> dict:
    view = create(env, "trn", neuron_ls=ls_cmd(), neuron_monitor=monitor_cmd("neuron-monitor-trn2-48xlarge.jsonl",
                                                                           "--delay", "0.3", "--then", "repeat"))
    assert view["state"] == "active", view
    return view


def test_devices_and_metrics_from_the_neuron_tools(env: Env, trn: dict) -> None:
    assert trn["fabric"] == "neuron" and trn["chips"] == 16 and trn["dims"] == [4, 4]
    assert trn["spec"]["neuron_ls"] == ls_cmd()

    def hardware() -> dict:
        return env.c.get("/v1/clusters/trn/hardware").json()

    def streamed(chip: dict) -> bool:
        util = chip["metrics"]["neuroncore_utilization"]
        return all(u is not None and u > 0 for u in util) and (chip["metrics"]["hbm_used_bytes"] or 0) > 0

    wait(lambda: all(streamed(c) for c in hardware()["chips"]))
    hw = hardware()
    assert len(hw["chips"]) == 16 and len(hw["links"]) == 32
    for chip in hw["chips"]:
        m = chip["metrics"]
        assert len(m["neuroncore_utilization"]) == 8  # 4 logical cores x 2 physical at LNC=2
        assert m["hbm_total_bytes"] == 103079215104  # neuron-ls memory_size
        assert m["temperature_c"] is None  # neuron-monitor does not report it: null, not made up
    assert hw["chips"][3]["metrics"]["neuroncore_utilization"][0] >= 13  # 10 + device + step


def test_uncorrectable_ecc_raises_an_alert_naming_the_device(env: Env, trn: dict) -> None:
    def ecc_alerts() -> list[dict]:
        alerts = env.c.get("/v1/clusters/trn/alerts").json()["alerts"]
        return [a for a in alerts if a["rule"] == "ecc-uncorrected"]

    wait(lambda: ecc_alerts(), 30)
    (alert,) = ecc_alerts()
    assert alert["target"] == f"chip:{ECC_DEVICE}" and alert["severity"] == "critical"
    assert "uncorrectable ECC" in alert["message"]
    # The chip's state follows the alert through the recovery flow's isolate step: wait for it.
    def chip() -> dict:
        return env.c.get("/v1/clusters/trn/hardware").json()["chips"][ECC_DEVICE]

    wait(lambda: chip()["state"] in ("failed", "isolated"), 30)
    assert chip()["metrics"]["sram_ecc_uncorrected"] == 1
    lines = "\n".join(ln["message"] for ln in env.c.get("/v1/clusters/trn/logs").json()["lines"])
    assert "chip-failed" in lines


def test_a_job_runs_as_worker_processes(env: Env, trn: dict) -> None:
    r = env.c.post("/v1/clusters/trn/jobs", json={
        "model": "debug", "chips": 2, "steps": 3, "checkpoint_interval": 0,
        "options": {"seed": 7, "global_batch": 8, "seq_len": 32}})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    wait(lambda: env.c.get(f"/v1/jobs/{job_id}").json()["state"] in ("SUCCEEDED", "FAILED", "STOPPED"), 180)
    out = env.c.get(f"/v1/jobs/{job_id}").json()
    assert out["state"] == "SUCCEEDED", out.get("reason")
    assert ECC_DEVICE not in out["allocation"]["chips"]


def test_a_monitor_that_exits_degrades_the_cluster_and_nothing_crashes(env: Env) -> None:
    view = create(env, "trn-flaky", neuron_ls=ls_cmd(),
                  neuron_monitor=monitor_cmd("neuron-monitor-trn2-full.json", "--then", "exit", "--exit-code", "3"))
    assert view["state"] == "active"

    def reason() -> str:
        return str(env.c.get("/v1/clusters/trn-flaky").json().get("reason", ""))

    wait(lambda: "exited with code 3" in reason())
    assert "neuron-monitor command" in reason() and "restarting in" in reason()
    lines = "\n".join(ln["message"] for ln in env.c.get("/v1/clusters/trn-flaky/logs").json()["lines"])
    assert "fabric-degraded" in lines
    assert env.c.get("/v1/clusters/trn-flaky/hardware").status_code == 200
    assert env.c.delete("/v1/clusters/trn-flaky").status_code == 200


@pytest.mark.parametrize(("body", "status", "needle"), [
    ({"neuron_monitor": "neuron-monitor 'unclosed"}, 400, "cannot be split"),
    ({"fabric": "sim", "neuron_monitor": monitor_cmd()}, 422, "applies to fabric neuron"),
    ({"neuron_monitor": "/bin/sh -c 'curl example.com'"}, 403, "PODFLEET_NEURON_COMMANDS"),
])
def test_bad_neuron_commands_are_one_line_4xx(env: Env, body: dict, status: int, needle: str) -> None:
    r = env.c.post("/v1/clusters", json={"name": "trn-bad", "fabric": "neuron", "neuron_ls": ls_cmd(), **body})
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert needle in detail and "\n" not in detail and "Traceback" not in detail
    assert env.c.get("/v1/clusters/trn-bad").status_code == 404


@pytest.mark.parametrize(("neuron_ls", "needle"), [
    (ls_cmd("neuron-ls-trn2-48xlarge.json", "--exit-code", "4"), "exited with code 4"),
    (ls_cmd("neuron-monitor-trn2-full.json"), "must be a JSON list of devices"),
    ("/nonexistent/neuron-ls -j", "not found"),
])
def test_a_neuron_ls_that_fails_fails_the_cluster_with_one_line(env: Env, neuron_ls: str, needle: str) -> None:
    # neuron-ls runs off the engine thread: the create answers, the cluster then fails.
    r = env.c.post("/v1/clusters", json={"name": "trn-bad", "fabric": "neuron", "neuron_ls": neuron_ls})
    assert r.status_code == 201, r.text
    wait(lambda: env.c.get("/v1/clusters/trn-bad").json()["state"] == "failed")
    reason = env.c.get("/v1/clusters/trn-bad").json()["reason"]
    assert reason.startswith("cannot connect to the host's Neuron devices") and needle in reason, reason
    assert "\n" not in reason and "Traceback" not in reason
    assert env.c.delete("/v1/clusters/trn-bad").status_code == 200


def test_only_admins_may_name_neuron_commands(env: Env) -> None:
    # The commands run on the control-plane host: an operator token is refused, audited.
    from podfleet.security.tokens import generate_token, hash_token, new_token_id
    from podfleet.store.records import TokenRecord

    tok = generate_token()
    env.plane.store.add_token(TokenRecord(new_token_id(), "ops", "operator", hash_token(tok), 0.0))
    with httpx.Client(base_url=env.url, headers={"Authorization": f"Bearer {tok}"}, timeout=30) as op:
        r = op.post("/v1/clusters", json={"name": "trn-op", "fabric": "neuron", "neuron_monitor": monitor_cmd()})
    assert r.status_code == 403 and "needs admin" in r.json()["detail"], r.text
    assert env.c.get("/v1/clusters/trn-op").status_code == 404
    denied = [e for e in env.plane.store.list_audit(limit=1000) if e.result == "denied" and e.target == "trn-op"]
    assert denied and denied[-1].actor.endswith(":ops")


def test_cli_flags(env: Env) -> None:
    runner = CliRunner()
    cli_env = {"PODFLEET_URL": env.url, "PODFLEET_TOKEN": TOKEN}
    r = runner.invoke(app, ["cluster", "create", "trn-cli", "--fabric", "neuron", "--neuron-ls", ls_cmd(),
                            "--neuron-monitor", monitor_cmd(), "-o", "json"], env=cli_env)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["fabric"] == "neuron" and out["chips"] == 16 and out["state"] == "active"
    assert out["spec"]["neuron_monitor"] == monitor_cmd()
    r = runner.invoke(app, ["cluster", "create", "trn-cli2", "--fabric", "sim", "--neuron-ls", ls_cmd(),
                            "-o", "json"], env=cli_env)
    assert r.exit_code == 2 and r.stdout == ""
    assert "neuron_ls applies to fabric neuron" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert env.c.delete("/v1/clusters/trn-cli").status_code == 200


def test_diagnosis_names_the_replayed_error_from_its_counters(env: Env, trn: dict) -> None:
    # neuron-monitor's uncorrectable SRAM count on device 5 (not the fabric's own label of it).
    def found() -> list[dict]:
        return env.c.get("/v1/clusters/trn/diagnosis").json()["findings"]

    wait(lambda: any(f["kind"] == "sram-uncorrectable" for f in found()), 30)
    (f,) = [f for f in found() if f["chips"] == [ECC_DEVICE]]
    assert f["kind"] == "sram-uncorrectable" and f["evidence"]["metrics"]["sram_ecc_uncorrected"] == 1
    assert all("fault" not in e for e in f["evidence"]["events"])
