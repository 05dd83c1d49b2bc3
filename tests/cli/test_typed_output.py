"""The CLI prints the same with the SDK's typed replies as with the dicts it read before:
each command runs against a live server, then again on the same replies (played back)
with the SDK handing out the server's JSON as it came, and the two outputs must match
(key order included: a reply rendered outside its model keeps the server's order)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

import podfleet.sdk.client as sdk
from podfleet import compose
from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import role_tokens, serve_in_thread
from podfleet.cli.main import app
from podfleet.engine.timeline import Timeline
from podfleet.sdk import models
from podfleet.store.memory import MemoryStore
from tests.api.conftest import ADMIN_TOKEN, Live

runner = CliRunner()
_real_typed = sdk._typed
# The replies typed since clusters, jobs and queues: played back as plain dicts below.
NEWLY_TYPED = {models.Hardware, models.ChipOut, models.HardwareSummary, models.Logs, models.FaultOut,
               models.ChipLifecycleOut, models.Reservation, models.ReservationList, models.UsageReport,
               models.PriorityClass, models.PriorityClassList, models.JobArray, models.JobMetricsOut,
               models.AuditList, models.AuditVerify, models.AccessToken, models.AccessTokenList,
               models.AlertList, models.Telemetry, models.RecoveryList, models.FirmwareRollout,
               models.FirmwareRolloutList, models.MaintenanceRollout, models.MaintenanceList,
               models.Verification, models.Diagnosis, models.Recommendations, models.ReportList,
               models.GuideList, models.Guide, models.User, models.UserList, models.UnlockedUser,
               models.DeletedQueue, models.DeletedPriorityClass, models.HealthReport, models.CodeArtifact,
               models.Alert, models.AppliedRecommendation, models.KeyRotation}


def run(live: Live, *args: str) -> tuple[int, str]:
    env = {"PODFLEET_URL": live.url, "PODFLEET_TOKEN": live.tokens["admin"]}
    r = runner.invoke(app, list(args), env=env)
    return r.exit_code, r.stdout


def typed_and_plain(live: Live, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """The command's output with typed replies, and on the same replies as dicts."""
    seen: list[Any] = []
    real_request = sdk.PodfleetClient._request

    def recording(self: sdk.PodfleetClient, method: str, path: str, **kw: Any) -> Any:
        body = real_request(self, method, path, **kw)
        seen.append(copy.deepcopy(body))
        return body

    with monkeypatch.context() as m:
        m.setattr(sdk.PodfleetClient, "_request", recording)
        typed = run(live, *args)
    replay = iter(seen)
    plain: Callable[[type[Any], Any], Any] = lambda model, data: (  # noqa: E731
        data if model in NEWLY_TYPED else _real_typed(model, data))
    with monkeypatch.context() as m:
        m.setattr(sdk.PodfleetClient, "_request", lambda self, method, path, **kw: next(replay))
        m.setattr(sdk, "_typed", plain)
        before = run(live, *args)
    return typed, before


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    # The whole plane as ``podfleet up`` builds it: alerts, recoveries, firmware and
    # maintenance answer too.
    store = MemoryStore()
    parts = compose.build(store, Timeline(seed=5, speed=50.0), workdir=str(tmp_path_factory.mktemp("typed")))
    bootstrap_admin(parts.plane, ADMIN_TOKEN)
    tokens = role_tokens(store, ADMIN_TOKEN)
    with serve_in_thread(parts.plane, parts=parts) as url:
        yield Live(url, parts.plane, store, tokens)


@pytest.fixture(scope="module")
def node(live: Live) -> dict[str, str]:
    code, out = run(live, "cluster", "create", "typed-out", "--type", "trn2-node", "--spares", "1", "-o", "json")
    assert code == 0, out
    code, out = run(live, "job", "submit", "typed-out", "--model", "debug", "--chips", "4", "--steps", "100000",
                    "-o", "json")
    assert code == 0, out
    job = json.loads(out)["id"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, out = run(live, "job", "metrics", job, "-o", "json")
        if json.loads(out)["points"]:
            break
        time.sleep(0.2)
    arrays = {}
    for fmt in ("json", "table"):  # one each: the array is stopped once per output format
        code, out = run(live, "job", "submit", "typed-out", "--model", "debug", "--chips", "1", "--steps", "100000",
                        "--array", "0-1", "-o", "json")
        assert code == 0, out
        arrays[f"array-{fmt}"] = json.loads(out)["id"]
        assert arrays[f"array-{fmt}"].startswith("arr-"), out
    return {"cluster": "typed-out", "job": job, **arrays}


COMMANDS = [
    ["hardware", "describe", "{cluster}"],
    ["hardware", "describe", "{cluster}", "--chip", "3"],
    ["hardware", "describe", "{cluster}", "--summary"],
    ["hardware", "describe", "{cluster}", "--limit", "4"],
    ["fault", "inject", "{cluster}", "--kind", "chip-failure", "--chip", "{chip}"],
    ["chip", "repair", "{cluster}", "{chip}"],
    ["chip", "cordon", "{cluster}", "10"],
    ["chip", "uncordon", "{cluster}", "10"],
    ["reservation", "create", "--cluster", "{cluster}", "--chips", "1", "--duration", "1h", "--name", "r-{fmt}"],
    ["reservation", "list", "--cluster", "{cluster}"],
    ["reservation", "describe", "--cluster", "{cluster}", "r-{fmt}"],
    ["reservation", "delete", "--cluster", "{cluster}", "r-{fmt}"],
    ["usage"],
    ["usage", "--format", "csv"],
    ["priority-class", "create", "pc-{fmt}", "--value", "10"],
    ["priority-class", "list"],
    ["job", "metrics", "{job}"],
    ["job", "logs", "{job}"],
    ["cluster", "events", "{cluster}"],
    ["audit", "list"],
    ["audit", "verify"],
    ["token", "create", "tk-{fmt}", "--role", "viewer"],
    ["token", "list"],
    ["job", "describe", "{array}"],
    ["job", "stop", "{array}"],
    ["alerts", "list", "{cluster}"],
    ["alerts", "recoveries", "{cluster}"],
    ["firmware", "status", "{cluster}"],
    ["maintenance", "status", "{cluster}"],
    ["diagnose", "{cluster}"],
    ["report", "{cluster}", "--list"],
    ["report", "{cluster}"],
    ["user", "create", "u-{fmt}", "--policy", "ReadOnly"],
    ["user", "list"],
    ["user", "describe", "u-{fmt}"],
    ["user", "attach", "u-{fmt}", "Scheduler"],
    ["user", "detach", "u-{fmt}", "Scheduler"],
    ["user", "unlock", "u-{fmt}"],
    ["queue", "create", "q-{fmt}", "--cluster", "{cluster}", "--nominal", "2"],
    ["queue", "delete", "q-{fmt}", "--cluster", "{cluster}"],
    ["priority-class", "delete", "pc-{fmt}"],
    ["status"],
]


@pytest.mark.parametrize("fmt", ["json", "table"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:3]))
def test_the_cli_prints_what_it_printed_from_dicts(live: Live, node: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                                                   command: list[str], fmt: str) -> None:
    if "csv" in command and fmt == "json":
        pytest.skip("csv is a table-mode format")
    args = [a.format(fmt=fmt, chip=9 if fmt == "json" else 11, array=node[f"array-{fmt}"], job=node["job"],
                     cluster=node["cluster"]) for a in command]
    typed, before = typed_and_plain(live, monkeypatch, *args, "-o", fmt)
    assert typed[0] == 0, typed[1]
    assert typed == before
