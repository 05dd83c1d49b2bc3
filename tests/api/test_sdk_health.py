"""The SDK's health methods against a live API: telemetry, alerts (with acknowledge),
recoveries and firmware rollouts, the calls the CLI makes for `alerts`, `firmware` and
the console's charts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from podfleet.sdk.client import PodfleetClient
from tests.security.conftest import ADMIN_TOKEN, Api, serve


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    yield from serve(tmp_path)


def _until(cond, what: str, timeout_s: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not (got := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return got


def test_telemetry_alerts_recoveries_and_firmware_through_the_sdk(api: Api) -> None:
    sdk = PodfleetClient(api.url, ADMIN_TOKEN)
    sdk.create_cluster("pod", type="trn2-node", spares=1)
    _until(lambda: sdk.describe_cluster("pod")["state"] == "active", "the cluster")
    tel = _until(lambda: (v := sdk.get_telemetry("pod", metric="temperature_c", target=3))["t"] and v, "samples")
    assert tel["target"] == 3 and len(tel["t"]) == len(tel["avg"]) and all(x is not None for x in tel["avg"])

    sdk.inject_fault("pod", "thermal-runaway", chip=5)
    firing = _until(lambda: sdk.list_alerts("pod", state="firing")["alerts"], "an alert")
    acked = sdk.acknowledge_alert(firing[0]["id"])
    assert acked["state"] == "acknowledged"
    assert any(a["id"] == firing[0]["id"] for a in sdk.list_alerts("pod", state="acknowledged")["alerts"])

    job = sdk.submit_training_job("pod", model="tiny", chips=4, steps=10**6)
    chips = _until(lambda: (v := sdk.describe_training_job(job["id"]))["state"] == "RUNNING" and v["allocation"]["chips"],
                   "the job")
    sdk.inject_fault("pod", "chip-failure", chip=chips[1])
    recs = _until(lambda: sdk.list_recoveries("pod")["recoveries"], "a recovery")
    assert any(r["target"] == f"chip:{chips[1]}" and r["job_id"] == job["id"] for r in recs)
    assert all(r["steps"] for r in recs)

    started = sdk.start_firmware("pod", "2.22.0", chips=[7])
    rollout = _until(lambda: (v := sdk.describe_firmware("pod", started["id"]))["state"] != "running" and v,
                     "the rollout", timeout_s=60)
    assert rollout["state"] == "succeeded"
    assert started["id"] in [r["id"] for r in sdk.list_firmware("pod")["rollouts"]]
