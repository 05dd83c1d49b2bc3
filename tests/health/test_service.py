"""Health, recovery and firmware inside the control plane (virtual time, in-memory store)."""

from __future__ import annotations

import json

import pytest

from podfleet.compose import Parts, build
from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.errors import ConflictError, NotFoundError, UnknownNameError
from podfleet.health.service import HealthService
from podfleet.store.memory import MemoryStore


def plane_with_health(store: MemoryStore | None = None, seed: int = 0) -> tuple[ControlPlane, HealthService]:
    parts = build(store or MemoryStore(), Timeline(seed=seed))
    return parts.plane, parts.health


def setup_parts(store: MemoryStore | None = None, seed: int = 0, **job) -> tuple[Parts, str]:
    parts = build(store or MemoryStore(), Timeline(seed=seed))
    plane = parts.plane
    plane.create_cluster({"name": "pod", "type": "trn2-ultraserver", "spares": 4}, actor="t")
    plane.tl.run(plane.tl.now + 30)
    body = {"model": "tiny", "chips": 32, "steps": 10**6, "checkpoint_interval": 500,
            "parallelism": {"tp": 16, "pp": 1, "dp": 2}, **job}
    view = plane.jobs.submit("pod", body, actor="t")
    plane.tl.run(plane.tl.now + 60)
    assert plane.jobs.describe(view["id"])["state"] == "RUNNING"
    return parts, view["id"]


def setup(store: MemoryStore | None = None, seed: int = 0, **job) -> tuple[ControlPlane, HealthService, str]:
    parts, job_id = setup_parts(store, seed, **job)
    return parts.plane, parts.health, job_id


def test_chip_failure_is_recovered_by_the_orchestrator_with_visible_sub_steps() -> None:
    parts, job = setup_parts()
    plane = parts.plane
    chip = plane.jobs.describe(job)["allocation"]["chips"][3]
    plane.inject_fault("pod", "chip-failure", chip=chip, actor="t")
    plane.tl.run(plane.tl.now + 0.004)
    mid = plane.jobs.describe(job)
    assert mid["state"] == "RECOVERING" and mid["recovery"]["steps"]
    assert mid["reason"].startswith("recovering (chip-failure):")
    plane.tl.run(plane.tl.now + 5)
    v = plane.jobs.describe(job)
    assert v["state"] == "RUNNING" and chip not in v["allocation"]["chips"]
    assert [s["name"] for s in v["recovery"]["steps"]] == ["detect", "isolate", "select-spare", "move-rank", "restore", "resume"]
    assert v["recovery"]["restored_from"] == "replica"
    assert parts.recovery.recoveries("pod")[-1]["job_id"] == job
    owner = plane.clusters[plane.names["pod"]].owner
    assert sorted(c for c, j in owner.items() if j == job) == sorted(v["allocation"]["chips"])


def test_hardware_snapshot_shows_health_and_alerts_fire() -> None:
    plane, svc, _job = setup()
    plane.inject_fault("pod", "link-down", link="0-1", actor="t")
    plane.tl.run(plane.tl.now + 10)
    hw = json.loads(plane.hardware("pod"))
    assert {c["health"] for c in hw["chips"]} <= {"ok", "warning", "critical"}
    down = [lk for lk in hw["links"] if lk["state"] == "down"]
    assert down and down[0]["health"] == "critical"
    alerts = svc.list_alerts("pod", state="firing")
    assert any(a["rule"] == "link-down" for a in alerts)
    a = svc.acknowledge(alerts[0]["id"], actor="alice")
    assert a["state"] == "acknowledged" and a["acknowledged_by"] == "alice"
    with pytest.raises(NotFoundError):
        svc.acknowledge("al-nope", actor="alice")
    # Placement reads the degraded link from the fabric (control.scheduling.sync).
    rt = plane.clusters[plane.names["pod"]]
    assert any(str(s) != "up" for s in rt.fabric.link_states())


def test_telemetry_ranges_and_rollups_in_the_store() -> None:
    store = MemoryStore()
    plane, svc, _job = setup(store)
    plane.tl.run(plane.tl.now + 3 * 60)
    rt = svc.telemetry("pod", scope="chip", metric="temperature_c", range_="realtime", target=0)
    assert len(rt["t"]) > 50
    hour = svc.telemetry("pod", scope="chip", metric="power_w", range_="hour")
    assert hour["resolution_s"] == 60.0 and len(hour["t"]) >= 2
    assert store.list_rollups(plane.names["pod"], resolution_s=60.0, metric="power_w")
    with pytest.raises(UnknownNameError):
        svc.telemetry("pod", range_="year")


