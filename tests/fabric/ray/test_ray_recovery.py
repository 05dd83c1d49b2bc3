"""Recovery of Ray jobs on a real two-node Ray cluster: a head (2 CPUs) and a second raylet
(1 CPU) started with ``ray start`` on this machine, once for the module, and driven by the
control plane as users run it (``cluster create --fabric ray --ray-address``).

* a 2-chip cluster with no spare: a killed rank's actor is replaced on its own chip once
  that chip passes the fabric's health check (a rank move: the other rank lives on), and
  the job finishes;
* a 3-chip cluster whose spare is the second raylet's chip: the killed rank's replacement
  runs on that raylet (its node id in the job log and in hardware describe).

(test_ray_rank_move.py checks the survivors' pids and the loss across a move.)

Both record the recovery (path, resume time, steps lost) and show it in ``recoveries``;
``placement: spread`` puts a gang's ranks on both nodes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.realproc]
pytest.importorskip("ray")

from tests.fabric.ray.clusters import built_on, two_raylets  # noqa: E402


def _until(cond: Callable[[], object], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with two_raylets(tmp_path_factory.mktemp("raycluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def parts(ray_cluster: dict[str, Any]) -> Iterator[Any]:
    with built_on(ray_cluster) as built:
        yield built


JOB = {"model": "debug", "chips": 2, "checkpoint_interval": 4,
       "options": {"seed": 5, "global_batch": 4, "seq_len": 32, "step_delay_s": 0.1}}


def _run_and_kill(plane: Any, cluster: str, steps: int) -> tuple[str, dict[str, Any]]:
    job = plane.call_sync(plane.jobs.submit, cluster, {**JOB, "steps": steps}, actor="t")
    jid = job["id"]

    def checkpointed() -> bool:
        view = plane.jobs.describe(jid)
        # A gang that could not start fails now, with Ray's reason, not after the timeout.
        assert view["state"] not in ("FAILED", "STOPPED"), f"{view['state']}: {view.get('reason')}"
        return plane.store.latest_checkpoint(jid) is not None and view["state"] == "RUNNING"

    _until(checkpointed, 180, "a first checkpoint")
    out = plane.call_sync(plane.inject_fault, cluster, "kill-worker", rank=1, actor="t")
    assert out["job_id"] == jid and out["rank"] == 1
    assert isinstance(out["pid"], int) and out["pid"] > 0  # the killed actor's process
    return jid, out


def _log(plane: Any, jid: str) -> str:
    return "\n".join(ln["message"] for ln in plane.jobs.job_logs(jid).since(0))


def test_no_spare_the_lost_rank_goes_back_onto_its_own_chip(parts: Any, ray_cluster: dict[str, Any]) -> None:
    plane = parts.plane
    view = plane.call_sync(plane.create_cluster, {"name": "nospare", "fabric": "ray", "chips": 2, "spares": 0,
                                                  "ray_address": ray_cluster["address"]}, actor="t")
    try:
        _until(lambda: plane.describe_cluster("nospare")["state"] == "active", 60, "the cluster")
        assert view["spares"] == []
        jid, _ = _run_and_kill(plane, "nospare", steps=24)
        _until(lambda: plane.jobs.describe(jid)["state"] in ("SUCCEEDED", "FAILED"), 240, "the job to end")
        done = plane.jobs.describe(jid)
        assert done["state"] == "SUCCEEDED", done["reason"]
        assert "RECOVERING" in done["timestamps"] and done["allocation"]["chips"] == [0, 1]
        [rec] = done["runtime"]["recoveries"]
        assert rec["path"] == "own-chip" and rec["state"] == "done" and rec["rank"] == 1
        assert rec["mechanism"] == "rank-move" and rec["source"] == "replica" and rec["restored_step"] >= 4
        assert rec["resume_s"] > 0 and rec["steps_lost"] >= 0
        listed = plane.call_sync(parts.recovery.recoveries, "nospare")  # `alerts recoveries`
        assert [(r["id"], r["path"]) for r in listed] == [(rec["id"], "own-chip")]
        text = _log(plane, jid)
        assert "(rank move own-chip" in text and "recovered: resumed from replica" in text
        assert text.count("rank 1 on chip 1: node") == 2  # at the start and after the move
    finally:
        plane.call_sync(plane.delete_cluster, "nospare", actor="t")


def test_a_move_to_the_spare_lands_on_the_spares_raylet(parts: Any, ray_cluster: dict[str, Any]) -> None:
    plane = parts.plane
    plane.call_sync(plane.create_cluster, {"name": "spare", "fabric": "ray", "chips": 3, "spares": 1,
                                           "spare_chips": [2], "ray_address": ray_cluster["address"]}, actor="t")
    try:
        _until(lambda: plane.describe_cluster("spare")["state"] == "active", 60, "the cluster")
        jid, _ = _run_and_kill(plane, "spare", steps=200)
        _until(lambda: (plane.jobs.describe(jid).get("runtime") or {}).get("recoveries"), 240, "the recovery")
        job = plane.jobs.describe(jid)
        assert job["state"] == "RUNNING" and job["allocation"]["chips"] == [0, 2]
        [rec] = job["runtime"]["recoveries"]
        assert rec["path"] == "spare" and rec["moves"] == {"1": [1, 2]} and rec["resume_s"] > 0
        assert rec["mechanism"] == "rank-move"
        raylet = ray_cluster["raylet"]
        assert f"rank 1 on chip 2: node {raylet[:12]}" in _log(plane, jid)
        chip2 = json.loads(plane.call_sync(plane.hardware, "spare", 2))
        assert chip2["worker"]["node_id"] == raylet and chip2["worker"]["rank"] == 1
        assert chip2["worker"]["pid"] > 0 and chip2["host"]
        assert chip2["metrics"]["mem_capacity_bytes"] > 0
        # /metrics: the Ray cluster's chips under the twin's names, with host and job labels.
        from prometheus_client import generate_latest
        from prometheus_client.parser import text_string_to_metric_families

        from podfleet.api.metrics import ApiMetrics

        fams = {f.name: f.samples for f in text_string_to_metric_families(
            generate_latest(ApiMetrics(plane).registry).decode())}
        mine = {s.labels["chip"]: s for s in fams["podfleet_chip_memory_used_bytes"] if s.labels["cluster"] == "spare"}
        assert mine["2"].labels["job_id"] == jid and mine["2"].labels["host"] == chip2["host"] and mine["2"].value > 0
        assert {s.labels["chip_type"] for s in mine.values()} == {"cpu"}  # CPU slots, not Trainium chips
        assert [s.value for s in fams["podfleet_job_recoveries"] if s.labels["job_id"] == jid] == [1.0]
        plane.call_sync(plane.jobs.stop, jid, actor="t")
    finally:
        plane.call_sync(plane.delete_cluster, "spare", actor="t")



def test_placement_spread_puts_the_ranks_on_different_nodes(parts: Any, ray_cluster: dict[str, Any]) -> None:
    from podfleet.errors import UnknownNameError

    plane = parts.plane
    plane.call_sync(plane.create_cluster, {"name": "spread", "fabric": "ray", "chips": 2,
                                           "ray_address": ray_cluster["address"]}, actor="t")
    try:
        _until(lambda: plane.describe_cluster("spread")["state"] == "active", 60, "the cluster")
        with pytest.raises(UnknownNameError, match="strict_spread"):
            plane.call_sync(plane.jobs.submit, "spread", {**JOB, "steps": 10, "options": {"placement": "diagonal"}},
                            actor="t")
        job = plane.call_sync(plane.jobs.submit, "spread", {
            **JOB, "steps": 10_000, "checkpoint_interval": 0,
            "options": {**JOB["options"], "placement": "spread"}}, actor="t")
        jid = job["id"]
        _until(lambda: "rank 1 on chip 1: node" in _log(plane, jid), 180, "the gang to start")
        nodes = {ln.split(": node ")[1].split()[0] for ln in _log(plane, jid).splitlines() if ": node " in ln}
        assert len(nodes) == 2  # one rank on the head, one on the second raylet
        plane.call_sync(plane.jobs.stop, jid, actor="t")
    finally:
        plane.call_sync(plane.delete_cluster, "spread", actor="t")
