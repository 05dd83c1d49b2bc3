"""Training jobs: submit, list, describe, stop, logs (SSE)."""

from __future__ import annotations

from enum import IntEnum
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status

from podfleet.api.auth import CurrentPrincipal, require_checkpoint_options, require_queue
from podfleet.api.deps import ClusterRef, JobRef, MaxResults, NextToken, Plane
from podfleet.api.schemas import Job, JobList, JobMetricsOut, JobStateName, Logs, SubmitJobRequest
from podfleet.api.sse import stream

router = APIRouter(prefix="/v1", tags=["jobs"])


class Resolution(IntEnum):
    """Bucket seconds of GetJobMetrics (the job-metrics rollups)."""

    TEN_S = 10
    FIVE_MIN = 300


@router.post("/clusters/{cluster}/jobs", operation_id="SubmitTrainingJob", response_model=Job,
             status_code=status.HTTP_201_CREATED)
async def submit_job(cluster: ClusterRef, body: SubmitJobRequest, request: Request, plane: Plane,
                     who: CurrentPrincipal) -> dict[str, Any]:
    """Submit a training job; it is placed (all chips or none) when chips are free.
    Options that move checkpoints or their key (``checkpoint_dir``, ``key_file``) or turn
    encryption off (``encrypt_checkpoints: false``) need UseCheckpointOptions (admins; a
    user's policies must grant it, e.g. StorageAccess), and are audited."""
    data = body.model_dump(exclude={"client_token"}, exclude_none=True)
    await require_checkpoint_options(request, who, cluster, data.get("options"))
    await require_queue(request, who, cluster, data.get("queue") or "default")
    return await plane.call(plane.jobs.submit, cluster, data, actor=who.actor, client_token=body.client_token)


@router.get("/jobs", operation_id="ListTrainingJobs", response_model=JobList)
async def list_jobs(plane: Plane, cluster: str | None = None, state: JobStateName | None = None,
                    next_token: NextToken = None, max_results: MaxResults = 100) -> dict[str, Any]:
    cluster_id = plane.resolve(cluster).id if cluster else None
    views, nxt = plane.jobs.list(cluster_id=cluster_id, state=state, next_token=next_token,
                                 max_results=max_results)
    return {"jobs": views, "next_token": nxt}


@router.get("/jobs/{job}", operation_id="DescribeTrainingJob", response_model=Job)
async def describe_job(job: JobRef, plane: Plane) -> dict[str, Any]:
    return plane.jobs.describe(job)


@router.post("/jobs/{job}/stop", operation_id="StopTrainingJob", response_model=Job)
async def stop_job(job: JobRef, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    return await plane.call(plane.jobs.stop, job, actor=who.actor)


@router.get("/jobs/{job}/logs", operation_id="GetJobLogs", response_model=Logs,
            responses={200: {"content": {"text/event-stream": {}}}})
async def job_logs(request: Request, job: JobRef, plane: Plane, follow: bool = False,
                   since: Annotated[int, Query(ge=0)] = 0) -> Any:
    """The job's log; ``follow=true`` streams server-sent events until the job ends."""
    buf = plane.jobs.job_logs(job)
    if follow:
        return stream(request, buf, since, progress=lambda: plane.jobs.describe(job)["progress"])
    return {"lines": buf.since(since), "next": buf.end}


@router.get("/jobs/{job}/metrics", operation_id="GetJobMetrics", response_model=JobMetricsOut)
async def job_metrics(job: JobRef, plane: Plane,
                      resolution: Annotated[Resolution | None, Query(description="bucket seconds: 10 (the last hour) "
                                                                "or 300; default by the run's age")] = None,
                      since: Annotated[float, Query(ge=0, description="unix seconds")] = 0.0,
                      limit: Annotated[int, Query(ge=1, le=10000)] = 2000) -> dict[str, Any]:
    """The job's loss, tokens/s and step time over its run, as rollup buckets (avg, min, max)."""
    return await plane.call(plane.get_job_metrics, job, resolution_s=None if resolution is None else int(resolution),
                            since=since, limit=limit)
