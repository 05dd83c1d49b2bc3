"""A rank a process fabric recovered itself (local: a killed worker moved to the spare):
the slot it left is no chip fault, so it refills the spare count, and the recovery
record names the chip and carries RFC 3339 times (issue 26 item 8)."""

from __future__ import annotations

import datetime as dt

import pytest

from podfleet.control import ControlPlane
from podfleet.recovery.service import RecoveryService
from tests.control.conftest import advance
from tests.control.test_drivers import FakeProcessFabric, fake_plane


def _moved_to_the_spare() -> tuple[ControlPlane, FakeProcessFabric, str, int]:
    plane, made = fake_plane()
    plane.create_cluster({"name": "p", "fabric": "local", "chips": 3, "spares": 1}, actor="t")
    advance(plane, 5)
    fab = made[0]
    [spare] = plane.describe_cluster("p")["spares"]
    job = plane.jobs.submit("p", {"model": "debug", "chips": 2, "steps": 100}, actor="t")
    advance(plane, 1)
    chips = list(fab.launches[-1].chips)
    assert spare not in chips
    lost = chips[1]
    # What the local fabric sends when it moves a killed rank to the spare itself.
    fab.emit("worker-exited", job["id"], chip=lost, rank=1, cause="infra", exit_code=-9)
    fab.emit("job-recovering", job["id"], rank=1, cause="infra", message="rank 1 killed")
    fab.emit("job-resumed", job["id"], chips=[chips[0], spare], source="replica", restored_step=3, attempt=2)
    fab.emit("recovered", job["id"], chip=lost, rank=1, cause="infra", source="replica", restored_step=3,
             steps_lost=0, resume_s=0.8, moves={"1": [lost, spare]}, path="spare", last_step=3, attempt=1)
    advance(plane, 5)  # telemetry ticks: spares are accounted
    return plane, fab, job["id"], lost


def test_the_slot_a_recovered_rank_left_becomes_the_spare() -> None:
    plane, _fab, jid, lost = _moved_to_the_spare()
    view = plane.describe_cluster("p")
    assert plane.jobs.describe(jid)["state"] == "RUNNING"
    assert view["spares"] == [lost], view
    assert view["spare_shortfall"] == ""


def test_the_fabrics_recovery_record_names_the_chip_and_has_rfc3339_times() -> None:
    plane, _fab, jid, lost = _moved_to_the_spare()
    [rec] = plane.jobs.describe(jid)["runtime"]["recoveries"]
    assert rec["chip"] == lost and rec["target"] == f"chip:{lost}" and rec["rank"] == 1
    end = dt.datetime.fromisoformat(rec["t_end"])
    start = dt.datetime.fromisoformat(rec["t_start"])
    assert end.tzinfo is not None and rec["t_end"].endswith("Z")
    assert abs(end.timestamp() - plane.now()) < 10  # wall-clock time, not the fabric's own counter
    # It ended resume_s after the fabric noticed the loss (RFC 3339 keeps milliseconds).
    assert (end - start).total_seconds() == pytest.approx(0.8, abs=0.002)
    svc = RecoveryService(plane.table, plane.tl, plane.render, resolve=plane.resolve)
    [shown] = svc.list_recoveries("p")  # ListRecoveries
    assert shown["t_end"] == rec["t_end"] and shown["t_start"] == rec["t_start"]
    assert shown["target"] == f"chip:{lost}" and shown["duration_s"] == pytest.approx(0.8, abs=0.002)
    [computed] = svc.recoveries("p")  # timeline seconds, to compute with
    assert computed["t_end"] == shown["t_end_s"] and abs(computed["t_end"] - plane.tl.now) < 10


def test_a_rank_move_the_fabric_gave_up_is_relaunched_and_recorded_as_a_relaunch() -> None:
    """The Ray fabric began moving a lost rank (``job-recovering``) and then could not (no
    chip, no re-formed gang): it ends the gang, and the plane relaunches it as any lost
    gang, the job RECOVERING throughout, the record saying ``relaunch``. Before, the driver
    dropped the gang's end (the job was no longer RUNNING) and the job stayed RECOVERING."""
    plane, made = fake_plane()
    plane.create_cluster({"name": "p", "fabric": "local", "chips": 3, "spares": 1}, actor="t")
    advance(plane, 5)
    fab = made[0]
    job = plane.jobs.submit("p", {"model": "debug", "chips": 2, "steps": 100}, actor="t")
    advance(plane, 1)
    first = fab.launches[-1]
    lost = first.chips[1]
    fab.emit("worker-exited", job["id"], chip=lost, rank=1, cause="infra", exit_code=None)
    fab.emit("job-recovering", job["id"], rank=1, cause="infra", message="rank 1 killed", mechanism="rank-move")
    advance(plane, 1)
    assert plane.jobs.describe(job["id"])["state"] == "RECOVERING" and len(fab.launches) == 1
    fab.emit("worker-exited", job["id"], chip=lost, rank=1, cause="infra", exit_code=None, gang_ended=True,
             reason="rank 1 (chip 1) was lost")
    advance(plane, 1)
    assert len(fab.launches) == 2 and fab.launches[-1].options["resume"] is True
    assert plane.jobs.describe(job["id"])["state"] == "RECOVERING"
    fab.emit("job-started", job["id"], chips=list(fab.launches[-1].chips))
    fab.emit("progress", job["id"], step=1, loss=2.0, tokens_per_s=1.0, step_time_s=0.1)
    advance(plane, 1)
    d = plane.jobs.describe(job["id"])
    assert d["state"] == "RUNNING"
    [rec] = d["runtime"]["recoveries"]
    assert rec["mechanism"] == "relaunch" and rec["state"] == "done" and rec["rank"] == 1
