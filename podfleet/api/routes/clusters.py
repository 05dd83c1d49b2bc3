"""Clusters: create, list, describe, delete, hardware, logs (SSE), faults."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response, status

from podfleet.api.auth import CurrentPrincipal, require_fabric_commands
from podfleet.api.deps import ChipQuery, ClusterRef, MaxResults, NextToken, Plane
from podfleet.api.rendered import RenderedViews, compact_json, page_body
from podfleet.api.schemas import (
    ChipOut,
    Cluster,
    ClusterList,
    CreateClusterRequest,
    FaultOut,
    Hardware,
    HardwareSummary,
    InjectFaultRequest,
    Logs,
)
from podfleet.api.sse import stream
from podfleet.control.hardwareviews import ChipFilter

router = APIRouter(prefix="/v1/clusters", tags=["clusters"])
# DescribeCluster and ListClusters bodies, rendered again only when a cluster's view changed
# (correct whatever the key: a hit needs an equal view; ``api.rendered``).
_CLUSTERS = RenderedViews(Cluster)


@router.post("", operation_id="CreateTrainiumCluster", response_model=Cluster,
             status_code=status.HTTP_201_CREATED)
async def create_cluster(body: CreateClusterRequest, request: Request, plane: Plane,
                         who: CurrentPrincipal) -> dict[str, Any]:
    """Create a cluster; its deployment runs as steps (follow them with GetClusterLogs?follow=true).
    ``ray_address`` names a Ray cluster the control plane joins, ``neuron_ls`` /
    ``neuron_monitor`` programs it runs on its own host: they need UseFabricCommands (admins;
    a user's policies must grant it)."""
    host = {"ray_address": body.ray_address, "neuron_ls": body.neuron_ls, "neuron_monitor": body.neuron_monitor}
    await require_fabric_commands(request, who, body.name, [k for k, v in host.items() if v is not None])
    data = body.model_dump(exclude={"client_token"}, exclude_none=True)
    if body.fabric is None:
        # The fabric-specific options say which fabric is meant (the schema says the same).
        implied = "neuron" if body.neuron_ls is not None or body.neuron_monitor is not None else (
            "ray" if body.ray_address is not None else None)
        if implied is not None:
            data["fabric"] = implied
    return await plane.call(plane.create_cluster, data, actor=who.actor, client_token=body.client_token)


@router.get("", operation_id="ListClusters", response_model=ClusterList)
async def list_clusters(plane: Plane, next_token: NextToken = None, max_results: MaxResults = 100) -> Response:
    views, nxt = plane.list_clusters(next_token=next_token, max_results=max_results)
    return Response(page_body("clusters", [_CLUSTERS.render(str(v.get("id")), v) for v in views], nxt),
                    media_type="application/json")


@router.get("/{cluster}", operation_id="DescribeCluster", response_model=Cluster)
async def describe_cluster(cluster: ClusterRef, plane: Plane) -> Response:
    # Scheduler figures are computed on the engine while someone reads them; after a
    # quiet spell the first reader waits for a fresh computation rather than see old ones.
    if (cluster in plane.names or cluster in plane.clusters) and plane.metrics_stale(cluster):
        await plane.call(plane.refresh_metrics, cluster)
    view = plane.describe_cluster(cluster)
    return Response(_CLUSTERS.render(str(view.get("id")), view), media_type="application/json")


@router.delete("/{cluster}", operation_id="DeleteCluster", response_model=Cluster)
async def delete_cluster(cluster: ClusterRef, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Stop the cluster's jobs and delete it."""
    return await plane.call(plane.delete_cluster, cluster, actor=who.actor)


@router.get("/{cluster}/hardware", operation_id="DescribeClusterHardware",
            responses={200: {"model": Hardware | ChipOut | HardwareSummary,
                             "description": "the whole cluster (or a page of it), one chip with ?chip=, or "
                                            "per-pod and per-block counts with ?summary=true"}},
            response_class=Response)
async def describe_hardware(
    request: Request, cluster: ClusterRef, plane: Plane, chip: ChipQuery = None,
    pod: Annotated[int | None, Query(ge=0, le=1023, description="only this pod's chips (and its links)")] = None,
    state: Annotated[Literal["healthy", "degraded", "failed", "isolated", "updating"] | None,
                     Query(description="only chips in this state")] = None,
    job: Annotated[str | None, Query(max_length=64, pattern=r"^job-[a-z0-9-]+$",
                                     description="only chips this job holds")] = None,
    limit: Annotated[int | None, Query(ge=1, le=4096, description="chips per page (a page has next_token)")] = None,
    next_token: Annotated[str | None, Query(alias="next_token", max_length=16, pattern=r"^\d+$",
                                            description="from the previous page")] = None,
    summary: Annotated[bool, Query(description="per-pod and per-block counts (healthy, failed, spare, "
                                               "busy, utilization) instead of chips")] = False,
) -> Response:
    """Chips (index, coords, state, spare, metrics) and links (src, dst, axis, state, metrics),
    from the snapshot rendered once per telemetry tick. At fleet size: ``summary=true`` for
    per-pod and per-block counts, or a page of chips (``pod``, ``state``, ``job``,
    ``limit``, ``next_token``)."""
    if plane.snapshot_stale(cluster):
        await plane.call(plane.refresh_hardware, cluster)
    if summary:
        return Response(plane.hardware_summary(cluster), media_type="application/json")
    if any(v is not None for v in (pod, state, job, limit, next_token)):
        body = plane.hardware_page(cluster, ChipFilter(pod, state, job), limit or 256, next_token)
        return Response(compact_json(body), media_type="application/json")
    if chip is None and "gzip" in request.headers.get("accept-encoding", ""):
        return Response(plane.hardware_gzip(cluster), media_type="application/json",
                        headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
    return Response(plane.hardware(cluster, chip), media_type="application/json",
                    headers={"Vary": "Accept-Encoding"})


@router.get("/{cluster}/logs", operation_id="GetClusterLogs", response_model=Logs,
            responses={200: {"content": {"text/event-stream": {}}}})
async def cluster_logs(request: Request, cluster: ClusterRef, plane: Plane,
                       follow: bool = False, since: Annotated[int, Query(ge=0)] = 0) -> Any:
    """Deployment and fabric log; ``follow=true`` streams server-sent events until the
    deployment ends (``log`` and ``progress`` events, then ``end``)."""
    logs, progress = plane.cluster_log(cluster)  # a cluster still connecting to its fabric too
    if follow:
        return stream(request, logs, since, progress=progress)
    return {"lines": logs.since(since), "next": logs.end}


@router.post("/{cluster}/faults", operation_id="InjectFault", response_model=FaultOut,
             status_code=status.HTTP_202_ACCEPTED)
async def inject_fault(cluster: ClusterRef, body: InjectFaultRequest, plane: Plane,
                       who: CurrentPrincipal) -> dict[str, Any]:
    """Inject a fault. The twin: chip faults need ``chip``, link faults ``link`` (A-B). Local
    and ray clusters: ``kill-worker`` kills one rank's worker (``rank``; ``job_id`` unless one
    job runs there), an infrastructure failure the fabric recovers from; ``slow-worker`` slows
    one rank down by ``factor`` (the balancer moves work off it). Twin fleet clusters:
    ``pod-loss`` takes ``pod`` down as a whole (power, switch); each job spanning it acts on
    its ``on_pod_loss`` policy."""
    return await plane.call(plane.inject_fault, cluster, body.kind, chip=body.chip, link=body.link,
                            rank=body.rank, job=body.job_id, factor=body.factor, pod=body.pod, actor=who.actor)
