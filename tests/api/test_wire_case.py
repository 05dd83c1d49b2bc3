"""One case on the wire (snake_case): the camelCase spellings of earlier releases still work
for one release, and a response to a request that used one says so (Deprecation, Link,
Podfleet-Deprecated-Fields); a request in today's spelling gets no such header."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from podfleet.api.wirecase import DEPRECATED_SINCE, FIELDS_HEADER
from podfleet.api.wirenames import RENAMED
from tests.api.conftest import wait_active


@pytest.fixture(scope="module")
def pod(admin: httpx.Client) -> dict[str, Any]:
    r = admin.post("/v1/clusters", json={"name": "wire", "type": "trn2-node"})
    assert r.status_code == 201, r.text
    return wait_active(admin, "wire")


# User policies are IAM's JSON policy grammar (Version, Statement, Effect...), kept as IAM
# spells it so a policy written for AWS reads the same here: a document, not API field names.
IAM_DOCUMENTS = {"PolicyDocument", "PolicyStatement"}


def _deprecated(r: httpx.Response) -> dict[str, str]:
    """The old -> new names the response says the request used (none: no header at all)."""
    if "deprecation" not in r.headers:
        assert FIELDS_HEADER not in r.headers and "link" not in r.headers
        return {}
    assert r.headers["deprecation"] == f"@{int(DEPRECATED_SINCE.timestamp())}"  # RFC 9745: a date
    assert 'rel="deprecation"' in r.headers["link"]
    return dict(pair.split("=") for pair in r.headers[FIELDS_HEADER].split(", "))


def test_a_body_in_the_old_spelling_works_and_is_told_the_new_one(admin: httpx.Client, pod: dict[str, Any]) -> None:
    old = {"model": "debug", "chips": 2, "steps": 5, "gradCompression": "bf16", "clientToken": "wire-old-1"}
    r = admin.post("/v1/clusters/wire/jobs", json=old)
    assert r.status_code == 201, r.text
    assert r.json()["grad_compression"] == "bf16"
    assert _deprecated(r) == {"gradCompression": "grad_compression", "clientToken": "client_token"}
    # The old token is the same idempotency key as the new one: a retry in the new spelling is the same job.
    new = {"model": "debug", "chips": 2, "steps": 5, "grad_compression": "bf16", "client_token": "wire-old-1"}
    again = admin.post("/v1/clusters/wire/jobs", json=new)
    assert again.status_code == 201 and again.json()["id"] == r.json()["id"]
    assert _deprecated(again) == {}


def test_a_body_in_the_new_spelling_has_no_deprecation_header(admin: httpx.Client, pod: dict[str, Any]) -> None:
    r = admin.post("/v1/clusters/wire/jobs", json={"model": "debug", "chips": 2, "steps": 5,
                                                   "topology_preferred": "pod", "on_pod_loss": "requeue",
                                                   "client_token": "wire-new-1"})
    assert r.status_code == 201, r.text
    assert _deprecated(r) == {}


def test_given_both_spellings_the_new_ones_value_stands(admin: httpx.Client, pod: dict[str, Any]) -> None:
    # Never a 400: the schema allows both (a generated client may send both), so the server takes them.
    r = admin.post("/v1/clusters/wire/jobs", json={"model": "debug", "chips": 2, "steps": 5,
                                                   "gradCompression": "lossless", "grad_compression": "bf16"})
    assert r.status_code == 201 and r.json()["grad_compression"] == "bf16", r.text
    assert _deprecated(r) == {"gradCompression": "grad_compression"}
    # A null is an absent field: beside the other spelling's value it is no second value.
    ok = admin.post("/v1/clusters/wire/jobs", json={"model": "debug", "chips": 2, "steps": 5,
                                                    "grad_compression": None, "gradCompression": "bf16"})
    assert ok.status_code == 201 and ok.json()["grad_compression"] == "bf16", ok.text
    q = admin.get("/v1/jobs", params={"cluster": "wire", "maxResults": 1, "max_results": 2})
    assert q.status_code == 200 and len(q.json()["jobs"]) == 2, q.text
    assert _deprecated(q) == {"maxResults": "max_results"}


def test_old_query_names_work_and_pages_carry_both_token_spellings(admin: httpx.Client, pod: dict[str, Any]) -> None:
    for i in range(3):
        assert admin.post("/v1/clusters/wire/jobs", json={"model": "debug", "chips": 1, "steps": 5,
                                                          "name": f"page-{i}"}).status_code == 201
    first = admin.get("/v1/jobs", params={"cluster": "wire", "max_results": 1})
    assert first.status_code == 200 and _deprecated(first) == {}
    token = first.json()["next_token"]
    assert token is not None and first.json()["nextToken"] == token  # the old spelling, for one release
    # A client of the last release pages with maxResults/nextToken: same page, told the new names.
    old = admin.get("/v1/jobs", params={"cluster": "wire", "maxResults": 1, "nextToken": token})
    new = admin.get("/v1/jobs", params={"cluster": "wire", "max_results": 1, "next_token": token})
    assert old.status_code == new.status_code == 200
    assert [j["id"] for j in old.json()["jobs"]] == [j["id"] for j in new.json()["jobs"]] != \
        [j["id"] for j in first.json()["jobs"]]
    assert _deprecated(old) == {"maxResults": "max_results", "nextToken": "next_token"}
    assert _deprecated(new) == {}


def test_a_problem_names_the_field_in_the_new_spelling(admin: httpx.Client, pod: dict[str, Any]) -> None:
    body = {"model": "debug", "chips": 2, "clientToken": "wire-conflict"}
    assert admin.post("/v1/clusters/wire/jobs", json=body).status_code == 201
    r = admin.post("/v1/clusters/wire/jobs", json={**body, "chips": 3})
    assert r.status_code == 409 and r.json()["field"] == "client_token", r.text
    assert _deprecated(r) == {"clientToken": "client_token"}


def test_the_schema_uses_one_case_and_marks_the_old_spellings(admin: httpx.Client) -> None:
    doc = admin.get("/openapi.json").json()
    seen = set()
    for name, schema in doc["components"]["schemas"].items():
        for prop, spec in schema.get("properties", {}).items():
            if prop in RENAMED:  # an old spelling: deprecated, beside its new one, with its constraints
                new = schema["properties"][RENAMED[prop]]
                assert spec["deprecated"] is True and RENAMED[prop] in spec["description"], (name, prop)
                assert {k: v for k, v in spec.items() if k not in ("deprecated", "description", "title")} == \
                    {k: v for k, v in new.items() if k not in ("description", "title")}, (name, prop)
                seen.add(prop)
            elif name not in IAM_DOCUMENTS:
                assert prop == prop.lower(), f"{name}.{prop} is not snake_case"
    params = {p["name"] for item in doc["paths"].values() for op in item.values() if isinstance(op, dict)
              for p in op.get("parameters", [])}
    assert all(p == p.lower() for p in params), sorted(p for p in params if p != p.lower())
    body_names = set(RENAMED) - {"maxResults", "allowMissingDigests"}  # those two were only query parameters
    assert seen == body_names, sorted(body_names - seen)
