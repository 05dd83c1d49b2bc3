"""GetPresets: the model presets and state names come from the server's own tables, so a
client (the console) offers what the server accepts, not a copy that drifts."""

from __future__ import annotations

import httpx

from podfleet.control.lifecycle import TERMINAL, JobState
from podfleet.fabric.base import ChipState
from podfleet.perf.models import MODELS, TRAINER_PRESETS
from tests.api.conftest import Live


def test_presets_list_every_model_and_state(live: Live) -> None:
    with live.client("viewer") as c:  # a viewer may read them: the job form's choices
        r = c.get("/v1/presets")
    assert r.status_code == 200, r.text
    body = r.json()
    assert [m["name"] for m in body["models"]] == list(MODELS)
    llama = next(m for m in body["models"] if m["name"] == "llama3-70b")
    assert llama["params"] == MODELS["llama3-70b"].params and llama["layers"] == 80 and not llama["trainer"]
    assert {m["name"] for m in body["models"] if m["trainer"]} == set(TRAINER_PRESETS)
    assert body["job_states"] == [s.value for s in JobState]
    assert set(body["terminal_job_states"]) == {s.value for s in TERMINAL}
    assert body["chip_states"] == [s.value for s in ChipState]


def test_every_preset_is_one_a_plan_accepts(admin: httpx.Client) -> None:
    names = [m["name"] for m in admin.get("/v1/presets").json()["models"]]
    doc = admin.get("/openapi.json").json()
    assert doc["components"]["schemas"]["PlanRequest"]["properties"]["model"]["enum"] == sorted(names)
    assert admin.post("/v1/plan", json={"model": names[-1], "chips": 64}).status_code == 200
