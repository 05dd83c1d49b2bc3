"""The OpenAPI document's links: which response gives the identifiers another operation needs.

FastAPI writes the paths and schemas; this adds OpenAPI 3.1 ``links`` so a client (or a
stateful tester such as schemathesis) can follow a created cluster to its jobs, a job to its
stop, a token to its revocation and a firmware rollout to its progress with real
identifiers. A link whose operation the app does not serve is left out, so the table may name
operations that only some builds have.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

PROBLEM = "application/problem+json"
CLUSTER_ID = "$response.body#/id"
SAME_CLUSTER = "$request.path.cluster"
_CLUSTER_OPS = ("DescribeCluster", "DeleteCluster", "DescribeClusterHardware", "GetClusterLogs", "InjectFault",
                "SubmitTrainingJob", "ListAlerts", "GetTelemetry", "ListRecoveries", "StartFirmwareUpdate",
                "ListFirmwareUpdates", "CreateReservation")
_JOB_OPS = ("DescribeTrainingJob", "StopTrainingJob", "GetJobLogs")

# (operationId, status) -> {target operationId: {parameter: runtime expression}}. Only
# responses that always carry the identifier: a list may be empty, and an alert exists only
# once a health scan raised it (the contract test names one in its configuration).
LINKS: dict[tuple[str, str], dict[str, dict[str, str]]] = {
    ("CreateTrainiumCluster", "201"): {op: {"cluster": CLUSTER_ID} for op in _CLUSTER_OPS},
    ("DescribeCluster", "200"): {op: {"cluster": CLUSTER_ID} for op in ("SubmitTrainingJob", "ListAlerts")},
    ("InjectFault", "202"): {op: {"cluster": SAME_CLUSTER} for op in ("ListAlerts", "ListRecoveries")},
    ("SubmitTrainingJob", "201"): {op: {"job": "$response.body#/id"} for op in _JOB_OPS},
    ("StopTrainingJob", "200"): {"DescribeTrainingJob": {"job": "$response.body#/id"}},
    ("StartFirmwareUpdate", "202"): {"DescribeFirmwareUpdate": {"cluster": SAME_CLUSTER,
                                                                 "rollout": "$response.body#/id"}},
    ("CreateAccessToken", "201"): {"RevokeAccessToken": {"token_id": "$response.body#/id"}},
    ("CreateReservation", "201"): {op: {"cluster": SAME_CLUSTER, "reservation": "$response.body#/name"}
                                   for op in ("DescribeReservation", "DeleteReservation")},
}


def add_links(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with the links of ``LINKS`` whose both ends it has (in place, and returned)."""
    ops = {op["operationId"]: op for item in doc.get("paths", {}).values() for op in item.values()
           if isinstance(op, dict) and "operationId" in op}
    for (source, status), targets in LINKS.items():
        response = ops.get(source, {}).get("responses", {}).get(status)
        if response is None:
            continue
        links = response.setdefault("links", {})
        for target, parameters in targets.items():
            if target in ops:
                links[target] = {"operationId": target, "parameters": dict(parameters)}
    return doc


def problem_media_type(doc: dict[str, Any]) -> dict[str, Any]:
    """Error responses as they are served: ``application/problem+json`` with the Problem
    schema (FastAPI files a response model under ``application/json``, which errors never use)."""
    for item in doc.get("paths", {}).values():
        for op in item.values():
            if not isinstance(op, dict):
                continue
            for status, response in op.get("responses", {}).items():
                content = response.get("content", {})
                if not status.isdigit() or int(status) < 400 or PROBLEM not in content:
                    continue
                plain = content.pop("application/json", None)
                if plain is not None and "schema" in plain and not content[PROBLEM].get("schema"):
                    content[PROBLEM] = {"schema": plain["schema"]}
    return doc


def install(app: FastAPI) -> None:
    """Serve the document with its links and its error media type (built once, on the
    first request for it)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_links(problem_media_type(get_openapi(
                title=app.title, version=app.version, openapi_version=app.openapi_version,
                description=app.description, routes=app.routes)))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the document
