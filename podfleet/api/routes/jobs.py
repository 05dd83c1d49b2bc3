"""Training jobs: submit, list, describe, stop, logs (SSE)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import MaxResults, NextToken, Plane
from podfleet.api.schemas import Job, JobList, JobStateName, Logs, SubmitJobRequest
from podfleet.api.sse import stream

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.post("/clusters/{cluster}/jobs", operation_id="SubmitTrainingJob", response_model=Job,
             status_code=status.HTTP_201_CREATED)
async def submit_job(cluster: str, body: SubmitJobRequest, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Submit a training job; it is placed (all chips or none) when chips are free."""
    data = body.model_dump(exclude={"clientToken"}, exclude_none=True)
    return await plane.call(plane.jobs.submit, cluster, data, actor=who.actor, client_token=body.clientToken)


@router.get("/jobs", operation_id="ListTrainingJobs", response_model=JobList)
async def list_jobs(plane: Plane, cluster: str | None = None, state: JobStateName | None = None,
                    next_token: NextToken = None, max_results: MaxResults = 100) -> dict[str, Any]:
    cluster_id = plane.resolve(cluster).id if cluster else None
    views, nxt = plane.jobs.list(cluster_id=cluster_id, state=state, next_token=next_token,
                                 max_results=max_results)
    return {"jobs": views, "nextToken": nxt}


@router.get("/jobs/{job}", operation_id="DescribeTrainingJob", response_model=Job)
async def describe_job(job: str, plane: Plane) -> dict[str, Any]:
    return plane.jobs.describe(job)


@router.post("/jobs/{job}/stop", operation_id="StopTrainingJob", response_model=Job)
async def stop_job(job: str, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    return await plane.call(plane.jobs.stop, job, actor=who.actor)


@router.get("/jobs/{job}/logs", operation_id="GetJobLogs", response_model=Logs,
            responses={200: {"content": {"text/event-stream": {}}}})
async def job_logs(request: Request, job: str, plane: Plane, follow: bool = False,
                   since: Annotated[int, Query(ge=0)] = 0) -> Any:
    """The job's log; ``follow=true`` streams server-sent events until the job ends."""
    buf = plane.jobs.job_logs(job)
    if follow:
        return stream(request, buf, since, progress=lambda: plane.jobs.describe(job)["progress"])
    return {"lines": buf.since(since), "next": buf.end}
