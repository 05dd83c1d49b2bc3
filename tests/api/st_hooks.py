"""Schemathesis hooks of the contract test (tests/api/schemathesis.toml).

Generated clusters stay on the twin: a `local` or `ray` cluster starts real worker
processes (a Ray instance per example would take minutes) and a `neuron` one runs the
command lines it is given on the test machine. The server is `podfleet up --fabric sim`,
so such a request is sent with `fabric: sim` instead, and without the options of those
fabrics (`ray_address`, `neuron_ls`, `neuron_monitor`, and their deprecated camelCase
spellings: given without a fabric they imply it, and the schema allows them only with it). Schemathesis revalidates an edited case, so its
positive or negative label stays true. Every other field is left as drawn, sizes included:
the server refuses a cluster past its bound (256 chips) with a 422 before building anything.
"""

from __future__ import annotations

from typing import Any

import schemathesis

REAL_FABRICS = ("local", "ray", "neuron")
FABRIC_OPTIONS = ("ray_address", "neuron_ls", "neuron_monitor", "rayAddress", "neuronLs", "neuronMonitor")


@schemathesis.hook
def before_call(ctx: Any, case: Any, _kwargs: dict[str, Any]) -> None:
    if getattr(case.operation, "label", "") != "POST /v1/clusters" or not isinstance(case.body, dict):
        return
    body = case.body
    implied = body.get("fabric") is None and any(body.get(k) is not None for k in FABRIC_OPTIONS)
    if body.get("fabric") in REAL_FABRICS or implied:
        body["fabric"] = "sim"
        for k in FABRIC_OPTIONS:
            body.pop(k, None)


# UploadCode takes a gzipped tarball as raw bytes: send generated binaries as they are.
schemathesis.serializer.alias("application/gzip", "application/octet-stream")
