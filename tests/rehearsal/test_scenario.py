"""Scenarios: strict validation, determinism of the event log, the ``podfleet sim`` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from podfleet.cli.main import app
from podfleet.errors import InvalidInputError, UnknownNameError
from podfleet.rehearsal.scenario import load_scenario, parse_scenario, run_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BASE = {"duration": "2h", "fault_rates": "default", "fault_rate_scale": 3000.0,
        "jobs": [{"id": "j", "model": "llama3-8b", "chips": 32, "steps": 50, "checkpoint_interval": 10}]}


def _log(seed: int, tmp_path: Path) -> bytes:
    out = tmp_path / f"events-{seed}-{len(list(tmp_path.iterdir()))}.jsonl"
    run_scenario(parse_scenario({**BASE, "seed": seed}), events_path=out)
    return out.read_bytes()


def test_same_seed_gives_byte_identical_event_log(tmp_path: Path) -> None:
    a, b = _log(11, tmp_path), _log(11, tmp_path)
    assert a == b
    assert len(a.splitlines()) > 20
    assert a != _log(12, tmp_path)


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"duration": "1h", "colour": "red"}, "colour", ["unknown field", "pod_type", "duration"]),
        ({"duration": "1h", "faults": [{"at": 1, "kind": "chip-failure", "chp": 1}]}, "faults.0.chp", ["chip", "kind"]),
        ({"duration": "1h", "faults": [{"at": 1, "kind": "gremlin"}]}, "faults.0.kind", ["chip-failure", "link-flap"]),
        ({"duration": "forever"}, "duration", ["24h"]),
        ({}, "duration", ["missing"]),
        ({"duration": "1h", "pods": 0}, "pods", ["0 is too small", "1-4096"]),
        ({"duration": "1h", "fault_rates": {"gremlin": 1.0}}, "fault_rates", ["chip-failure"]),
        ({"duration": "1h", "fault_rates": "lots"}, "fault_rates", ["default", "none"]),
        ({"duration": "1h", "telemetry_interval_s": 0}, "telemetry_interval_s", ["0 is too small", "> 0"]),
        ({"duration": "1h", "jobs": [{"id": "a", "model": "lama3-8b", "chips": 8, "steps": 9}]}, "jobs.0.model",
         ["unknown model 'lama3-8b'", "did you mean 'llama3-8b'?"]),
    ],
)
def test_validation_names_field_and_choices(data: dict, field: str, words: list[str]) -> None:
    with pytest.raises(InvalidInputError) as ei:
        parse_scenario(data)
    assert ei.value.field is not None and ei.value.field.startswith(field)
    for w in words:
        assert w in ei.value.message
    assert "\n" not in ei.value.message


def test_unknown_pod_type_lists_valid() -> None:
    with pytest.raises(UnknownNameError) as ei:
        parse_scenario({"duration": "1h", "pod_type": "trn9-mega"})
    assert ei.value.field == "pod_type" and "trn2-ultraserver" in ei.value.message


def test_job_and_fault_targets_are_checked() -> None:
    from podfleet.rehearsal.scenario import build

    with pytest.raises(InvalidInputError, match=r"faults\.0\.chip"):
        build(parse_scenario({"duration": "1h", "faults": [{"at": 1, "kind": "chip-failure", "chip": 64}]}))
    with pytest.raises(InvalidInputError, match=r"jobs\.0\.chips"):
        build(parse_scenario({"duration": "1h", "jobs": [{"id": "j", "chips": 65, "steps": 1}]}))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    sc = load_scenario(path)
    assert sc.duration > 0


def test_cli_sim_json_and_events(tmp_path: Path) -> None:
    """The scripted example, shortened to 3 h 40 min: the whole control plane recovers
    the job from a scripted chip failure under its rank 2."""
    events = tmp_path / "ev.jsonl"
    data = yaml.safe_load((EXAMPLES / "scripted-faults.yaml").read_text())
    data["duration"] = "3h40m"
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["sim", str(p), "--output", "json", "--events", str(events)])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["control_plane"] is True
    assert rep["faults_by_kind"]["link-flap"] == 1 and rep["faults_by_kind"]["chip-failure"] == 1
    assert rep["events_processed"] > 0 and rep["speedup_x"] > 0
    assert [c["result"] for c in rep["commands"]] == ["ok"] * len(rep["commands"])
    seq = [s for s in rep["recoveries"]["sequence"] if s["kind"] == "chip-failure"]
    assert seq and seq[0]["job"] == "job-8b" and seq[0]["path"] == "replica"
    assert seq[0]["steps"][-1] == "resume" and "move-rank" in seq[0]["steps"]
    assert rep["recoveries"]["by_path"]["replica"] >= 1 and rep["recoveries"]["p50_s"] is not None
    assert rep["alerts"]["total"] > 0 and "chip-down" in rep["alerts"]["by_rule"]
    assert {"hits", "misses", "false_alarms", "averted"} <= set(rep["predictions"])
    job = next(j for j in rep["jobs"] if j["job_id"] == "job-8b")
    assert job["step"] > 0 and 0 < job["ettr"] <= 1 and job["balance_degree"] is not None
    assert sum(rep["chip_hours_lost_by_cause"].values()) == pytest.approx(rep["chip_hours_lost"], abs=1e-3)
    lines = events.read_text().splitlines()
    assert len(lines) == rep["log_records"]
    kinds = {json.loads(x)["kind"] for x in lines}
    assert {"fault", "precursor-start", "chip-failed", "recovery-start", "recovery-end"} <= kinds


def test_cli_sim_table(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "tiny", "pod_type": "trn2-node", "duration": "10m",
                                 "jobs": [{"id": "j1", "chips": 4, "steps": 5, "model": "tiny"}]}))
    r = CliRunner().invoke(app, ["sim", str(p)])
    assert r.exit_code == 0, r.output
    assert "faults_by_kind" in r.stdout and "j1" in r.stdout and "SUCCEEDED" in r.stdout
    assert "recoveries" in r.stdout and "predictions" in r.stdout


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"duration": "1h", "commands": [{"at": 1, "cordon": {"chip": 3}}]}, "commands.0.cordon",
         ["not supported", "later issue"]),
        ({"duration": "1h", "commands": [{"at": 1}]}, "commands.0", ["exactly one of", "submit"]),
        ({"duration": "1h", "commands": [{"at": 1, "stop": "j9"}]}, "scenario", ["j9", "not submitted"]),
        ({"duration": "1h", "commands": [{"at": 1, "fault": {"kind": "chip-failure", "job": "j"}}]},
         "commands.0.fault", ["job and rank"]),
        ({"duration": "1h", "commands": [{"at": 1, "fault": {"kind": "chip-failure", "chip": 1, "link": 2}}]},
         "commands.0.fault", ["one target"]),
        ({"duration": "1h", "commands": [{"at": 1, "firmware": {"version": "2.22.0", "unit": "rack"}}]},
         "commands.0.firmware.unit", ["chip", "node"]),
    ],
)
def test_command_validation_is_one_line(data: dict, field: str, words: list[str]) -> None:
    with pytest.raises(InvalidInputError) as ei:
        parse_scenario(data)
    assert ei.value.field is not None and ei.value.field.startswith(field), ei.value.field
    for w in words:
        assert w in ei.value.message
    assert "\n" not in ei.value.message


def test_rehearsal_refuses_what_the_control_plane_cannot_run() -> None:
    from podfleet.rehearsal.rehearsal import Rehearsal

    with pytest.raises(InvalidInputError, match="spares"):
        Rehearsal(parse_scenario({"duration": "1h", "spares": 8}))
    with pytest.raises(InvalidInputError, match=r"commands\.0\.fault\.chip"):
        Rehearsal(parse_scenario({"duration": "1h", "commands": [{"at": 1, "fault": {"kind": "chip-failure",
                                                                                      "chip": 64}}]}))
    with pytest.raises(InvalidInputError, match="tokens_per_step"):
        Rehearsal(parse_scenario({"duration": "1h", "jobs": [{"id": "j", "chips": 8, "steps": 5,
                                                              "tokens_per_step": 4096}]}))


def test_durations_compose() -> None:
    assert parse_scenario({"duration": "1d12h"}).duration == 36 * 3600
    assert parse_scenario({"duration": "3h10m"}).duration == 3 * 3600 + 600


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ({"duration": "1h", "bogus": 1}, "bogus"),
        ({"duration": "1h", "pod_type": "nope"}, "trn2-ultraserver"),
        ("duration: [unclosed", "not valid YAML"),
        # A job the control plane would refuse (an unknown model) is refused at load: non-zero.
        ({"duration": "1h", "jobs": [{"id": "a", "model": "lama3-8b", "chips": 8, "steps": 9}]},
         "unknown model 'lama3-8b'"),
        ({"duration": "1h", "commands": [{"at": 60, "submit": {"id": "b", "model": "gpt-9", "chips": 8, "steps": 9}}]},
         "unknown model 'gpt-9'"),
    ],
)
def test_cli_sim_bad_input_exit_2_one_line(tmp_path: Path, content, needle: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    r = CliRunner().invoke(app, ["sim", str(p)])
    assert r.exit_code == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_sim_missing_file(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["sim", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "does not exist" in r.stderr


def test_progress_reporting_does_not_change_the_log(tmp_path: Path) -> None:
    sc = parse_scenario({**BASE, "seed": 5})
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    run_scenario(sc, events_path=a)
    seen: list[float] = []
    run_scenario(sc, events_path=b, progress=seen.append)
    assert a.read_bytes() == b.read_bytes()
    assert seen[0] == 0.01 and seen[-1] == 1.0 and len(seen) == 100


@pytest.mark.parametrize("name", ["pod-24h.yaml", "small-fleet.yaml"])
def test_the_other_examples_rehearse_and_run_on_the_twin_alone(name: str) -> None:
    """Each example, cut to 10 minutes, rehearses with the control plane and runs on the twin alone."""
    from podfleet.rehearsal.rehearsal import rehearse

    sc = load_scenario(EXAMPLES / name).model_copy(update={"duration": 600.0})
    rep = rehearse(sc)
    assert [c["result"] for c in rep["commands"]] == ["ok"] * len(rep["commands"])
    assert all(j["state"] in ("RUNNING", "SUCCEEDED") for j in rep["jobs"]), rep["jobs"]
    bare = run_scenario(sc)
    assert bare["telemetry_samples"] == int(bare["sim_s"] // sc.telemetry_interval_s) - 1


def test_rehearsal_is_deterministic_for_a_seed() -> None:
    """Same seed, same rehearsal: faults, recoveries, alerts, predictions, chip-hours (ids aside)."""
    from podfleet.rehearsal.rehearsal import rehearse

    data = {"seed": 4, "duration": "1h", "fault_rates": "default", "fault_rate_scale": 5000.0, "spares": 4,
            "jobs": [{"id": f"j{i}", "model": "llama3-8b", "chips": c, "steps": 10**6, "checkpoint_interval": 50,
                      "parallelism": {"tp": 1, "pp": 1, "dp": c}} for i, c in enumerate((16, 16, 16, 8))]}

    def figures() -> dict:
        rep = rehearse(parse_scenario(data))
        keep = ("faults_by_kind", "recoveries", "alerts", "predictions", "chip_hours_lost_by_cause",
                "final_chip_states", "events_processed")
        return {**{k: rep[k] for k in keep}, "jobs": [{k: v for k, v in j.items() if k != "id"} for j in rep["jobs"]]}

    a = figures()
    assert a == figures()
    assert sum(a["faults_by_kind"].values()) > 0


def test_cli_sim_refused_command_exits_non_zero(tmp_path: Path) -> None:
    # The job is over by the time it is stopped: the control plane refuses the stop, the
    # report still prints, and the exit code says the scenario did not run as written.
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "late-stop", "pod_type": "trn2-node", "duration": "10m",
                                 "jobs": [{"id": "j1", "chips": 4, "steps": 5, "model": "tiny"}],
                                 "commands": [{"at": "9m", "stop": "j1"}]}))
    r = CliRunner().invoke(app, ["sim", str(p)])
    assert r.exit_code == 4, r.output
    assert "refused commands" in r.stdout and "j1" in r.stdout
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "1 of 2 scenario command(s) refused" in err and "stop j1" in err
