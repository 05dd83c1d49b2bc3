"""``podfleet plan`` through Typer's CliRunner: JSON payload and one-line errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from podfleet.cli.main import app

runner = CliRunner()
KEYS = ("tp", "pp", "dp", "micro_batch", "num_micro_batches", "recompute", "step_time_s",
        "tokens_per_s", "tflops_per_chip", "mfu", "memory_per_chip_bytes", "fits")


def _run(*args: str):
    return runner.invoke(app, ["plan", *args])


def test_plan_json() -> None:
    res = _run("--model", "llama3-8b", "--chips", "16", "--chip-type", "trn2", "--seq-len", "4096",
               "--global-batch", "64", "--output", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    for key in KEYS:
        assert key in data
    assert data["tp"] * data["pp"] * data["dp"] == 16
    assert data["fits"] is True and data["seq_len"] == 4096 and data["global_batch"] == 64
    assert data["memory_per_chip_bytes"] <= 96 * 2**30


def test_plan_custom_model_and_explicit_degrees() -> None:
    res = _run("--layers", "8", "--hidden", "1024", "--heads", "16", "--vocab", "32000",
               "--chips", "16", "--topology", "dgx-a100:2", "--tp", "2", "--pp", "2", "--dp", "4",
               "--micro-batch", "2", "--recompute", "full", "-o", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert (data["tp"], data["pp"], data["dp"], data["micro_batch"], data["recompute"]) == (2, 2, 4, 2, "full")
    assert data["topology"] == "dgx-a100:2" and data["chip_type"] == "a100"


def test_plan_table() -> None:
    res = _run("--model", "debug", "--chips", "4")
    assert res.exit_code == 0 and "step_time_s" in res.stdout


def _one_line_error(res, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    for n in needles:
        assert n in lines[0]


def test_plan_errors() -> None:
    _one_line_error(_run("--model", "nope", "--chips", "8"), "unknown model 'nope'", "llama3-70b")
    _one_line_error(_run("--model", "debug", "--chips", "8", "--chip-type", "tpu"), "unknown chip type", "trn2")
    _one_line_error(_run("--model", "llama3-70b", "--chips", "64", "--tp", "4", "--pp", "2", "--dp", "2"),
                    "tp*pp*dp (4*2*2 = 16) != chips (64)")
    _one_line_error(_run("--model", "llama3-405b", "--chips", "4"), "does not fit on 4 trn2 chips")
    _one_line_error(_run("--layers", "8", "--hidden", "1000", "--heads", "16", "--vocab", "10", "--chips", "8"),
                    "hidden (1000) must be divisible by heads (16)")
    _one_line_error(_run("--layers", "8", "--chips", "8"), "--hidden")
