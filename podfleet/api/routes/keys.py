"""Key rotation through the API (admin; a user's token needs a second factor)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from podfleet.api.auth import CurrentPrincipal
from podfleet.api.deps import ClusterRef, Plane
from podfleet.api.schemas import KeyRotation
from podfleet.control import keys

router = APIRouter(prefix="/v1/clusters", tags=["keys"])


@router.post("/{cluster}/keys/rotate", operation_id="RotateKeys", response_model=KeyRotation,
             response_model_exclude_unset=True)
async def rotate_keys(cluster: ClusterRef, plane: Plane, who: CurrentPrincipal) -> dict[str, Any]:
    """Add a version to the cluster's checkpoint key ring: new checkpoints use it, older
    versions still decrypt (`podfleet keys rewrap` / `retire` stay on the host)."""
    return await plane.call(keys.rotate_cluster_key, plane, cluster, actor=who.actor)
