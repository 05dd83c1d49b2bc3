"""``plan(..., grad_compression=)`` and ``podfleet plan --grad-compression``: the plan with
the mode, beside the best plan's uncompressed step time."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app
from podfleet.errors import InvalidInputError
from podfleet.planner import plan


def test_without_a_mode_nothing_changes() -> None:
    r = plan("llama3-8b", 64, top=1)
    assert r.grad_compression == "none" and r.uncompressed is None
    assert "uncompressed_step_time_s" not in r.to_dict()


def test_lossless_on_many_ranks_costs_more_and_the_planner_says_so() -> None:
    r = plan("llama3-8b", 64, top=1, grad_compression="lossless")
    d = r.to_dict()
    assert d["grad_compression"] == "lossless"
    assert d["grad_codec_s"] > 0
    assert d["step_time_s"] >= d["uncompressed_step_time_s"]
    # The same plan without compression is the figure beside it.
    assert r.uncompressed is not None and r.uncompressed.grad_codec_s == 0


def test_a_bad_mode_is_named() -> None:
    with pytest.raises(InvalidInputError, match="powersgd:RANK"):
        plan("llama3-8b", 64, grad_compression="zip")


def test_cli_shows_both_step_times() -> None:
    out = CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--chips", "64", "--grad-compression",
                                   "powersgd:4", "--output", "json"])
    assert out.exit_code == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["grad_compression"] == "powersgd:4"
    assert d["compression_speedup"] == pytest.approx(d["uncompressed_step_time_s"] / d["step_time_s"])
