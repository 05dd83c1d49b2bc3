"""``podfleet up --demo``: a pod that moves, for a first look (``make run``).

On a simulated 64-chip pod (2 spares), paced ``DEMO_SPEED`` times the wall clock:

* a llama3-8b job on 32 chips, 500 steps, a checkpoint every 25 (about one step a second);
* a second 32-chip job, queued behind it (62 placeable chips: both cannot run at once);
* a chip failure a minute in (wall clock) on a chip of the first job: recovery moves its
  rank to the free chip nearest its ring neighbours (a spare when one is as near).

Everything goes through the plane's commands on the engine thread (audited, as system).
A restart on the same store does not submit the jobs again.
"""

from __future__ import annotations

import threading
import time

from podfleet.control.plane import ControlPlane

DEMO_SPEED = 20.0
DEMO_DB = "~/.podfleet/demo.db"
FAULT_AFTER_WALL_S = 60.0
JOBS = (
    {"name": "llama3-8b-demo", "model": "llama3-8b", "chips": 32, "steps": 500, "checkpoint_interval": 25,
     "priority": 60},
    {"name": "llama3-8b-queued", "model": "llama3-8b", "chips": 32, "steps": 500, "checkpoint_interval": 25,
     "priority": 40},
)


def start_demo(plane: ControlPlane, cluster: str, *, wait_s: float = 120.0) -> threading.Thread:
    """Set the demo up from a helper thread once ``cluster`` is active."""
    t = threading.Thread(target=_setup, args=(plane, cluster, wait_s), name="podfleet-demo", daemon=True)
    t.start()
    return t


def _setup(plane: ControlPlane, cluster: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        cid = plane.names.get(cluster)
        if cid is not None and plane.describe_cluster(cid)["state"] == "active":
            break
        time.sleep(0.2)
    else:
        return  # never came up: the cluster's own log says why
    plane.call_sync(setup_jobs, plane, cluster)


def setup_jobs(plane: ControlPlane, cluster: str) -> list[str]:
    """Engine thread: submit the demo jobs and schedule the fault; the new job ids."""
    rt = plane.resolve(cluster)
    if plane.jobs.list(cluster_id=rt.id)[0]:
        return []  # a restart on the demo's store: it is already set up
    ids = [str(plane.jobs.submit(cluster, dict(body), actor="system:demo")["id"]) for body in JOBS]
    speed = plane.tl.speed or DEMO_SPEED
    first = ids[0]

    def fault() -> None:
        chips = plane.jobs.describe(first).get("allocation", {}).get("chips") or []
        if chips and cluster in plane.names:
            plane.inject_fault(cluster, "chip-failure", chip=int(chips[len(chips) // 2]), actor="system:demo")

    plane.tl.call_at(FAULT_AFTER_WALL_S * speed, fault)
    return ids
