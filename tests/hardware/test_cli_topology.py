"""``podfleet topology show TYPE``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from podfleet.cli.main import app
from podfleet.hardware.catalog import TOPOLOGY_NAMES

runner = CliRunner()


def show(*args: str):
    return runner.invoke(app, ["topology", "show", *args])


def test_json_output_for_the_ultraserver() -> None:
    res = show("trn2-ultraserver", "--output", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert {"chips", "dims", "links", "diameter", "avg_hops", "bisection_gbps"} <= data.keys()
    assert data["chips"] == 64
    assert data["dims"] == [4, 4, 4]
    assert data["links"] == 192
    assert data["diameter"] == 6
    assert data["avg_hops"] == pytest.approx(3.0476)
    assert data["bisection_gbps"] == 4096.0
    assert res.stderr == ""


@pytest.mark.parametrize("name", [*TOPOLOGY_NAMES, "trn2-ultraserver:16", "dgx-h100:128"])
def test_every_named_topology_prints_json(name: str) -> None:
    res = show(name, "-o", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["name"] == name


def test_table_output() -> None:
    res = show("trn2-node")
    assert res.exit_code == 0
    assert "chips" in res.stdout and "16" in res.stdout


@pytest.mark.parametrize(
    ("name", "needle"),
    [("trn9-pod", "valid: "), ("trn2-node:0", "positive integer"), ("trn2-node:x", "positive integer")],
)
def test_bad_name_is_one_line_exit_2(name: str, needle: str) -> None:
    res = show(name, "--output", "json")
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert needle in lines[0]
    assert "Traceback" not in res.output


def test_unknown_type_lists_choices() -> None:
    res = show("trn9-pod")
    for name in TOPOLOGY_NAMES:
        assert name in res.stderr
