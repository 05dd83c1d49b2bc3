"""The SDK returns the API's own response models for clusters, jobs and queues: typed
attributes, and the dict reading its callers (the CLI) relied on still works."""

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


def test_a_reply_that_does_not_fit_is_kept_as_sent() -> None:
    from podfleet.sdk.client import _typed

    odd = _typed(models.Job, {"id": "job-1", "state": "SOMETHING-NEW"})
    assert odd["id"] == "job-1" and odd.get("state") == "SOMETHING-NEW"
