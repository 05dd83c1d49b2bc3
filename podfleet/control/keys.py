"""``RotateKeys``: add a version to a cluster's checkpoint key ring, through the API.

The cluster's key-encryption key lives outside its work directory
(``checkpoint.keys.kek_path_for``); rotating adds a version that encrypts new checkpoints
while older versions keep decrypting. Workers receive the ring when their gang starts, so
a running gang finishes under the version it started with. Audited like every change;
for a user's token the ``MFARequired`` policy asks for a second factor.
"""

from __future__ import annotations

from podfleet.checkpoint import keys
from podfleet.control.ports import PlaneCore
from podfleet.control.workdir import cluster_workdir
from podfleet.errors import ConflictError
from podfleet.wire import JsonObject


def rotate_cluster_key(plane: PlaneCore, cluster: str, *, actor: str) -> JsonObject:
    def do() -> tuple[JsonObject, str]:
        rt = plane.resolve(cluster)
        path = keys.kek_path_for(cluster_workdir(plane.workdir, rt.rec.id))
        if not path.is_file():
            raise ConflictError(f"cluster {rt.rec.name} has no checkpoint key file (a simulated cluster, or its "
                                "key comes from PODFLEET_CHECKPOINT_KEY or a job option)", field="cluster")
        version = keys.rotate(path)
        ring = keys.load_ring(path)
        return {"cluster": rt.rec.name, "key": "checkpoint", "version": version,
                "versions": list(ring.versions), "retired": sorted(ring.retired)}, rt.rec.name

    return plane.mutation("RotateKeys", actor, cluster, do, body={"cluster": cluster, "key": "checkpoint"})
