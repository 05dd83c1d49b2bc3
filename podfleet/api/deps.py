"""Dependencies declared once as typed aliases."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Protocol, TypeVar

from fastapi import Depends, Path, Query, Request

from podfleet.api.schemas import MAX_CHIP_INDEX
from podfleet.control.plane import ControlPlane
from podfleet.control.users import UserReader
from podfleet.errors import ConflictError
from podfleet.health.service import HealthService
from podfleet.recovery.maintenanceservice import MaintenanceService
from podfleet.recovery.rollouts import FirmwareService
from podfleet.recovery.service import RecoveryService
from podfleet.store.records import AuditRecord

S = TypeVar("S")


class AuditLog(Protocol):
    """What the audit routes read of the store: the chain, and the keys its MACs are
    checked with (``create_app`` hands the plane's store in as this port)."""

    @property
    def audit_keys(self) -> Mapping[str, bytes]: ...

    def list_audit(self, *, after_seq: int = 0, limit: int = 100) -> list[AuditRecord]: ...

    def iter_audit(self) -> Iterator[AuditRecord]: ...

    def verify_audit(self) -> tuple[bool, int | None, str]: ...


async def get_plane(request: Request) -> ControlPlane:
    # async: a sync dependency would cost a threadpool round trip on every request
    return request.app.state.plane


async def get_audit_log(request: Request) -> AuditLog:
    return request.app.state.audit_log


async def get_store_ping(request: Request) -> Callable[[], bool]:
    return request.app.state.store_ping


async def get_user_reader(request: Request) -> UserReader:
    return request.app.state.user_reader


def _running(svc: S | None, missing: str) -> S:
    """The optional service ``create_app`` was handed, or a 409 saying it is not there
    (a plane started without health monitoring, recovery or rollouts)."""
    if svc is None:
        raise ConflictError(f"{missing} on this control plane")
    return svc


async def get_health(request: Request) -> HealthService:
    return _running(request.app.state.health, "health monitoring is not running")


async def get_recovery(request: Request) -> RecoveryService:
    return _running(request.app.state.recovery, "recovery is not running")


async def get_firmware(request: Request) -> FirmwareService:
    return _running(request.app.state.firmware, "firmware rollouts are not available")


async def get_maintenance(request: Request) -> MaintenanceService:
    return _running(request.app.state.maintenance, "maintenance rollouts are not available")


Plane = Annotated[ControlPlane, Depends(get_plane)]
Audit = Annotated[AuditLog, Depends(get_audit_log)]
StorePing = Annotated[Callable[[], bool], Depends(get_store_ping)]  # the database answers now
Users = Annotated[UserReader, Depends(get_user_reader)]  # ListUsers, DescribeUser
Health = Annotated[HealthService, Depends(get_health)]
Recovery = Annotated[RecoveryService, Depends(get_recovery)]
Firmware = Annotated[FirmwareService, Depends(get_firmware)]
Maintenance = Annotated[MaintenanceService, Depends(get_maintenance)]
NextToken = Annotated[str | None, Query(alias="next_token", max_length=128, description="from the previous page")]
MaxResults = Annotated[int, Query(alias="max_results", ge=1, le=1000)]
# A chip index: the schema states the absolute bound (the largest cluster); an index past
# the cluster's own size is a 404 that names the cluster's range.
ChipPath = Annotated[int, Path(ge=0, le=MAX_CHIP_INDEX, description="chip index within the cluster "
                               "(0 to the cluster's chips - 1; a chip past them is a 404 naming the range)")]
ChipQuery = Annotated[int | None, Query(ge=0, le=MAX_CHIP_INDEX, description="one chip's index within the cluster "
                                        "(0 to the cluster's chips - 1; a chip past them is a 404 naming the range)")]
# Identifiers in a path: names and ids are lowercase letters, digits and '-' (ids may be
# given by a unique prefix or tail), so '/', '\\', '.' and '..' never appear in one.
REF_PATTERN = r"^[a-z0-9][a-z0-9-]*$"
ClusterRef = Annotated[str, Path(pattern=REF_PATTERN, max_length=63, description="cluster id (cl-...) or name")]
JobRef = Annotated[str, Path(pattern=REF_PATTERN, max_length=64, description="job id (job-...)")]
AlertRef = Annotated[str, Path(pattern=REF_PATTERN, max_length=64, description="alert id (al-...)")]
RolloutRef = Annotated[str, Path(pattern=REF_PATTERN, max_length=64, description="firmware rollout id (fw-...)")]
TokenRef = Annotated[str, Path(pattern=REF_PATTERN, max_length=64, description="access token id (tok-...)")]
