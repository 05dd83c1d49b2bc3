"""Diagnosis accuracy through the control plane (``DiagnoseCluster``'s path): on the twin,
on a local cluster of real worker processes, and on a neuron cluster with replayed
neuron-monitor documents. Accuracy and false findings are reported per fabric (and, on
the twin, per fault kind).

The twin's fault log carries the kind it injected (``detail["fault"]``); the diagnoser
never reads it (``advisor/diagnose.py`` drops every label before it looks). To show the
figures do not depend on it, each twin trial is diagnosed twice: as the twin reports,
and with every fault-log entry's detail replaced by ``{"fault": "hardware-error"}``
(``accuracy_label_neutral``, which must equal ``accuracy``).

Each trial is a fresh control plane in virtual time (``compose.build``, a 64-chip
trn2-ultraserver with 2 spares) with decoys that must not become findings: a running
32-chip job (its chips run hot and its links busy, within spec), a second job stopped
a minute before the diagnosis (a job-induced utilization dip), and a noisy but healthy
link inside the hot job (three bursts of 50-500 link errors counted, the link never
leaves ``up``). Then one or two faults
at once (half the trials each), of random kinds, on random distinct chips or links,
injected through ``plane.inject_fault``; after ``SETTLE_S`` of timeline the diagnosis
runs with the health service's alerts.

A fault is diagnosed right when a finding names its kind and its location (the chip;
for a link, the link). ``accuracy`` = faults diagnosed right / faults injected;
``false_findings_ratio`` = findings that match no injected fault / all findings.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from podfleet.advisor.diagnose import diagnose
from podfleet.compose import build
from podfleet.control.fabricaccess import FabricAccess
from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import FabricEvent, HardwareErrors
from podfleet.hardware.faults import FAULT_KINDS, LINK_FAULTS
from podfleet.health.scan import HealthConfig
from podfleet.store.memory import MemoryStore

NAME = "diagnosis"
DESCRIPTION = ("diagnosis from evidence, the twin's fault label removed: the twin (every kind, one or two at once, "
               "decoys), a local cluster (killed, hung, slowed workers) and replayed neuron errors: accuracy and "
               "false_findings_ratio per fabric (goal >= 0.98 / <= 0.02)")
SETTLE_S = 60.0


def trial(seed: int, n_faults: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    tl = Timeline(seed)
    parts = build(MemoryStore(), tl)
    plane = parts.plane
    plane.load()
    plane.create_cluster({"name": "pod", "type": "trn2-ultraserver", "spares": 2})
    tl.run(tl.now + 60)
    hot_job = plane.jobs.submit("pod", {"name": "hot", "model": "llama3-8b", "chips": 32, "steps": 10**6,
                              "checkpoint_interval": 20})
    dip = plane.jobs.submit("pod", {"name": "dip", "model": "llama3-8b", "chips": 16, "steps": 10**6,
                                    "checkpoint_interval": 20})
    tl.run(tl.now + 240)
    plane.jobs.stop(dip["id"])
    topo = plane.resolve("pod").topology
    used: set[str] = set()
    # A noisy but healthy link inside the hot job: link errors counted (retrained lanes,
    # CRC retries) in bursts, the link never leaves ``up``: a decoy, not a fault.
    hot = set(plane.jobs.describe(hot_job["id"])["allocation"]["chips"])
    inside = [lk for lk in topo.links if lk.src in hot and lk.dst in hot] or list(topo.links)
    noisy = inside[int(rng.integers(len(inside)))]
    used.add(f"link:{min(noisy.src, noisy.dst)}-{max(noisy.src, noisy.dst)}")
    board = plane.resolve("pod").fabric.board
    for _ in range(3):
        board.bump_link_errors(noisy.index, int(rng.integers(50, 500)))
        tl.run(tl.now + 20)
    truth: list[tuple[str, str]] = []
    while len(truth) < n_faults:
        kind = str(rng.choice(FAULT_KINDS))
        if kind in LINK_FAULTS:
            lk = topo.links[int(rng.integers(len(topo.links)))]
            target = f"link:{min(lk.src, lk.dst)}-{max(lk.src, lk.dst)}"
        else:
            target = f"chip:{int(rng.integers(topo.n_chips))}"
        if target in used:
            continue
        used.add(target)
        truth.append((kind, target))
        if kind in LINK_FAULTS:
            plane.inject_fault("pod", kind, link=target.removeprefix("link:"))
        else:
            plane.inject_fault("pod", kind, chip=int(target.removeprefix("chip:")))
    tl.run(tl.now + SETTLE_S)
    out = _score(truth, diagnose(plane, "pod", parts.health.list_alerts("pod"))["findings"])
    fab = plane.resolve("pod").fabric
    assert isinstance(fab, HardwareErrors)
    real = fab.hardware_errors

    def neutral() -> list[FabricEvent]:
        return [replace(e, detail={"fault": "hardware-error"}) for e in real()]

    fab.hardware_errors = neutral  # type: ignore[method-assign]
    blind = _score(truth, diagnose(plane, "pod", parts.health.list_alerts("pod"))["findings"])
    out["right_label_neutral"] = blind["right"]
    return out


def _score(truth: list[tuple[str, str]], found: list[dict[str, Any]]) -> dict[str, Any]:
    got = {(f["kind"], f"link:{f['links'][0]}" if f["links"] else f"chip:{f['chips'][0]}") for f in found}
    right = [t for t in truth if t in got]
    return {"faults": len(truth), "right": len(right), "findings": len(found), "false": len(got - set(truth)),
            "missed": [t for t in truth if t not in got], "extra": sorted(got - set(truth)),
            "by_kind": {k: (sum(1 for t in truth if t[0] == k), sum(1 for t in right if t[0] == k))
                        for k in {t[0] for t in truth}}}


def ratios(trials: list[dict[str, Any]]) -> dict[str, Any]:
    faults = sum(t["faults"] for t in trials)
    findings = sum(t["findings"] for t in trials)
    return {"faults": faults, "findings": findings,
            "accuracy": round(sum(t["right"] for t in trials) / faults, 4) if faults else None,
            "false_findings_ratio": round(sum(t["false"] for t in trials) / findings, 4) if findings else 0.0,
            "missed": [m for t in trials for m in t["missed"]][:10],
            "extra": [e for t in trials for e in t["extra"]][:10]}


# --- real fabrics --------------------------------------------------------------------------

TOKEN = "pf_bench-diagnosis-0123456789abcdef"
NEURON = Path(__file__).parents[1] / "tests" / "fabric" / "neuron"  # the replayed tools and documents


def _wait(cond: Callable[[], Any], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.2)


@contextlib.contextmanager
def _served(wd: str, **kw: Any) -> Iterator[Any]:
    from podfleet.api.server import bootstrap_admin
    from podfleet.api.testing import serve_in_thread
    from podfleet.sdk.client import PodfleetClient

    parts = build(MemoryStore(), Timeline(seed=1, speed=1.0), telemetry_interval_s=0.5,
                  health_config=HealthConfig(interval_s=0.5), workdir=wd, **kw)
    bootstrap_admin(parts.plane, TOKEN)
    with serve_in_thread(parts.plane, parts=parts) as url:
        yield PodfleetClient(url, TOKEN)


def _found(c: Any, cluster: str) -> list[dict[str, Any]]:
    return list(c.diagnose_cluster(cluster)["findings"])


def local_trials(quick: bool) -> list[dict[str, Any]]:
    """One fresh local cluster per fault (kill -9 from outside, SIGSTOP, slow-worker 3x);
    the diagnosis must name the fault's kind at the rank's slot, and nothing else."""
    opts = {"seed": 3, "global_batch": 24, "seq_len": 16, "step_delay_s": 0.05, "encrypt_checkpoints": False}
    cases = ["worker-killed", "worker-hung", "worker-slow"] * (1 if quick else 3)
    out = []
    for i, kind in enumerate(cases):
        with tempfile.TemporaryDirectory(prefix="bench-diagnosis-") as wd, _served(wd, balance_interval_s=0.5) as c:
            c.create_cluster("loc", fabric="local", chips=4, spares=1)
            _wait(lambda: c.describe_cluster("loc")["state"] == "active", 60, "the cluster")
            jid = str(c.submit_training_job("loc", model="debug", chips=3, steps=10**6, checkpoint_interval=10,
                                            options=opts)["id"])
            _wait(lambda j=jid: int(c.describe_training_job(j)["progress"].get("step", 0)) >= 5, 300, "warm-up")
            rank = i % 3
            chip = int(c.describe_training_job(jid)["allocation"]["chips"][rank])
            pid = int(c.describe_cluster_hardware("loc")["chips"][chip]["worker"]["pid"])
            if kind == "worker-killed":
                os.kill(pid, signal.SIGKILL)
            elif kind == "worker-hung":
                os.kill(pid, signal.SIGSTOP)
            else:
                c.slow_worker("loc", rank, 3.0, job=jid)
            truth = [(kind, f"chip:{chip}")]
            deadline = time.monotonic() + 60
            scored = _score(truth, _found(c, "loc"))
            while scored["right"] < 1 and time.monotonic() < deadline:
                time.sleep(1.0)
                scored = _score(truth, _found(c, "loc"))
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            c.stop_training_job(jid)
            out.append(scored)
    return out


def _neuron_documents(path: Path, faults: dict[int, str]) -> None:
    """Three reports of a trn2.48xlarge (the test data's first), the third with ``faults``
    (device -> kind) in its hardware counters."""
    base = json.loads((NEURON / "data" / "neuron-monitor-trn2-48xlarge.jsonl").read_text().splitlines()[0])
    lines = [base, base]
    last = json.loads(json.dumps(base))
    for dev in last["system_data"]["neuron_hw_counters"]["neuron_devices"]:
        kind = faults.get(int(dev["neuron_device_index"]))
        if kind == "hbm-uncorrectable":
            dev["mem_ecc_uncorrected"] = 1
        elif kind == "sram-uncorrectable":
            dev["sram_ecc_uncorrected"] = 1
        elif kind == "hbm-corrected-burst":
            dev["mem_ecc_corrected"] = 150
    lines.append(last)
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))


def neuron_trials(quick: bool) -> list[dict[str, Any]]:
    """Replayed neuron-monitor documents with one or two device errors per trial (random
    kinds and devices) on a neuron cluster; truth: each device's kind."""
    kinds = ("hbm-uncorrectable", "sram-uncorrectable", "hbm-corrected-burst")
    rng = np.random.default_rng(7)
    ls = shlex.join([sys.executable, str(NEURON / "replay_ls.py")])
    mon = shlex.join([sys.executable, str(NEURON / "replay.py")])
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-diagnosis-neuron-") as wd, \
            _served(wd, fabric_access=FabricAccess(neuron_commands=(ls, mon))) as c:
        for i in range(3 if quick else 8):
            devs = rng.choice(16, size=1 + i % 2, replace=False)
            faults = {int(d): str(rng.choice(kinds)) for d in devs}
            doc = Path(wd) / f"monitor-{i}.jsonl"
            _neuron_documents(doc, faults)
            name = f"trn{i}"
            c.create_cluster(name, fabric="neuron",
                             neuron_ls=f"{ls} {shlex.quote(str(NEURON / 'data' / 'neuron-ls-trn2-48xlarge.json'))}",
                             neuron_monitor=f"{mon} {shlex.quote(str(doc))} --delay 0.3 --then repeat")
            _wait(lambda n=name: c.describe_cluster(n)["state"] == "active", 60, "the neuron cluster")
            truth = [(k, f"chip:{d}") for d, k in faults.items()]
            deadline = time.monotonic() + 20
            scored = _score(truth, _found(c, name))
            while scored["right"] < len(truth) and time.monotonic() < deadline:
                time.sleep(0.5)
                scored = _score(truth, _found(c, name))
            out.append(scored)
            c.delete_cluster(name)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    n = 12 if quick else 200
    trials = [trial(seed, 1 + seed % 2) for seed in range(n)]
    twin = ratios(trials)
    by_kind: dict[str, list[int]] = {}
    for t in trials:
        for k, (nf, nr) in t["by_kind"].items():
            by_kind.setdefault(k, [0, 0])
            by_kind[k][0] += nf
            by_kind[k][1] += nr
    twin["accuracy_label_neutral"] = round(sum(t["right_label_neutral"] for t in trials) / twin["faults"], 4)
    twin["accuracy_by_kind"] = {k: round(r / f, 4) for k, (f, r) in sorted(by_kind.items())}
    local = ratios(local_trials(quick))
    neuron = ratios(neuron_trials(quick))
    return {
        "trials": n,
        "faults": twin["faults"],
        "accuracy": twin["accuracy"],
        "false_findings_ratio": twin["false_findings_ratio"],
        "findings": twin["findings"],
        "missed": twin["missed"],
        "extra": twin["extra"],
        "twin": twin,
        "local": local,
        "neuron": neuron,
    }
