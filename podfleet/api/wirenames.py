"""The field names the API spelled in camelCase before it spelled every name in snake_case
(``api/wirecase.py`` accepts them for one release). Apart, so the problem mapping can name
the new spelling without importing the middleware that uses it."""

from __future__ import annotations

# old spelling -> new spelling; every name the API spelled in camelCase before (bodies,
# queries and the list responses' next-page token).
RENAMED: dict[str, str] = {
    "clientToken": "client_token",
    "rayAddress": "ray_address",
    "neuronLs": "neuron_ls",
    "neuronMonitor": "neuron_monitor",
    "podsPerBlock": "pods_per_block",
    "gradCompression": "grad_compression",
    "topologyRequired": "topology_required",
    "topologyPreferred": "topology_preferred",
    "onPodLoss": "on_pod_loss",
    "jobId": "job_id",
    "nextToken": "next_token",
    "maxResults": "max_results",
    "allowMissingDigests": "allow_missing_digests",
}
OLD_NAME = {new: old for old, new in RENAMED.items()}
