"""Advance reservations (CreateReservation ... DeleteReservation): chips of a cluster held
for one queue over a window; backfill never delays one (``scheduler.reservations``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, status

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import REF_PATTERN, ClusterRef, Plane
from podfleet.api.schemas import CreateReservationRequest, Reservation, ReservationList

router = APIRouter(prefix="/v1", tags=["reservations"])

ReservationRef = Annotated[str, Path(pattern=REF_PATTERN, max_length=63, description="reservation name")]


@router.post("/clusters/{cluster}/reservations", operation_id="CreateReservation", response_model=Reservation,
             status_code=status.HTTP_201_CREATED)
async def create_reservation(cluster: ClusterRef, body: CreateReservationRequest, plane: Plane,
                             who: CurrentPrincipal) -> dict[str, Any]:
    """Hold chips for a queue's jobs (or nobody's) from ``start`` for ``duration``."""
    return await plane.call(plane.reservations.create, cluster, body.model_dump(exclude_none=True), actor=who.actor)


@router.get("/clusters/{cluster}/reservations", operation_id="ListReservations", response_model=ReservationList)
async def list_reservations(cluster: ClusterRef, plane: Plane) -> dict[str, Any]:
    return {"reservations": await plane.call(plane.reservations.list_all, cluster)}


@router.get("/clusters/{cluster}/reservations/{reservation}", operation_id="DescribeReservation",
            response_model=Reservation)
async def describe_reservation(cluster: ClusterRef, reservation: ReservationRef, plane: Plane) -> dict[str, Any]:
    return await plane.call(plane.reservations.describe, cluster, reservation)


@router.delete("/clusters/{cluster}/reservations/{reservation}", operation_id="DeleteReservation",
               response_model=Reservation)
async def delete_reservation(cluster: ClusterRef, reservation: ReservationRef, plane: Plane,
                             who: CurrentPrincipal) -> dict[str, Any]:
    """Its chips are free to every job again at once."""
    return await plane.call(plane.reservations.delete, cluster, reservation, actor=who.actor)
