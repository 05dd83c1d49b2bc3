"""Fleet clusters through the API: pods and pods_per_block, a gang across pods with its
topology levels, and DescribeClusterHardware paged, filtered and summarised (issue 28)."""

from __future__ import annotations

import time

import httpx

from tests.api.conftest import Live, wait_active


def _running(c: httpx.Client, job_id: str) -> dict:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        job = c.get(f"/v1/jobs/{job_id}").json()
        if job["state"] != "PENDING":
            return job
        time.sleep(0.05)
    return job


def test_a_fleet_cluster_places_a_gang_across_pods_and_pages_its_hardware(live: Live, admin: httpx.Client) -> None:
    r = admin.post("/v1/clusters", json={"name": "fleet-8", "type": "trn2-ultraserver", "pods": 8,
                                          "pods_per_block": 8, "spares": 0})
    assert r.status_code == 201, r.text
    view = wait_active(admin, "fleet-8")
    assert view["chips"] == 512
    r = admin.post("/v1/clusters/fleet-8/jobs", json={"model": "llama3-8b", "chips": 256, "pods": 8,
                                                       "topology_required": "block", "steps": 100000})
    assert r.status_code == 201, r.text
    job = _running(admin, r.json()["id"])
    assert job["state"] in ("PLACING", "RUNNING"), job
    assert job["allocation"]["pods"] == list(range(8)) and set(job["allocation"]["blocks"]) == {0}
    # A page of pod 3: its 64 chips, in index order, with its links; half of them the job's.
    deadline = time.monotonic() + 10
    while True:
        page = admin.get("/v1/clusters/fleet-8/hardware", params={"pod": 3}).json()
        if sum(1 for c in page["chips"] if c["job"] == job["id"]) == 32 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert [c["index"] for c in page["chips"]] == list(range(192, 256))
    assert sum(1 for c in page["chips"] if c["job"] == job["id"]) == 32
    assert all(192 <= lk["src"] < 256 for lk in page["links"]) and page["next_token"] is None
    # Paging through the job's chips 100 at a time gives each once.
    seen, token = [], None
    while True:
        params = {"job": job["id"], "limit": 100, **({"next_token": token} if token else {})}
        p = admin.get("/v1/clusters/fleet-8/hardware", params=params).json()
        seen += [c["index"] for c in p["chips"]]
        token = p["next_token"]
        if not token:
            break
    assert sorted(seen) == sorted(job["allocation"]["chips"]) and len(seen) == 256
    s = admin.get("/v1/clusters/fleet-8/hardware", params={"summary": "true"}).json()
    assert [p["busy"] for p in s["pods"]] == [32] * 8 and s["blocks"][0]["busy"] == 256
    assert s["blocks"][0]["healthy"] == 512 and s["pods"][3]["jobs"] == [job["id"]]
    bad = admin.get("/v1/clusters/fleet-8/hardware", params={"pod": 9})
    assert bad.status_code == 404 and "valid pods are 0-7" in bad.text, bad.text
    # A well-formed token of another query (pod 3 holds chips 192-255): a 422 naming the range.
    bad = admin.get("/v1/clusters/fleet-8/hardware", params={"pod": 3, "next_token": "100"})
    assert bad.status_code == 422 and "chips 192-255" in bad.text and bad.json()["field"] == "next_token", bad.text
    # Required block on a fleet of one 8-pod block: 1,024 chips can never fit.
    r = admin.post("/v1/clusters/fleet-8/jobs", json={"model": "llama3-8b", "chips": 1024,
                                                       "topology_required": "block"})
    assert r.status_code in (201, 400, 409, 422), r.text
    if r.status_code == 201:
        assert _running(admin, r.json()["id"])["state"] == "FAILED"


def test_metrics_roll_a_large_fleet_up_per_pod_unless_per_chip_is_asked() -> None:
    from podfleet.api.chip_metrics import FabricCollector
    from tests.control.conftest import active_cluster, make_plane

    plane = make_plane()
    cl = active_cluster(plane, "big", pods=17, pods_per_block=4)
    job = plane.jobs.submit(cl["id"], {"model": "llama3-8b", "chips": 128, "steps": 1000}, actor="test")
    plane.tl.run(plane.tl.now + 5)
    fams = {m.name: m for m in FabricCollector(plane).collect()}
    busy = {s.labels["pod"]: s.value for s in fams["podfleet_fleet_pod_chips_busy"].samples}
    assert len(busy) == 17 and sum(busy.values()) == 128, busy
    assert {s.labels["block"] for s in fams["podfleet_fleet_pod_chips"].samples} == {"0", "1", "2", "3", "4"}
    assert not fams["podfleet_chip_up"].samples  # no series per chip for this cluster
    per_chip = {m.name: m for m in FabricCollector(plane, per_chip=True).collect()}
    assert len(per_chip["podfleet_chip_up"].samples) == 17 * 64
    assert plane.jobs.describe(job["id"])["state"] == "RUNNING"


