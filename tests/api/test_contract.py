"""What the OpenAPI contract promises, case by case (the schemathesis run finds these by
search; here each has a name): 400 only for a request that breaks the schema, indices
past the cluster's size are 404s naming its range, 405 lists every method of the path,
errors are documented as problem+json, and links lead to real identifiers."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from podfleet.api.openapi import LINKS
from podfleet.api.wirenames import RENAMED
from tests.api.conftest import wait_active


@pytest.fixture(scope="module")
def pod(admin: httpx.Client) -> dict[str, Any]:
    r = admin.post("/v1/clusters", json={"name": "contract", "type": "trn2-node"})
    assert r.status_code == 201, r.text
    return wait_active(admin, "contract")


@pytest.fixture(scope="module")
def doc(admin: httpx.Client) -> dict[str, Any]:
    return admin.get("/openapi.json").json()


@pytest.mark.parametrize("method,path,allow", [
    ("OPTIONS", "/v1/clusters", "GET, POST"),
    ("PUT", "/v1/clusters/contract", "DELETE, GET"),
    ("PATCH", "/v1/tokens", "GET, POST"),
    ("GET", "/v1/jobs/job-x/stop", "POST"),
])
def test_405_allow_names_every_method_of_the_path(admin: httpx.Client, method: str, path: str, allow: str) -> None:
    r = admin.request(method, path)
    assert r.status_code == 405 and r.headers["allow"] == allow
    assert r.json()["code"] == "method-not-allowed" and r.json()["allowed"] == allow.split(", ")


def test_a_chip_past_the_cluster_is_a_404_naming_its_range(admin: httpx.Client, pod: dict[str, Any]) -> None:
    r = admin.get("/v1/clusters/contract/hardware", params={"chip": 16})
    assert r.status_code == 404 and r.json()["allowed"] == "0-15"
    assert "cluster contract has chips 0-15" in r.json()["detail"]
    r = admin.post("/v1/clusters/contract/faults", json={"kind": "chip-failure", "chip": 40})
    assert r.status_code == 404 and "contract has chips 0-15" in r.json()["detail"]
    # Past the largest cluster there is (a 1,024-pod fleet): the schema's own bound, a 400.
    assert admin.get("/v1/clusters/contract/hardware", params={"chip": 65536}).status_code == 400
    one = admin.get("/v1/clusters/contract/hardware", params={"chip": 15}).json()
    assert one["index"] == 15 and "cluster_id" not in one  # the document's anyOf: Hardware or ChipOut


@pytest.mark.parametrize("body,status", [
    ({"name": "c1", "spares": True}, 400),       # a boolean is not an integer
    ({"name": "c1", "encryption": "yes"}, 400),  # nor a string a boolean
    ({"name": "c1", "storage_nodes": "2"}, 400),
    ({"name": "c1", "spares": 1.5}, 400),
    ({"name": "c1", "type": "trn2-node", "chips": 64}, 422),  # valid fields, an impossible combination
    ({"name": "c1", "fabric": "sim", "ray_address": "auto"}, 422),
    ({"name": "c1", "fabric": "sim", "rayAddress": "auto"}, 422),  # the deprecated spelling, held to the same
])
def test_400_means_the_schema_was_broken(admin: httpx.Client, body: dict[str, Any], status: int) -> None:
    r = admin.post("/v1/clusters", json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")


def test_integral_numbers_are_integers(admin: httpx.Client) -> None:
    r = admin.post("/v1/clusters", json={"name": "c-float", "type": "trn2-node", "spares": 1.0})
    assert r.status_code == 201 and len(r.json()["spares"]) == 1


def test_errors_are_documented_as_problem_json(doc: dict[str, Any]) -> None:
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if status.isdigit() and int(status) >= 400:
                    assert set(response["content"]) == {"application/problem+json"}, (method, path, status)
                    assert response["content"]["application/problem+json"]["schema"] == {
                        "$ref": "#/components/schemas/Problem"}


def test_links_point_at_operations_and_parameters_that_exist(doc: dict[str, Any]) -> None:
    ops = {op["operationId"]: op for item in doc["paths"].values() for op in item.values()}
    found = 0
    for (source, status), targets in LINKS.items():
        links = ops[source]["responses"][status]["links"]
        for target, parameters in targets.items():
            if target not in ops:
                continue
            found += 1
            link = links[target]
            names = {p["name"] for p in ops[target].get("parameters", [])}
            assert link == {"operationId": target, "parameters": parameters}, (source, target)
            assert set(parameters) <= names, (source, target)
    assert found >= 15
    assert doc["paths"]["/v1/tokens"]["post"]["responses"]["201"]["links"]["RevokeAccessToken"]["parameters"] == {
        "token_id": "$response.body#/id"}


def test_bounds_the_server_enforces_are_in_the_schema(doc: dict[str, Any]) -> None:
    params = {p["name"]: p["schema"] for p in doc["paths"]["/v1/clusters/{cluster}/telemetry"]["get"]["parameters"]}
    target = params["target"]["anyOf"][0]
    assert target["minimum"] == 0 and target["maximum"] == 6 * 65536 - 1  # links of the largest fleet
    assert "temperature_c" in params["metric"]["enum"]
    cluster = params["cluster"]
    assert cluster["pattern"] == "^[a-z0-9][a-z0-9-]*$" and cluster["maxLength"] == 63
    schemas = doc["components"]["schemas"]
    assert "llama3-8b" in schemas["PlanRequest"]["properties"]["model"]["enum"]
    assert schemas["FirmwareUpdateRequest"]["properties"]["version"]["enum"] == ["2.20.0", "2.21.0", "2.22.0",
                                                                                  "2.23.0"]


def _validator(doc: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    """A JSON Schema validator for one request body of the document (OpenAPI 3.1 schemas are
    JSON Schema 2020-12), its $refs resolved against the document."""
    registry: Registry[Any] = Registry().with_resource("urn:doc", Resource(contents=doc, specification=DRAFT202012))
    return jsonschema.Draft202012Validator({"$ref": f"urn:doc#/components/schemas/{name}"}, registry=registry)


# Cross-field rules the engine checks, stated by the schema too (issue 30, item 9): each
# body here is refused by the schema exactly when the server refuses it with a 422.
@pytest.mark.parametrize("body,valid", [
    ({"chips": 1}, False),                                   # no model, model_dims nor entrypoint
    ({"model": None, "chips": 1}, False),
    ({"model": "debug", "chips": 1}, True),
    ({"model_dims": {"layers": 2, "hidden": 64, "heads": 2, "vocab": 100}, "chips": 1}, True),
    ({"model": "custom", "chips": 2}, False),                # custom is the model_dims model
    ({"model": "custom", "model_dims": {"layers": 2, "hidden": 64, "heads": 2, "vocab": 100}, "chips": 1}, True),
])
def test_a_job_needs_a_model_in_the_schema(doc: dict[str, Any], body: dict[str, Any], valid: bool) -> None:
    assert _validator(doc, "SubmitJobRequest").is_valid(body) is valid


@pytest.mark.parametrize("body,valid", [
    ({"name": "c", "fabric": "sim", "ray_address": "auto"}, False),
    ({"name": "c", "fabric": "ray", "ray_address": "auto"}, True),
    ({"name": "c", "ray_address": "auto"}, True),             # fabric implied: ray
    # a neuron cluster across the Ray cluster's nodes: fabric neuron, named or implied by the neuron tools
    ({"name": "c", "ray_address": "auto", "neuron_ls": "neuron-ls --json-output"}, True),
    ({"name": "c", "fabric": "neuron", "ray_address": "auto"}, True),
    ({"name": "c", "fabric": "ray", "ray_address": "auto", "neuron_ls": "neuron-ls --json-output"}, False),
    ({"name": "c", "fabric": "local", "neuron_monitor": "neuron-monitor"}, False),
    ({"name": "c", "neuron_monitor": "neuron-monitor"}, True),
    # the deprecated spellings (accepted for one release) under the same rules
    ({"name": "c", "fabric": "sim", "rayAddress": "auto"}, False),
    ({"name": "c", "rayAddress": "auto"}, True),
    ({"name": "c", "rayAddress": "auto", "neuronLs": "neuron-ls --json-output"}, True),
    ({"name": "c", "fabric": "ray", "rayAddress": "auto", "neuronLs": "neuron-ls --json-output"}, False),
    ({"name": "c", "fabric": "local", "neuronMonitor": "neuron-monitor"}, False),
    ({"name": "c", "rayAddress": None, "ray_address": "auto"}, True),     # a null is an absent field
    ({"name": "c", "quotas": {"team-a": 8}}, True),
    ({"name": "c", "quotas": {"Team A": 8}}, False),          # every key is a team name (propertyNames)
    ({"name": "c", "quotas": {"team-a": -1}}, False),
])
def test_fabric_options_name_their_fabric_in_the_schema(doc: dict[str, Any], body: dict[str, Any],
                                                        valid: bool) -> None:
    assert _validator(doc, "CreateClusterRequest").is_valid(body) is valid


@pytest.mark.parametrize("body,valid", [
    ({"kind": "link-down", "link": "0-1"}, True),
    ({"kind": "link-down", "chip": 3}, False),
    ({"kind": "link-down", "link": "0-1", "chip": 3}, False),
    ({"kind": "chip-failure", "chip": 3}, True),
    ({"kind": "chip-failure", "link": "0-1"}, False),
    ({"kind": "kill-worker", "rank": 0}, True),
    ({"kind": "kill-worker"}, False),                        # which rank
    ({"kind": "kill-worker", "rank": 0, "chip": 3}, False),
    ({"kind": "slow-worker", "rank": 0, "factor": 2.0}, True),
    ({"kind": "slow-worker", "rank": 0}, False),             # how much slower
    ({"kind": "chip-failure", "chip": 3, "factor": 2.0}, False),  # a worker fault's field
    ({"kind": "link-down", "link": "0-1", "rank": 1}, False),
    ({"kind": "chip-failure", "chip": 3, "job_id": "job-x"}, False),
    ({"kind": "chip-failure", "chip": 3, "jobId": "job-x"}, False),  # the deprecated spelling too
])
def test_fault_targets_follow_the_kind_in_the_schema(admin: httpx.Client, pod: dict[str, Any],
                                                     doc: dict[str, Any], body: dict[str, Any], valid: bool) -> None:
    assert _validator(doc, "InjectFaultRequest").is_valid(body) is valid
    if not valid:  # and the server agrees: what the schema refuses, the engine refuses too
        r = admin.post("/v1/clusters/contract/faults", json=body)
        assert r.status_code == 422, r.text
        if body["kind"] not in ("kill-worker", "slow-worker"):  # (those need worker processes first)
            # named: the target it lacks, or the field that does not belong (in today's spelling)
            assert r.json()["field"] in ({"chip", "link"} | {RENAMED.get(k, k) for k in body}) - {"kind"}, r.text


def test_an_implied_fabric_is_the_one_its_options_name(admin: httpx.Client) -> None:
    # ray_address without a fabric means ray: refused here only because no Ray address is allowed.
    r = admin.post("/v1/clusters", json={"name": "implied", "chips": 1, "ray_address": "10.0.0.9:6379"})
    assert r.status_code == 403 and "ray_address" in r.text, r.text


def test_policy_documents_and_code_uploads_have_schemas(doc: dict[str, Any]) -> None:
    put = doc["paths"]["/v1/users/{user}/policies/{policy}"]["put"]["requestBody"]["content"]["application/json"]
    body = put["schema"]
    ref = next(s["$ref"] for s in body.get("anyOf", [body]) if "$ref" in s)
    assert ref.endswith("/PolicyDocument")
    assert "Statement" in doc["components"]["schemas"]["PolicyDocument"]["required"]
    code = doc["paths"]["/v1/code"]["post"]["requestBody"]["content"]
    assert code["application/octet-stream"]["schema"] == {"type": "string", "format": "binary"}
