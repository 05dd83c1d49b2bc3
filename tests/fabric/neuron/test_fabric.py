"""``NeuronFabric`` against replayed neuron-ls / neuron-monitor commands (``replay_ls.py``,
``replay.py``): topology, per-device metrics, ECC faults, a broken monitor, bad commands."""

from __future__ import annotations

import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.fabric.base import (
    ChipState,
    Closeable,
    Fabric,
    FabricEvent,
    FaultInjection,
    HostCommands,
    Introspection,
    LinkState,
    ResumableRuns,
    TelemetrySource,
    WorkerGroupSpec,
    WorkerKill,
)
from podfleet.fabric.neuron.fabric import NeuronFabric, visible_cores
from podfleet.health.alerts import AlertBook
from podfleet.health.scan import HealthScanner

HERE = Path(__file__).parent
DATA = HERE / "data"
PY = shlex.quote(sys.executable)
LS48 = DATA / "neuron-ls-trn2-48xlarge.json"
STREAM48 = DATA / "neuron-monitor-trn2-48xlarge.jsonl"
ECC_DEVICE = 5  # data/make_trn2_48xlarge.py


def ls_cmd(path: Path = LS48, *extra: str) -> str:
    return shlex.join([sys.executable, str(HERE / "replay_ls.py"), str(path), *extra])


def monitor_cmd(path: Path = STREAM48, *extra: str) -> str:
    return shlex.join([sys.executable, str(HERE / "replay.py"), str(path), *extra])


def wait(cond: Callable[[], object], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s")
        time.sleep(0.05)


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., tuple[NeuronFabric, list[FabricEvent]]]]:
    made: list[NeuronFabric] = []

    def build(monitor: str, ls: str | None = None, **kw: object) -> tuple[NeuronFabric, list[FabricEvent]]:
        kw = {"backoff_initial_s": 0.1, "backoff_max_s": 0.4, "workdir": tmp_path / f"w{len(made)}", **kw}
        fab = NeuronFabric(neuron_ls=ls or ls_cmd(), neuron_monitor=monitor, **kw)  # type: ignore[arg-type]
        made.append(fab)
        events: list[FabricEvent] = []
        fab.subscribe(events.append)
        return fab, events

    yield build
    for fab in made:
        fab.close()


def kinds(events: list[FabricEvent]) -> list[str]:
    return [e.kind for e in list(events)]


# --- topology, metrics, capabilities ----------------------------------------------------
def test_trn2_48xlarge_topology_metrics_and_capabilities(make) -> None:
    fab, _ = make(monitor_cmd(STREAM48, "--delay", "0.05"))
    assert fab.kind == "neuron" and fab.topology.name == "trn2-node" and fab.topology.n_chips == 16
    assert isinstance(fab, Fabric)
    for cap in (TelemetrySource, Introspection, WorkerKill, Closeable):
        assert isinstance(fab, cap), cap
    assert not isinstance(fab, ResumableRuns) and not isinstance(fab, FaultInjection)
    lm = fab.link_metrics()
    links = {(min(a, b), max(a, b)) for a, b in zip(lm["src"].tolist(), lm["dst"].tolist(), strict=True)}
    assert len(links) == 32 and (0, 1) in links and (0, 12) in links  # the 4x4 torus of connected_to
    assert (lm["bandwidth_bytes_per_s"] > 0).all()
    assert fab.link_states() == [LinkState.UP] * 32
    wait(lambda: fab.monitor_status()["reports"] >= 2)
    m = fab.chip_metrics()
    util = np.asarray(m["neuroncore_utilization"])
    assert util.shape == (16, 8) and (util > 0).all()  # every device, every physical core, from the stream
    assert np.isfinite(m["hbm_used_bytes"]).all() and (m["hbm_used_bytes"] > 0).all()
    assert {"neuroncore_utilization", "mem_ecc_uncorrected", "sram_ecc_uncorrected"} <= fab.telemetry_metrics()
    assert not {"temperature_c", "clock_mhz", "hbm_bw_bytes_per_s"} & fab.telemetry_metrics()  # NaN: not measured
    assert set(fab.telemetry_metrics()) <= set(m)
    assert fab.health_reason() is None and fab.monitor_status()["state"] == "ok"
    # HostCommands (maintenance rollouts): the host's command runs where the workers run.
    assert isinstance(fab, HostCommands)
    res = fab.host_command(3, ["sh", "-c", "echo on $PODFLEET_HOST"], env={"PODFLEET_HOST": "h"}, timeout_s=10)()
    assert res.ok and res.output.strip() == "on h" and res.host == fab.chip_hosts()[3]


