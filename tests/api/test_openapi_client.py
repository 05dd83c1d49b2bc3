"""The OpenAPI document is usable by others: a typed client generated from /openapi.json
(openapi-python-client, into a temporary directory; never committed) compiles, imports and
round-trips the main operations against a live server, and the hand-written SDK agrees."""

from __future__ import annotations

import compileall
import importlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from podfleet.sdk import PodfleetClient
from tests.api.conftest import Live

PACKAGE = "podfleet_typed"
MAIN_OPERATIONS = ("clusters/create_trainium_cluster", "clusters/describe_cluster", "clusters/describe_cluster_hardware",
                   "jobs/submit_training_job", "jobs/describe_training_job", "jobs/stop_training_job",
                   "tokens/create_access_token", "tokens/list_access_tokens", "tokens/revoke_access_token")


@pytest.fixture(scope="module")
def typed(live: Live, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The generated package, imported from a temporary directory."""
    tmp = tmp_path_factory.mktemp("typed-client")
    doc = tmp / "openapi.json"
    doc.write_text(httpx.get(f"{live.url}/openapi.json", timeout=60).text)
    config = tmp / "config.yaml"
    config.write_text(f"project_name_override: podfleet-typed\npackage_name_override: {PACKAGE}\npost_hooks: []\n")
    out = tmp / "src" / PACKAGE
    gen = subprocess.run([str(Path(sys.executable).with_name("openapi-python-client")), "generate", "--path", str(doc),
                          "--config", str(config), "--meta", "none", "--output-path", str(out)],
                         capture_output=True, text=True, timeout=180)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    for op in MAIN_OPERATIONS:
        assert (out / "api" / f"{op}.py").is_file(), f"no {op} in the generated client:\n{gen.stdout}"
    assert compileall.compile_dir(str(out), quiet=1), "the generated client does not compile"
    sys.path.insert(0, str(out.parent))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out.parent))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _mod(typed: Any, name: str) -> Any:
    return importlib.import_module(f"{typed.__name__}.{name}")


def test_generated_client_round_trips_the_main_operations(typed: Any, live: Live) -> None:
    api = "api"
    models = _mod(typed, "models")
    client = typed.AuthenticatedClient(base_url=live.url, token=live.tokens["admin"], timeout=httpx.Timeout(30))

    # CreateTrainiumCluster -> DescribeCluster (until deployed) -> DescribeClusterHardware
    body = models.CreateClusterRequest(name="typed-pod", type_=models.CreateClusterRequestTypeType0.TRN2_NODE,
                                       spares=1, client_token="typed-1")
    created = _mod(typed, f"{api}.clusters.create_trainium_cluster").sync_detailed(client=client, body=body)
    assert created.status_code == 201, created.content
    cluster = created.parsed
    assert isinstance(cluster, models.Cluster) and cluster.id.startswith("cl-") and cluster.name == "typed-pod"
    describe = _mod(typed, f"{api}.clusters.describe_cluster")
    deadline = time.monotonic() + 60
    while (view := describe.sync(cluster.id, client=client)).state != "active":
        assert isinstance(view, models.Cluster) and view.state == "deploying", view
        assert time.monotonic() < deadline, "cluster never became active"
        time.sleep(0.2)
    hardware = _mod(typed, f"{api}.clusters.describe_cluster_hardware")
    whole = hardware.sync(cluster.id, client=client)
    assert isinstance(whole, models.Hardware) and whole.cluster_id == cluster.id and len(whole.chips) == 16
    one = hardware.sync(cluster.id, client=client, chip=3)
    assert isinstance(one, models.ChipOut) and one.index == 3

    # SubmitTrainingJob -> DescribeTrainingJob -> StopTrainingJob
    job_body = models.SubmitJobRequest(chips=4, model=models.SubmitJobRequestModelType0("llama3-8b"), steps=100_000)
    submitted = _mod(typed, f"{api}.jobs.submit_training_job").sync_detailed(cluster.name, client=client, body=job_body)
    assert submitted.status_code == 201, submitted.content
    job = submitted.parsed
    assert isinstance(job, models.Job) and job.id.startswith("job-") and job.cluster_id == cluster.id
    described = _mod(typed, f"{api}.jobs.describe_training_job").sync(job.id, client=client)
    assert isinstance(described, models.Job) and described.chips == 4 and described.progress.steps == 100_000
    stopped = _mod(typed, f"{api}.jobs.stop_training_job").sync(job.id, client=client)
    assert isinstance(stopped, models.Job) and stopped.state == models.JobState.STOPPED

    # CreateAccessToken -> ListAccessTokens -> RevokeAccessToken; the new token works until revoked
    token_body = models.CreateAccessTokenRequest(name="typed-viewer", role=models.CreateAccessTokenRequestRole.VIEWER)
    token = _mod(typed, f"{api}.tokens.create_access_token").sync(client=client, body=token_body)
    assert isinstance(token, models.AccessToken) and isinstance(token.token, str) and token.role == "viewer"
    listed = _mod(typed, f"{api}.tokens.list_access_tokens").sync(client=client)
    assert isinstance(listed, models.AccessTokenList) and token.id in {t.id for t in listed.tokens}
    viewer = typed.AuthenticatedClient(base_url=live.url, token=token.token)
    assert isinstance(describe.sync(cluster.id, client=viewer), models.Cluster)
    revoked = _mod(typed, f"{api}.tokens.revoke_access_token").sync(token.id, client=client)
    assert isinstance(revoked, models.AccessToken) and revoked.revoked is True
    assert describe.sync_detailed(cluster.id, client=viewer).status_code == 401

    # Errors parse as the document says: problem+json with a stable code.
    missing = describe.sync_detailed("no-such-pod", client=client)
    assert missing.status_code == 404
    assert isinstance(missing.parsed, models.Problem) and missing.parsed.code == "not-found"

    # The hand-written SDK reads the same objects.
    with PodfleetClient(live.url, live.tokens["admin"]) as sdk:
        assert sdk.describe_training_job(job.id)["state"] == "STOPPED"
        assert sdk.describe_cluster_hardware(cluster.id, chip=3)["index"] == 3
