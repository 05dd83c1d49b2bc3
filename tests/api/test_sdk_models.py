"""The SDK returns the API's own response models (clusters, jobs and queues, hardware,
faults, chips, reservations, usage, audit, tokens, presets, ...): typed attributes, and
the dict reading its callers (the CLI) relied on still works."""

from __future__ import annotations

from podfleet.api import schemas
from podfleet.control.lifecycle import JobState
from podfleet.sdk import models
from podfleet.sdk.client import PodfleetClient
from tests.api.conftest import ADMIN_TOKEN, Live, wait_active


def test_the_sdk_and_the_server_share_one_model_per_noun() -> None:
    for name in ("Cluster", "ClusterList", "Job", "JobList", "Queue", "QueueList", "Progress"):
        assert getattr(schemas, name) is getattr(models, name), name
    assert tuple(s.value for s in JobState) == models.JOB_STATE_NAMES


def test_clusters_jobs_and_queues_come_back_typed_and_still_read_as_dicts(live: Live) -> None:
    with PodfleetClient(live.url, ADMIN_TOKEN) as c, live.client("admin") as raw:
        made = c.create_cluster("typed", type="trn2-node")
        assert isinstance(made, models.Cluster) and made.name == "typed" and made["name"] == "typed"
        wait_active(raw, "typed")
        view = c.describe_cluster("typed")
        assert view.state == view["state"] == "active" and view.chips == 16
        # fields the model does not declare are kept (a newer server's, or the engine's own)
        assert view["dims"] == raw.get("/v1/clusters/typed").json()["dims"] and "dims" in view
        assert view.to_dict()["scheduler"] == view.scheduler
        job = c.submit_training_job("typed", model="debug", chips=2, steps=5, name="typed-job")
        assert isinstance(job, models.Job) and job.state in models.JOB_STATE_NAMES
        assert job.progress.steps == 5 and job["progress"]["steps"] == 5 and job.get("nope", 7) == 7
        page = c.list_training_jobs(cluster="typed", max_results=1)
        assert isinstance(page, models.JobList) and [j.id for j in page.jobs] == [job.id]
        assert c.describe_training_job(job.id).name == "typed-job"
        q = c.create_queue("typed", "team-t", nominal=4)
        assert isinstance(q, models.Queue) and q.nominal == 4 and q["cluster_id"] == view.id
        assert "team-t" in [x.name for x in c.list_queues("typed").queues]
        assert any(cl.name == "typed" for cl in c.iter_clusters())


def test_every_declared_response_model_is_the_sdks() -> None:
    # A route's response model lives in sdk/models.py, so the client reads the shape the
    # server declares (a model of the same name defined elsewhere would be named after its
    # module in the document); a route that answers an open object declares none.
    from podfleet.api.openapi_dump import document

    refs = set()
    for path in document()["paths"].values():
        for op in path.values():
            for code, resp in op.get("responses", {}).items():
                schema = resp.get("content", {}).get("application/json", {}).get("schema", {})
                for ref in [schema.get("$ref"), *(s.get("$ref") for s in schema.get("anyOf", []))]:
                    if ref and code.startswith("2"):
                        refs.add(ref.rsplit("/", 1)[1])
    assert len(refs) >= 35
    assert {name for name in refs if not isinstance(getattr(models, name, None), type)} == set()
    assert all(issubclass(getattr(models, name), models.Reply) for name in refs)


