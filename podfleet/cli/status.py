"""``podfleet status``: one line per cluster, like Slurm's ``sinfo -s``.

Each line: the cluster's state, its chips by state (the fabric's: healthy, degraded,
failed, isolated, updating) and by the operator's mode (cordoned, draining), its
spares, its jobs running and queued, and its firing alerts. Built from the reads the
other commands use (ListClusters, DescribeClusterHardware, ListTrainingJobs,
ListAlerts), so it shows exactly what they show.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from podfleet.cli.output import OutputFormat, OutputOpt, emit
from podfleet.cli.remote import remote_command
from podfleet.sdk import PodfleetClient

COLUMNS = ["cluster", "state", "fabric", "chips", "chip_states", "cordoned", "draining", "spares",
           "jobs_running", "jobs_queued", "alerts_firing"]
QUEUED = ("PENDING", "PLACING")
RUNNING = ("RUNNING", "CHECKPOINTING", "RECOVERING")


def summary(c: PodfleetClient, cl: dict[str, Any]) -> dict[str, Any]:
    """One cluster's line (exact counts; JSON keeps the per-state counts as an object)."""
    states: Counter[str] = Counter()
    if cl.get("state") == "active":
        hw = c.describe_cluster_hardware(cl["id"])
        states.update(ch["state"] for ch in hw["chips"])
    jobs: Counter[str] = Counter()
    nxt = None
    while True:
        page = c.list_training_jobs(cluster=cl["id"], next_token=nxt)
        jobs.update(j["state"] for j in page["jobs"])
        nxt = page.get("next_token")
        if not nxt:
            break
    firing = c.list_alerts(cl["id"], "firing")["alerts"] if cl.get("state") == "active" else []
    return {
        "cluster": cl["name"], "id": cl["id"], "state": cl["state"], "fabric": cl.get("fabric"),
        "chips": cl.get("chips"), "chip_states": dict(sorted(states.items())),
        "cordoned": len(cl.get("cordoned") or []), "draining": len(cl.get("draining") or []),
        "spares": len(cl.get("spares") or []),
        "jobs_running": sum(jobs[s] for s in RUNNING), "jobs_queued": sum(jobs[s] for s in QUEUED),
        "alerts_firing": len(firing),
        "alerts_critical": sum(1 for a in firing if a.get("severity") == "critical"),
    }


def _row(s: dict[str, Any]) -> dict[str, Any]:
    alerts = f"{s['alerts_firing']} ({s['alerts_critical']} critical)" if s["alerts_critical"] else s["alerts_firing"]
    # "healthy 62 / failed 1 / isolated 1": the counts a person reads at a glance.
    chip_states = " / ".join(f"{k} {v}" for k, v in s["chip_states"].items()) or "-"
    return {**s, "chip_states": chip_states, "alerts_firing": alerts}


@remote_command
def status(c: PodfleetClient, output: OutputFormat = OutputOpt) -> None:
    """One line per cluster: chips by state, jobs running and queued, firing alerts."""
    lines = [summary(c, cl.to_dict()) for cl in c.iter_clusters()]
    if output == OutputFormat.json:
        emit(lines, output)
        return
    emit([_row(s) for s in lines], output, columns=COLUMNS)