def test_firmware_rollout_through_the_plane_and_bad_input_changes_nothing() -> None:
    parts, job = setup_parts()
    plane, svc = parts.plane, parts.firmware
    with pytest.raises(UnknownNameError):
        svc.start_firmware("pod", "9.9", actor="t")
    r = svc.start_firmware("pod", "2.22.0", chips=[0, 1], actor="t")
    with pytest.raises(ConflictError):
        svc.start_firmware("pod", "2.23.0", actor="t")
    plane.tl.run(plane.tl.now + 400)
    done = svc.firmware("pod", r["id"])
    assert done["state"] == "succeeded" and done["progress"] == 1.0
    assert plane.jobs.describe(job)["state"] == "RUNNING"
    actions = [a.action for a in plane.store.list_audit(limit=1000)]
    assert actions.count("StartFirmwareUpdate") == 3  # two errors audited too
    # Its automatic steps too, by the system: each chip updated, then the end.
    steps = [a for a in plane.store.list_audit(limit=1000) if a.action == "FirmwareStep"]
    assert [a.detail["step"] for a in steps] == ["batch-updated", "batch-updated", "rollout-end"]
    assert {a.actor for a in steps} == {"system:firmware"} and steps[-1].result == "ok"


def test_restart_during_recovery_finishes_after_restart() -> None:
    store = MemoryStore()
    plane, _svc, job = setup(store)
    chip = plane.jobs.describe(job)["allocation"]["chips"][5]
    plane.inject_fault("pod", "chip-failure", chip=chip, actor="t")
    t0 = plane.tl.now
    plane.tl.run(t0 + 0.004)
    detect = store.get_job(job).status["recovery"]["steps"][0]["detail"]["delay_s"]
    plane.tl.run(t0 + detect + 0.004)  # detected, chip isolated, mid recovery: the journal is in the store
    assert store.get_job(job).status["recovery"]["state"] == "running"
    p2, _svc2 = plane_with_health(store, seed=1)
    p2.load()
    p2.tl.run(p2.tl.now + 60)
    v = p2.jobs.describe(job)
    assert v["state"] == "RUNNING" and chip not in v["allocation"]["chips"]
    assert v["recovery"]["state"] == "done"
    # The new plane adopted the flow the restart cut off: it finished it, restored from the checkpoint.
    names = [st["name"] for st in v["recovery"]["steps"]]
    assert "adopted" in names and names[-1] == "restore" and v["recovery"]["restored_from"] == "checkpoint"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_rollup_arrays_reach_the_store_as_floats_and_reload_the_same(kind: str, tmp_path) -> None:
    # The monitor hands its read-only rollup arrays to the store as they are: either store
    # must give plain floats back, and a new monitor must reload the same buckets.
    from sqlalchemy.engine import URL

    from podfleet.store import Store

    store = MemoryStore() if kind == "memory" else Store(URL.create("sqlite", database=str(tmp_path / "p.db")))
    plane, svc, _job = setup(store)  # type: ignore[arg-type]
    plane.tl.run(plane.tl.now + 3 * 60)
    cid = plane.names["pod"]
    kept = {r.t_start: r for r in svc.monitors[cid].history.rows[("chip", "power_w", 60.0)]}
    got = store.list_rollups(cid, resolution_s=60.0, scope="chip", metric="power_w")
    assert got and len(got) == len(kept)
    for rec in got:
        row = kept[rec.t_start - plane.epoch]
        assert type(rec.avg) is list and all(type(v) is float for v in rec.avg + rec.min + rec.max)
        assert (rec.avg, rec.min, rec.max) == (row.avg.tolist(), row.min.tolist(), row.max.tolist())
    before = svc.telemetry("pod", scope="chip", metric="power_w", range_="hour", target=3)
    del svc.monitors[cid]  # the next read builds a monitor that reloads from the store
    assert svc.telemetry("pod", scope="chip", metric="power_w", range_="hour", target=3) == before


def test_one_clusters_failing_scan_is_logged_and_stops_neither_the_engine_nor_the_others(
        caplog: pytest.LogCaptureFixture) -> None:
    """A fabric whose telemetry the monitor cannot read (a Ray cluster's link metrics once
    lacked the names the rollups read: KeyError) used to end the engine thread, so every
    cluster's jobs and the API stopped with it."""
    plane, svc = plane_with_health()
    for name in ("bad", "good"):
        plane.create_cluster({"name": name, "type": "trn2-ultraserver"}, actor="t")
    plane.tl.run(plane.tl.now + 30)
    bad, good = plane.names["bad"], plane.names["good"]
    fab = plane.clusters[bad].fabric
    real = fab.link_metrics
    fab.link_metrics = lambda: {k: v for k, v in real().items() if k != "utilization"}  # type: ignore[method-assign]
    before = svc.monitors[good].last
    t0 = plane.tl.now
    plane.tl.run(t0 + 120)  # raised KeyError out of the timeline before
    assert plane.tl.now == t0 + 120
    assert svc.monitors[good].last is not before  # the other cluster kept being scanned
    failed = [r for r in caplog.records if "health scan of cluster bad failed" in r.getMessage()]
    assert len(failed) == 1  # once per cluster and kind of error, not at every tick
