"""Cluster queues (CreateQueue ... DeleteQueue) and job arrays (DescribeJobArray, StopJobArray)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, status

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import REF_PATTERN, ClusterRef, Plane
from podfleet.api.schemas import (
    CreatePriorityClassRequest,
    CreateQueueRequest,
    DeletedPriorityClass,
    DeletedQueue,
    JobArray,
    PriorityClass,
    PriorityClassList,
    Queue,
    QueueList,
    UpdateQueueRequest,
)

router = APIRouter(prefix="/v1", tags=["queues"])

QueueRef = Annotated[str, Path(pattern=REF_PATTERN, max_length=63, description="queue name")]
PriorityRef = Annotated[str, Path(pattern=r"^[a-z][a-z0-9-]*$", max_length=63, description="priority class name")]
ArrayRef = Annotated[str, Path(pattern=r"^arr-[a-z0-9-]+$", max_length=64, description="job array id (arr-...)")]


@router.post("/clusters/{cluster}/queues", operation_id="CreateQueue", response_model=Queue,
             status_code=status.HTTP_201_CREATED)
async def create_queue(cluster: ClusterRef, body: CreateQueueRequest, plane: Plane,
                       who: CurrentPrincipal) -> dict[str, Any]:
    """A queue with a nominal chip quota; queues of one cohort lend each other idle quota."""
    return await plane.call(plane.queues.create, cluster, body.model_dump(exclude_none=True), actor=who.actor)


@router.get("/clusters/{cluster}/queues", operation_id="ListQueues", response_model=QueueList)
async def list_queues(cluster: ClusterRef, plane: Plane) -> dict[str, Any]:
    """The cluster's queues (``default`` included) with what each uses, borrows and lends."""
    return {"queues": await plane.call(plane.queues.list_all, cluster)}


@router.get("/clusters/{cluster}/queues/{queue}", operation_id="DescribeQueue", response_model=Queue)
async def describe_queue(cluster: ClusterRef, queue: QueueRef, plane: Plane) -> dict[str, Any]:
    return await plane.call(plane.queues.describe, cluster, queue)


@router.patch("/clusters/{cluster}/queues/{queue}", operation_id="UpdateQueue", response_model=Queue)
async def update_queue(cluster: ClusterRef, queue: QueueRef, body: UpdateQueueRequest, plane: Plane,
                       who: CurrentPrincipal) -> dict[str, Any]:
    """Change a queue's quota, limits, weight or policy (fields left out keep their value)."""
    return await plane.call(plane.queues.update, cluster, queue, body.model_dump(exclude_unset=True),
                            actor=who.actor)


@router.delete("/clusters/{cluster}/queues/{queue}", operation_id="DeleteQueue", response_model=DeletedQueue,
                response_model_exclude_unset=True)
async def delete_queue(cluster: ClusterRef, queue: QueueRef, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Delete a queue no job uses (409 naming its jobs otherwise)."""
    return await plane.call(plane.queues.delete, cluster, queue, actor=who.actor)


@router.get("/job-arrays/{array}", operation_id="DescribeJobArray", response_model=JobArray)
async def describe_job_array(array: ArrayRef, plane: Plane) -> dict[str, Any]:
    """An array's members, their states and one state for the whole array."""
    return await plane.call(plane.jobs.describe_array, array)


@router.post("/job-arrays/{array}/stop", operation_id="StopJobArray", response_model=JobArray)
async def stop_job_array(array: ArrayRef, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    return await plane.call(plane.jobs.stop_array, array, actor=who.actor)


@router.post("/priority-classes", operation_id="CreatePriorityClass", response_model=PriorityClass,
             status_code=status.HTTP_201_CREATED)
async def create_priority_class(body: CreatePriorityClassRequest, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """A named priority: jobs submitted with ``priority: NAME`` get its value and preemption policy."""
    return await plane.call(plane.priorities.create, body.model_dump(), actor=who.actor)


@router.get("/priority-classes", operation_id="ListPriorityClasses", response_model=PriorityClassList)
async def list_priority_classes(plane: Plane) -> dict[str, Any]:
    return {"priority_classes": await plane.call(plane.priorities.list_all)}


@router.delete("/priority-classes/{priority_class}", operation_id="DeletePriorityClass",
                response_model=DeletedPriorityClass, response_model_exclude_unset=True)
async def delete_priority_class(priority_class: PriorityRef, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Jobs already submitted keep the value they were given."""
    return await plane.call(plane.priorities.delete, priority_class, actor=who.actor)
