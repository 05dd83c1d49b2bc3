"""What an operator reads: podfleet status, spare chips by id, reason codes beside the
scheduler's sentences, the code flow of --entrypoint, rank moves that name their chips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from podfleet.cli.job import reason_code
from podfleet.cli.main import app
from podfleet.control.events import event_line
from podfleet.fabric.base import FabricEvent
from tests.api.conftest import Live

runner = CliRunner()


def run(live: Live, *args: str) -> tuple[int, str, str]:
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"]}
    r = runner.invoke(app, list(args), env=env)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def busy(live: Live) -> dict[str, str]:
    """A 16-chip node with one spare: a 12-chip job and a 2-chip one of team small run, an
    8-chip one queues for chips, a second 2-chip one of team small waits on its quota."""
    code, _, err = run(live, "cluster", "create", "ops-node", "--type", "trn2-node", "--spares", "1",
                       "--quota", "small=3", "-o", "json")
    assert code == 0, err
    ids = {}
    for name, chips, extra in (("big", "12", []), ("small", "2", ["--team", "small"]), ("queued", "8", []),
                               ("quota", "2", ["--team", "small"])):
        code, out, err = run(live, "job", "submit", "ops-node", "--model", "debug", "--chips", chips,
                             "--steps", "100000000", "--name", name, *extra, "-o", "json")
        assert code == 0, err
        ids[name] = json.loads(out)["id"]
    return ids


def test_status_is_one_line_per_cluster(live: Live, busy: dict[str, str]) -> None:
    code, out, err = run(live, "status", "-o", "json")
    assert code == 0, err
    line = next(s for s in json.loads(out) if s["cluster"] == "ops-node")
    assert line["chips"] == 16 and line["chip_states"] == {"healthy": 16} and line["spares"] == 1
    assert line["jobs_running"] == 2 and line["jobs_queued"] == 2 and line["alerts_firing"] == 0
    code, out, _ = run(live, "status")
    rows = [ln for ln in out.splitlines() if "ops-node" in ln]
    assert code == 0 and len(rows) == 1 and "healthy 16" in rows[0]


def test_tables_name_spare_chips_by_id(live: Live, busy: dict[str, str]) -> None:
    code, out, _ = run(live, "cluster", "describe", "ops-node", "-o", "json")
    spares = json.loads(out)["spares"]
    assert code == 0 and len(spares) == 1  # JSON stays the API's: a list of chip ids
    code, out, _ = run(live, "cluster", "describe", "ops-node")
    fields = dict(ln.split(None, 1) for ln in out.splitlines()[1:] if len(ln.split(None, 1)) == 2)
    assert fields["spares"] == "1" and fields["spare_chips"] == str(spares[0])


def test_job_list_gives_reason_codes(live: Live, busy: dict[str, str]) -> None:
    code, out, _ = run(live, "job", "list", "--cluster", "ops-node")
    assert code == 0
    by_id = {j: next(ln for ln in out.splitlines() if j in ln) for j in busy.values()}
    assert " Resources " in by_id[busy["queued"]] and "largest free block" in by_id[busy["queued"]]
    assert " QuotaExceeded " in by_id[busy["quota"]] and "over quota" in by_id[busy["quota"]]


@pytest.mark.parametrize(("state", "reason", "code"), [
    ("PENDING", "Unschedulable: no free 4x4x2 block; largest free block 1x4x3 (12 chips); 14 usable chips free; "
                "no lower-priority job to preempt (running >= 900 s)", "Resources"),
    ("PENDING", "Unschedulable: team 'small' over quota: 0 of 2 chips in use, job asks 4", "QuotaExceeded"),
    ("PENDING", "Pending: preempted, resumes from checkpoint step 200", "Preempted"),
    ("PENDING", "Wait: waiting for job-a to checkpoint", "Preempting"),
    ("PENDING", "Unschedulable: chips are nominated for another job", "Priority"),
    ("PENDING", "Pending: waiting for the next scheduling cycle", "None"),
    ("PENDING", "Unschedulable: no free 4x4x1 block; largest free block 4x4x4 (64 chips); 64 usable chips free; "
                "64 chips reserved by 'big-run' starting in 1h (the job has no time limit)", "Reservation"),
    ("PENDING", "Unschedulable: no free 4x4x1 block; ...; 64 chips held by reservation 'r' for queue 'a' for "
                "2h more", "Reservation"),
    ("RECOVERING", "waiting for 1 healthy chip(s)", "Recovering"),
    ("RUNNING", "checkpoint at step 200 saved", ""),
])
def test_reason_code(state: str, reason: str, code: str) -> None:
    assert reason_code(state, reason) == code


def test_entrypoint_takes_a_file_or_a_code_reference(live: Live, busy: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    # A local file is pushed and sent as code:<sha256>/train.py; the twin then says what it
    # runs (never "is not a file").
    code, _, err = run(live, "job", "submit", "ops-node", "--entrypoint", str(script), "--chips", "2")
    assert code == 2 and "runs on a local, ray or neuron cluster" in err, err
    code, out, err = run(live, "code", "push", str(tmp_path), "-o", "json")
    assert code == 0, err
    ref = json.loads(out)["ref"] + "train.py"
    code, _, err = run(live, "job", "submit", "ops-node", "--entrypoint", ref, "--chips", "2")
    assert code == 2 and "runs on a local, ray or neuron cluster" in err, err


def test_rank_moved_names_job_rank_and_chips() -> None:
    ev = FabricEvent("rank-moved", 1.0, job_id="job-1", detail={"rank": 3, "from_chip": 5, "to_chip": 63})
    assert event_line(ev) == "fabric: rank-moved: job job-1 rank 3 chip 5 -> chip 63"
    assert event_line(FabricEvent("chip-failed", 1.0, chip=5)) == "fabric: chip-failed"  # reports match it


def test_chip_reason_is_one_line_of_text(live: Live, busy: dict[str, str]) -> None:
    code, _, err = run(live, "chip", "cordon", "ops-node", "3", "--reason", "fan\nnoise")
    assert code == 2 and "--reason: 'fan\\nnoise' is not valid: one line of text" in err, err
    code, out, err = run(live, "chip", "cordon", "ops-node", "3", "--reason", "fan noise", "-o", "json")
    assert code == 0 and json.loads(out)["mode"] == "cordoned", err
    code, out, _ = run(live, "cluster", "events", "ops-node")
    assert "chip 3: cordon (schedulable -> cordoned): fan noise" in out
    assert run(live, "chip", "uncordon", "ops-node", "3")[0] == 0