def test_metrics_roll_up_one_pod_clusters_when_the_server_holds_many_pods() -> None:
    # 17 one-pod clusters (1,088 chips) on one server: a pod row each, no series per chip.
    from podfleet.api.chip_metrics import ROLLUP_MIN_PODS, FabricCollector
    from tests.control.conftest import make_plane

    plane = make_plane()
    for k in range(ROLLUP_MIN_PODS + 1):
        plane.create_cluster({"name": f"pod-{k}", "type": "trn2-ultraserver"}, actor="test")
    plane.tl.run(plane.tl.now + 30)
    fams = {m.name: m for m in FabricCollector(plane).collect()}
    rows = fams["podfleet_fleet_pod_chips"].samples
    assert len(rows) == ROLLUP_MIN_PODS + 1 and {(s.labels["pod"], s.labels["block"]) for s in rows} == {("0", "0")}
    assert {s.value for s in rows} == {64.0} and not fams["podfleet_chip_up"].samples
    assert len({m.name: m for m in FabricCollector(plane, per_chip=True).collect()}["podfleet_chip_up"].samples) \
        == (ROLLUP_MIN_PODS + 1) * 64
    plane.delete_cluster("pod-0", actor="test")  # 16 pods: at the threshold, per chip again
    fams = {m.name: m for m in FabricCollector(plane).collect()}
    assert len(fams["podfleet_chip_up"].samples) == ROLLUP_MIN_PODS * 64 and not fams["podfleet_fleet_pod_chips"].samples


def test_chip_health_rolls_up_per_pod_with_the_chips(tmp_path) -> None:
    from podfleet import compose
    from podfleet.api.chip_metrics import rolled_up_ids
    from podfleet.engine.timeline import Timeline
    from podfleet.health.metrics import HealthCollector
    from podfleet.store.memory import MemoryStore

    built = compose.build(MemoryStore(), Timeline(seed=2), workdir=str(tmp_path))
    plane = built.plane
    plane.create_cluster({"name": "big", "type": "trn2-ultraserver", "pods": 17, "pods_per_block": 4}, actor="t")
    plane.create_cluster({"name": "loc", "fabric": "local", "chips": 2}, actor="t")
    plane.tl.run(plane.tl.now + 30)
    try:
        for per_chip in (False, True):
            fams = {m.name: m for m in HealthCollector(plane, built.health, built.recovery,
                                                       rolled_up=lambda rts, pc=per_chip: rolled_up_ids(rts, pc)).collect()}
            chips = {s.labels["cluster"] for s in fams["podfleet_chip_health"].samples}
            pods = fams["podfleet_fleet_pod_health_max"].samples
            if per_chip:
                assert chips == {"big", "loc"} and not pods
            else:  # the fleet a row per pod (block by podsPerBlock), the worker slots per chip
                assert chips == {"loc"} and len(pods) == 17
                assert {s.labels["block"] for s in pods} == {"0", "1", "2", "3", "4"}
    finally:
        for name in ("big", "loc"):
            plane.delete_cluster(name, actor="t")


def test_on_pod_loss_and_the_pod_loss_fault_through_the_api(live: Live, admin: httpx.Client) -> None:
    r = admin.post("/v1/clusters", json={"name": "fleet-loss", "type": "trn2-ultraserver", "pods": 2,
                                          "pods_per_block": 2, "spares": 0})
    assert r.status_code == 201, r.text
    wait_active(admin, "fleet-loss")
    r = admin.post("/v1/clusters/fleet-loss/jobs", json={"model": "llama3-8b", "chips": 128, "on_pod_loss": "migrate"})
    assert r.status_code == 400 and "on_pod_loss" in r.text and "shrink" in r.text, r.text
    r = admin.post("/v1/clusters/fleet-loss/jobs", json={"model": "llama3-8b", "chips": 128, "on_pod_loss": "shrink",
                                                          "steps": 100000})
    assert r.status_code == 201, r.text
    job = _running(admin, r.json()["id"])
    assert job["on_pod_loss"] == "shrink", job
    deadline = time.monotonic() + 20
    while admin.get(f"/v1/jobs/{job['id']}").json()["state"] != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    r = admin.post("/v1/clusters/fleet-loss/faults", json={"kind": "pod-loss", "pod": 0, "chip": 1})
    assert r.status_code in (400, 422) and "chip" in r.text, r.text
    r = admin.post("/v1/clusters/fleet-loss/faults", json={"kind": "pod-loss", "pod": 7})
    assert r.status_code in (400, 422) and "pod must be 0-1" in r.text, r.text
    r = admin.post("/v1/clusters/fleet-loss/faults", json={"kind": "pod-loss", "pod": 0})
    assert r.status_code == 202, r.text
    assert r.json()["jobs"] == {job["id"]: "shrink"}, r.json()
    after = admin.get(f"/v1/jobs/{job['id']}").json()
    assert after["allocation"]["pods"] == [1] and len(after["allocation"]["chips"]) == 64, after["allocation"]