def test_new_nouns_come_back_typed(live: Live) -> None:
    with PodfleetClient(live.url, ADMIN_TOKEN) as c, live.client("admin") as raw:
        c.create_cluster("typed2", type="trn2-node", spares=1)
        wait_active(raw, "typed2")
        hw = c.describe_cluster_hardware("typed2")
        assert isinstance(hw, models.Hardware) and len(hw.chips) == 16 and hw.chips[0].index == 0
        sent = raw.get("/v1/clusters/typed2/hardware").json()
        assert list(hw.to_dict()) == list(sent) and list(hw.to_dict()["chips"][0]) == list(sent["chips"][0])
        chip = c.describe_cluster_hardware("typed2", chip=3)
        assert isinstance(chip, models.ChipOut) and chip.index == 3
        summary = c.describe_cluster_hardware("typed2", summary=True)
        assert isinstance(summary, models.HardwareSummary) and summary.pods[0].chips == 16
        page = c.describe_cluster_hardware("typed2", chip=3, limit=2)  # a page, chip or not
        assert isinstance(page, models.Hardware) and len(page.chips) == 2
        fault = c.inject_fault("typed2", "chip-failure", chip=5)
        assert isinstance(fault, models.FaultOut) and fault.kind == "chip-failure"
        cordoned = c.cordon_chip("typed2", 6, reason="typed")
        assert isinstance(cordoned, models.ChipLifecycleOut) and cordoned.chip == 6 and cordoned.mode == "cordoned"
        res = c.create_reservation("typed2", chips=1, duration="1h", name="typed-res")
        assert isinstance(res, models.Reservation) and res.chips == 1 and len(res.chip_ids) == 1
        assert [r.name for r in c.list_reservations("typed2").reservations] == ["typed-res"]
        assert c.describe_reservation("typed2", "typed-res").id == res.id
        assert isinstance(c.delete_reservation("typed2", "typed-res"), models.Reservation)
        pc = c.create_priority_class("typed-pc", 20)
        assert isinstance(pc, models.PriorityClass) and pc.value == 20
        assert "typed-pc" in [x.name for x in c.list_priority_classes().priority_classes]
        job = c.submit_training_job("typed2", model="debug", chips=2, steps=5)
        metrics = c.get_job_metrics(job.id)
        assert isinstance(metrics, models.JobMetricsOut) and metrics.job_id == job.id
        logs = c.get_job_logs(job.id)
        assert isinstance(logs, models.Logs) and all(isinstance(ln, models.LogLine) for ln in logs.lines)
        assert isinstance(c.get_cluster_logs("typed2"), models.Logs)
        usage = c.get_usage(bucket="1h")
        assert isinstance(usage, models.UsageReport) and isinstance(usage.series, models.UsageSeries)
        audit = c.list_audit_events(max_results=2)
        assert isinstance(audit, models.AuditList) and len(audit.events) == 2 and audit.next_token
        assert isinstance(audit.events[0], models.AuditEvent) and audit.events[0].seq >= 0
        assert isinstance(c.verify_audit_chain(allow_missing_digests=True), models.AuditVerify)
        tok = c.create_access_token("typed-tok", "viewer")
        assert isinstance(tok, models.AccessToken) and tok.token and tok.role == "viewer"
        assert tok.id in [t.id for t in c.list_access_tokens().tokens]
        assert c.revoke_access_token(tok.id).revoked is True
        presets = c.get_presets()
        assert isinstance(presets, models.Presets) and "debug" in [m.name for m in presets.models]
        assert tuple(presets.job_states) == models.JOB_STATE_NAMES


def test_a_reply_keeps_the_servers_key_order() -> None:
    # DescribeClusterHardware's snapshot is rendered outside its model: to_dict and the
    # mapping reads give its keys as sent, not in the model's declaration order.
    from podfleet.sdk.client import _typed

    sent = {"name": "pod", "cluster_id": "cl-1", "links": [],
            "chips": [{"metrics": {"t": 1}, "spare": False, "index": 0, "coords": [0], "state": "healthy", "job": None}]}
    hw = _typed(models.Hardware, sent)
    assert list(hw.to_dict()) == list(sent) and list(hw.keys()) == list(sent)
    assert list(hw.chips[0].to_dict()) == list(sent["chips"][0]) and hw.to_dict() == sent
    assert [k for k, _ in hw.chips[0].items()] == list(sent["chips"][0])


def test_a_reply_that_does_not_fit_is_kept_as_sent() -> None:
    from podfleet.sdk.client import _typed

    odd = _typed(models.Job, {"id": "job-1", "state": "SOMETHING-NEW"})
    assert odd["id"] == "job-1" and odd.get("state") == "SOMETHING-NEW"