def test_uncorrectable_ecc_fails_the_device_and_alerts(make) -> None:
    fab, events = make(monitor_cmd(STREAM48, "--delay", "0.05", "--then", "repeat"))
    scanner = HealthScanner("cl-n", 16, len(fab.link_states()), AlertBook())
    lm = fab.link_metrics()
    scanner.scan(0.0, fab.chip_metrics(), np.zeros(16, int), lm, lm["state"])  # before any report: NaN
    wait(lambda: "chip-failed" in kinds(events))
    failed = [e for e in events if e.kind == "chip-failed"]
    assert len(failed) == 1  # a repeated report with the same counters is not a new fault
    ev = failed[0]
    assert ev.chip == ECC_DEVICE and ev.detail["cause"] == "sram-uncorrectable"
    assert f"Neuron device {ECC_DEVICE}" in ev.detail["reason"] and ev.detail["action"] == "replace"
    assert fab.chip_states()[ECC_DEVICE] is ChipState.FAILED
    assert [s for i, s in enumerate(fab.chip_states()) if i != ECC_DEVICE] == [ChipState.HEALTHY] * 15
    states = np.array([list(ChipState).index(s) for s in fab.chip_states()])
    res = scanner.scan(2.0, fab.chip_metrics(), states, lm, lm["state"])
    fired = {(a.target, a.rule) for a in res.fired}
    assert (f"chip:{ECC_DEVICE}", "ecc-uncorrected") in fired
    assert all(a.target == f"chip:{ECC_DEVICE}" for a in res.fired)


def test_a_monitor_that_exits_is_reported_and_restarted(make) -> None:
    fab, events = make(monitor_cmd(DATA / "neuron-monitor-trn2-full.json", "--then", "exit", "--exit-code", "3"))
    wait(lambda: kinds(events).count("fabric-degraded") >= 2)
    degraded = [e for e in list(events) if e.kind == "fabric-degraded"]
    assert degraded and "exited with code 3" in degraded[0].detail["reason"]
    assert "replay.py" in degraded[0].detail["reason"] and "restarting in" in degraded[0].detail["reason"]
    assert "fabric-recovered" in kinds(events)  # each restart delivered a report again
    assert fab.monitor_status()["restarts"] >= 2


def test_garbage_marks_degraded_then_restarts(make) -> None:
    fab, events = make(monitor_cmd(DATA / "neuron-monitor-trn2-full.json", "--delay", "0.02", "--then", "garbage"),
                       max_bad_in_row=3)

    def reasons() -> list[str]:
        return [e.detail["reason"] for e in list(events) if e.kind == "fabric-degraded"]

    wait(lambda: any("restarting in" in r for r in reasons()))
    assert "malformed document" in reasons()[0] and "not JSON" in reasons()[0]
    assert re.search(r"printed \d+ malformed documents in a row \(last: not JSON", reasons()[1])
    assert fab.monitor_status()["malformed"] >= 3
    assert fab.chip_metrics()["neuroncore_utilization"].shape == (16, 8)  # telemetry kept, not crashed


def test_a_monitor_that_cannot_start_backs_off(make) -> None:
    fab, events = make("/nonexistent/neuron-monitor --flag", backoff_initial_s=0.05, backoff_max_s=0.2)
    wait(lambda: kinds(events).count("fabric-degraded") >= 3)
    reason = fab.health_reason()
    assert reason is not None and "cannot start" in reason and "/nonexistent/neuron-monitor" in reason
    assert fab.monitor_status()["state"] == "degraded" and fab.monitor_status()["runs"] == 0
    assert kinds(events).count("fabric-degraded") >= 3  # one per restart, capped backoff
    before = fab.monitor_status()["restarts"]
    time.sleep(0.5)
    assert fab.monitor_status()["restarts"] - before <= 4  # the delay grew to its 0.2 s cap
    assert fab.chip_states() == [ChipState.HEALTHY] * 16


def test_close_stops_the_monitor(make) -> None:
    fab, _ = make(monitor_cmd(STREAM48, "--then", "sleep"))
    wait(lambda: fab.monitor_status()["pid"] is not None)
    pid = fab.monitor_status()["pid"]
    fab.close()
    import psutil

    wait(lambda: not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, 10)


# --- neuron-ls failures: one line naming the command -------------------------------------------
@pytest.mark.parametrize(("ls", "exc", "needle"), [
    ("/nonexistent/neuron-ls -j", InfeasibleError, "'/nonexistent/neuron-ls' not found"),
    (ls_cmd(LS48, "--exit-code", "4"), InfeasibleError, "exited with code 4: neuron-ls: no Neuron driver"),
    (ls_cmd(STREAM48), InvalidInputError, "printed a bad document: malformed neuron-ls document"),
    (ls_cmd(DATA / "neuron-monitor-trn2-full.json"), InvalidInputError, "must be a JSON list of devices"),
    ("neuron-ls 'unclosed", InvalidInputError, "cannot be split"),
])
def test_bad_neuron_ls_is_one_clear_error(ls: str, exc: type[Exception], needle: str, tmp_path: Path) -> None:
    with pytest.raises(exc) as info:
        NeuronFabric(neuron_ls=ls, neuron_monitor="neuron-monitor", workdir=tmp_path)
    msg = str(info.value)
    assert needle in msg and "\n" not in msg
    assert "neuron-ls" in msg


