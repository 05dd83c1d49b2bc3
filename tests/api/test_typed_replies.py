"""The routes that answered open objects (users and policies, PlanParallelism, the deletes,
RotateKeys, UploadCode, AcknowledgeAlert, ApplyRecommendation, CreateHealthReport,
Healthz) declare models: the SDK returns them typed, and each body is the one the route
sent before it had a model (the keys below, in this order, are main's before the change:
no key added as null, none dropped, none moved)."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from podfleet.advisor import advise
from podfleet.api.main import create_app
from podfleet.api.server import bootstrap_admin
from podfleet.api.testing import serve_in_thread
from podfleet.compose import Parts, build
from podfleet.engine.timeline import Timeline
from podfleet.sdk import models
from podfleet.sdk.client import PodfleetClient
from podfleet.store.memory import MemoryStore
from tests.api.conftest import ADMIN_TOKEN

USER = ["name", "policies", "inline_policies", "mfa", "recovery_codes_left", "mfa_locked", "mfa_failures",
        "recovery_failures", "created_at"]
CANDIDATE = ["tp", "pp", "dp", "micro_batch", "num_micro_batches", "recompute", "zero_stage", "interleave",
             "sequence_parallel", "global_batch", "step_time_s", "tokens_per_s", "tflops_per_chip", "mfu", "hfu",
             "memory_per_chip_bytes", "hbm_bytes", "fits", "breakdown_s", "memory_bytes"]
PLAN = [*CANDIDATE, "model", "chips", "topology", "chip_type", "seq_len", "evaluated", "grad_compression",
        "candidates", "rejected"]
ALERT = ["id", "cluster_id", "target", "rule", "severity", "message", "state", "first_seen", "last_seen", "count",
         "value", "acknowledged_by", "resolved_at", "detail", "jobs", "first_seen_at", "last_seen_at", "resolved_t"]
REPORT = ["id", "cluster_id", "cluster", "created_at", "period_s", "availability", "faults", "recoveries", "alerts",
          "chips_off_baseline", "links_off_baseline", "findings", "jobs", "chip_temperature_c"]


class Served:
    def __init__(self, url: str, parts: Parts, app: Any) -> None:
        self.url, self.parts, self.app = url, parts, app
        self.sdk = PodfleetClient(url, ADMIN_TOKEN)
        self.raw = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=60)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("typed-replies")
    parts = build(MemoryStore(), Timeline(seed=5, speed=50.0), telemetry_interval_s=1.0, workdir=str(workdir))
    bootstrap_admin(parts.plane, ADMIN_TOKEN)
    app = create_app(parts.plane, parts.health, recovery=parts.recovery, firmware=parts.firmware,
                     maintenance=parts.maintenance)
    app.state.mfa_key = b"m" * 32
    with serve_in_thread(parts.plane, app=app) as url:
        s = Served(url, parts, app)
        s.sdk.create_cluster("pod", type="trn2-node", spares=1)
        _until(lambda: s.sdk.describe_cluster("pod").state == "active", "pod active")
        yield s
        s.sdk.close()
        s.raw.close()


def _until(fn: Callable[[], Any], what: str, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if out := fn():
            return out
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout_s} s")


def _sent(reply: models.Reply, model: type[models.Reply], keys: list[str]) -> dict[str, Any]:
    assert type(reply) is model, type(reply)
    body = reply.to_dict()
    assert list(body) == keys, list(body)
    assert model.model_validate(body) == body  # the server's model reads it back whole
    return body


def test_users_and_policies(served: Served) -> None:
    c = served.sdk
    made = _sent(c.create_user("carol", policies=["ReadOnly"]), models.User, USER)
    assert made["policies"] == ["ReadOnly"] and made["mfa"] is False
    listing = c.list_users()
    assert type(listing) is models.UserList and "carol" in [u.name for u in listing.users]
    assert listing.to_dict() == served.raw.get("/v1/users").json()
    described = _sent(c.describe_user("carol"), models.User, USER)
    assert described == served.raw.get("/v1/users/carol").json()
    assert c.put_user_policy("carol", "Scheduler").policies == ["ReadOnly", "Scheduler"]
    inline = c.put_user_policy("carol", "mine", {"Statement": [{"Effect": "Allow", "Action": "List*"}]})
    assert _sent(inline, models.User, USER)["inline_policies"] == ["mine"]
    assert _sent(c.delete_user_policy("carol", "Scheduler"), models.User, USER)["policies"] == ["ReadOnly"]
    mfa = c.enable_mfa("carol")
    _sent(mfa, models.MfaEnrolment, [*USER, "otpauth_uri", "recovery_codes"])
    assert mfa.otpauth_uri.startswith("otpauth://") and mfa.mfa is True and len(mfa.recovery_codes) >= 8
    unlocked = c.unlock_user("carol")
    assert _sent(unlocked, models.UnlockedUser, [*USER, "was_locked"])["was_locked"] is False


def test_plan_parallelism(served: Served) -> None:
    plan = served.sdk.plan_parallelism("llama3-8b", 16)
    body = _sent(plan, models.ParallelismPlan, PLAN)
    assert plan.tp * plan.pp * plan.dp == 16 and plan.fits and plan.candidates[0].step_time_s == plan.step_time_s
    assert isinstance(plan.candidates[0], models.PlanCandidate) and list(body["candidates"][0]) == CANDIDATE
    assert all(isinstance(r, models.PlanRejection) and r.reason for r in plan.rejected)
    assert "uncompressed_step_time_s" not in body  # no nulls for the compression figures it did not ask for
    fixed = served.raw.post("/v1/plan", json={"model": "llama3-8b", "chips": 16, "tp": 4, "pp": 2, "dp": 2}).json()
    assert list(fixed) == PLAN and (fixed["tp"], fixed["pp"], fixed["dp"]) == (4, 2, 2)
    assert isinstance(fixed["hbm_bytes"], int) and isinstance(fixed["step_time_s"], float)


def test_the_deletes(served: Served) -> None:
    c = served.sdk
    c.create_queue("pod", "team-d", nominal=4, cohort="c")
    gone = c.delete_queue("pod", "team-d")
    body = _sent(gone, models.DeletedQueue, ["name", "nominal", "cohort", "borrowing_limit", "lending_limit",
                                             "weight", "reclaim", "id", "cluster_id", "state"])
    assert body["state"] == "deleted" and body["nominal"] == 4 and body["borrowing_limit"] is None
    c.create_priority_class("hi-d", 50)
    pc = c.delete_priority_class("hi-d")
    assert _sent(pc, models.DeletedPriorityClass, ["name", "value", "preemption", "created_at", "state"])["value"] == 50


def test_code_upload_and_push(served: Served, tmp_path: Path) -> None:
    keys = ["digest", "bytes", "files", "unpacked_bytes", "created", "ref"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    art = served.sdk.upload_code(buf.getvalue())
    assert _sent(art, models.CodeArtifact, keys)["ref"] == f"code:{art.digest}/" and art.files == 1
    (tmp_path / "run.py").write_text("print('run')\n")
    pushed = served.sdk.push_file(str(tmp_path / "run.py"))
    assert type(pushed) is models.CodeArtifact and pushed["ref"].startswith("code:")
    assert type(served.sdk.push_code(str(tmp_path))) is models.CodeArtifact


def test_key_rotation(served: Served) -> None:
    c = served.sdk
    c.create_cluster("kr", fabric="local", chips=1)
    try:
        _until(lambda: c.describe_cluster("kr").state != "deploying", "kr deployed")
        rot = c.rotate_keys("kr")
        assert _sent(rot, models.KeyRotation, ["cluster", "key", "version", "versions", "retired"]) == {
            "cluster": "kr", "key": "checkpoint", "version": "v2", "versions": ["v1", "v2"], "retired": []}
    finally:
        c.delete_cluster("kr")


def test_alert_acknowledgement_and_health_report(served: Served) -> None:
    c = served.sdk
    c.inject_fault("pod", "thermal-runaway", chip=5)
    firing = _until(lambda: c.list_alerts("pod", state="firing").alerts, "firing alert")
    acked = c.acknowledge_alert(firing[0]["id"])
    body = _sent(acked, models.Alert, ALERT)
    assert acked.state == "acknowledged" and body["acknowledged_by"] and body["resolved_at"] is None
    rep = c.create_health_report("pod", period="1h")
    body = _sent(rep, models.HealthReport, REPORT)
    assert rep.cluster == "pod" and rep.period_s == 3600.0
    # The archived JSON is the same report, under the same declared model.
    archived = served.raw.get(f"/v1/clusters/pod/reports/{rep.id}").json()
    assert archived == body and list(archived) == REPORT


def test_apply_recommendation(served: Served) -> None:
    rt = served.parts.plane.resolve("pod")
    book = served.app.state.advice = advise.AdviceBook()
    book.keep([advise.Recommendation("adv-0123456789", "move-straggler", "t", {}, {
        "op": "drain-chip", "cluster_id": rt.id, "chip": 3}, 0.05, 0.9, 3600.0, "tuning-throughput",
        advise.fingerprint(rt))])
    done = served.sdk.apply_recommendation("adv-0123456789")
    body = _sent(done, models.AppliedRecommendation, ["id", "applied", "result"])
    assert body["applied"]["chip"] == 3 and done.result["mode"] in ("draining", "cordoned")


def test_healthz_and_readyz(served: Served) -> None:
    hz = served.sdk.healthz()
    keys = ["ok", "role", "instance", "term", "leader", "clusters", "timeline_s", "time", "speed", "starting", "twin_time"]
    assert _sent(hz, models.Liveness, keys)["term"] is None and hz.role == "leader" and hz.speed == 50.0
    ready = served.raw.get("/readyz").json()
    assert list(ready) == ["ready", "role", "store", "leader"] and models.Readiness.model_validate(ready).ready


def test_every_2xx_json_reply_is_documented() -> None:
    from podfleet.api.openapi_dump import document

    bare = []
    for path, ops in document()["paths"].items():
        for op in ops.values():
            for code, resp in op.get("responses", {}).items():
                content = resp.get("content", {})
                if code.startswith("2") and "application/json" in content:
                    schema = content["application/json"].get("schema", {})
                    if not (schema.get("$ref") or schema.get("anyOf")):
                        bare.append(f"{op['operationId']} {code} {path}")
    assert bare == []
