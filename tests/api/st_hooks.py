"""Schemathesis hooks of the contract test (tests/api/schemathesis.toml).

Generated clusters stay on the twin: a `local` or `ray` cluster starts real worker
processes (a Ray instance per example would take minutes) and a `neuron` one runs the
command lines it is given on the test machine. The server is `podfleet up --fabric sim`,
so such a request is sent with `fabric: sim` instead, and a cluster of more than 256 chips
is sent smaller (schemathesis revalidates an edited case, so its positive or negative label
stays true); every other field is left as drawn.
"""

from __future__ import annotations

import math
from typing import Any

import schemathesis

REAL_FABRICS = ("local", "ray", "neuron")


# The API's own bound (control/specs.py MAX_CLUSTER_CHIPS); kept here so a later rise of
# that bound does not silently make the fuzzing run out of memory.
MAX_TEST_CHIPS = 256


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value)


@schemathesis.hook
def before_call(ctx: Any, case: Any, _kwargs: dict[str, Any]) -> None:
    if getattr(case.operation, "label", "") != "POST /v1/clusters" or not isinstance(case.body, dict):
        return
    body = case.body
    if body.get("fabric") in REAL_FABRICS:
        body["fabric"] = "sim"
    dims = body.get("dims")
    if _ints(dims) and math.prod(dims) > MAX_TEST_CHIPS:
        body["dims"] = [min(d, 2) for d in dims]
    chips = body.get("chips")
    if isinstance(chips, int) and not isinstance(chips, bool) and chips > MAX_TEST_CHIPS:
        body["chips"] = MAX_TEST_CHIPS


# UploadCode takes a gzipped tarball as raw bytes: send generated binaries as they are.
schemathesis.serializer.alias("application/gzip", "application/octet-stream")