def test_endless_or_stuck_neuron_ls_is_stopped(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="neuron-ls command 'yes' printed more than"):
        NeuronFabric(neuron_ls="yes", neuron_monitor="neuron-monitor", workdir=tmp_path)
    with pytest.raises(InfeasibleError, match=r"neuron-ls command 'sleep 30' did not finish within 0\.3 s"):
        NeuronFabric(neuron_ls="sleep 30", neuron_monitor="neuron-monitor", workdir=tmp_path, ls_timeout_s=0.3)


def test_bad_monitor_command_and_spares_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="neuron-monitor must be a non-empty command"):
        NeuronFabric(neuron_ls=ls_cmd(), neuron_monitor="  ", workdir=tmp_path)
    with pytest.raises(InfeasibleError, match="neuron-ls reports 1 devices"):
        NeuronFabric(neuron_ls=ls_cmd(DATA / "neuron-ls-trn2-3xlarge.json"), neuron_monitor="neuron-monitor",
                     spares=(3,), workdir=tmp_path)


# --- workers: the Neuron runtime's environment ----------------------------------------------------
def test_visible_cores() -> None:
    assert visible_cores([4, 5, 6, 7]) == "4-7"
    assert visible_cores([3]) == "3"
    assert visible_cores([1, 3]) == "1,3"


@pytest.mark.realproc
def test_a_worker_sees_its_devices_cores(make, tmp_path: Path) -> None:
    fab, events = make(monitor_cmd(STREAM48, "--delay", "0.05", "--then", "sleep"))
    assert fab.device_cores(3) == [12, 13, 14, 15]
    script = tmp_path / "show_env.py"
    script.write_text("import os\nraise RuntimeError('cores=' + os.environ['NEURON_RT_VISIBLE_CORES'])\n")
    fab.launch(WorkerGroupSpec("job-env", (3,), "custom", 1, entrypoint=str(script)))
    wait(lambda: "job-failed" in kinds(events), 120)
    st = fab.run_status("job-env")
    assert st is not None and "cores=12-15" in (st.reason or "")
    assert fab.run_logs("job-env")


NEURON_PROBE = """
import json, os
probe = {"uid": os.getuid(), "names": sorted(os.environ), "cores": os.environ.get("NEURON_RT_VISIBLE_CORES")}
try:
    open(f"/proc/{os.getppid()}/environ", "rb").read()
    probe["server_environ"] = "read"
except OSError as exc:
    probe["server_environ"] = type(exc).__name__
raise RuntimeError("probe=" + json.dumps(probe))
"""


@pytest.mark.realproc
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="a job's own uid needs a root server")
def test_a_neuron_worker_runs_under_its_own_uid_with_nothing_of_the_server(
        make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: the neuron fabric's workers are local workers, isolated the same way."""
    import json
    import os
    import shutil
    import tempfile

    start = 1879400000 + (os.getpid() % 4000) * 4
    monkeypatch.delenv("PODFLEET_WORKER_USER", raising=False)  # tests/conftest.py's opt-in, taken away
    monkeypatch.setenv("PODFLEET_WORKER_UIDS", f"{start}-{start + 3}")
    monkeypatch.setenv("PODFLEET_WORKER_UID_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv("PODFLEET_ADMIN_TOKEN", "pf_" + "N" * 43)
    from tests.security.isolation import skip_unless_workers_can_run

    skip_unless_workers_can_run()
    outside = Path(tempfile.mkdtemp(prefix="podfleet-neuron-iso-"))  # outside pytest's 0700 base
    try:
        outside.chmod(0o755)
        script = outside / "probe.py"
        script.write_text(NEURON_PROBE)
        script.chmod(0o644)
        fab, events = make(monitor_cmd(STREAM48, "--delay", "0.05", "--then", "sleep"), workdir=outside / "w")
        fab.launch(WorkerGroupSpec("job-iso", (3,), "custom", 1, entrypoint=str(script)))
        wait(lambda: "job-failed" in kinds(events), 120)
        st = fab.run_status("job-iso")
        assert st is not None and "probe=" in (st.reason or ""), st
        probe = json.loads((st.reason or "").split("probe=", 1)[1])
        assert start <= probe["uid"] <= start + 3 and probe["cores"] == "12-15"
        assert probe["server_environ"] == "PermissionError"
        assert not [n for n in probe["names"] if n.startswith("PODFLEET_") and n not in
                    ("PODFLEET_CHIP", "PODFLEET_JOB_ID", "PODFLEET_CHECKPOINT_DIR", "PODFLEET_NEURON_DEVICE")], \
            probe["names"]  # the fabric's own variables, none of the server's
    finally:
        shutil.rmtree(outside, ignore_errors=True)
