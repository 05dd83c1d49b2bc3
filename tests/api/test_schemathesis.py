"""Property-based requests from /openapi.json (schemathesis): no input makes a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from podfleet.api.main import create_app
from podfleet.api.server import bootstrap_admin
from podfleet.control import ControlPlane
from podfleet.engine.timeline import Timeline
from podfleet.store.memory import MemoryStore
from tests.api.conftest import ADMIN_TOKEN

_plane = ControlPlane(MemoryStore(), Timeline(seed=5, speed=50.0))
bootstrap_admin(_plane, ADMIN_TOKEN)
_app = create_app(_plane)
schema = schemathesis.openapi.from_asgi("/openapi.json", _app)


@pytest.fixture(scope="module", autouse=True)
def running_plane():
    # Fuzzed creates stay on the twin: a Ray cluster per example would be minutes.
    mp = pytest.MonkeyPatch()
    mp.setattr("podfleet.fabric.factory.available_fabrics", lambda: ["sim"])
    _plane.start()
    _plane.call_sync(_plane.create_cluster, {"name": "fuzz", "type": "trn2-node"})
    yield
    _plane.stop()
    mp.undo()


@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    if case.query and case.query.get("follow") in (True, "true", "True", "1"):
        case.query["follow"] = "false"  # a followed stream of a live job never ends by itself
    case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                           checks=[not_a_server_error])
