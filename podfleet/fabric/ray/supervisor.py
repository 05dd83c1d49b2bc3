"""Gangs that outlive the control plane: detached, named actors in a namespace per cluster.

A driver's actors and placement groups die with it; a detached one lives until it is
killed. So every gang's rank actors and placement group are detached and named in the
cluster's namespace (``podfleet-<cluster id>``), and a ``GangSupervisor`` actor per job,
detached as well, holds the gang's record: its WorkerGroupSpec, strategy, directories,
each rank's chip, actor name, worker config and where it runs, and its placement group.
Each rank's actor keeps its own journal (``actor._BufferReporter``: the reports, and its
result once it ended, that the plane has not acknowledged). A plane that starts reads
the supervisors (``find``), takes back each gang from its record and journals
(``reattach.py``), and kills what no job claimed (``discard``).

Names: ``<job id>/gang/<launch>`` for the supervisor and ``<job id>/rank<r>/<launch>``
for a rank, ``launch`` a fresh token per start of the gang, so a relaunch never waits for
the old gang's names to be released.
"""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from typing import Any

NAMESPACE_PREFIX = "podfleet-"
GANG = "gang"
LOOKUP_TIMEOUT_S = 10.0


def namespace_for(cluster_id: str) -> str:
    return f"{NAMESPACE_PREFIX}{cluster_id}"


def launch_token() -> str:
    return secrets.token_hex(4)


def supervisor_name(job_id: str, launch: str) -> str:
    return f"{job_id}/{GANG}/{launch}"


def rank_name(job_id: str, rank: int, launch: str) -> str:
    return f"{job_id}/rank{rank}/{launch}"


@dataclass(frozen=True)
class Named:
    """A podfleet actor found in a cluster's namespace."""

    name: str
    job_id: str
    role: str  # GANG or rank<r>
    launch: str


def parse(name: str) -> Named | None:
    parts = name.split("/")
    if len(parts) != 3 or not parts[0] or not parts[2]:
        return None
    return Named(name, parts[0], parts[1], parts[2])


class GangSupervisor:
    """The detached record of one gang (plain Python; wrapped with ``ray.remote``). It
    runs no job code and holds no secret: worker configs name the key file, never a key."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def state(self) -> dict[str, Any]:
        return self.record

    def update(self, fields: dict[str, Any]) -> None:
        self.record.update(fields)

    def moved(self, entry: dict[str, Any], pg: Any) -> None:
        """A rank moved (``rankmove.py``): its new actor, chip, config and (a ``pack`` gang)
        its own placement group, and the placement group it was given when it left the
        gang's (None: its own bundle, or its own group)."""
        self.record["ranks"] = [entry if int(x["rank"]) == int(entry["rank"]) else x for x in self.record["ranks"]]
        if pg is not None:
            self.record.setdefault("pgs", []).append(pg)


def named_actors(ray: Any, namespace: str) -> list[Named]:
    """Every podfleet actor alive in ``namespace`` (dead detached actors are not listed)."""
    out: list[Named] = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if isinstance(entry, dict) and entry.get("namespace") == namespace:
            found = parse(str(entry.get("name", "")))
            if found is not None:
                out.append(found)
    return out


def find(ray: Any, namespace: str) -> dict[str, Named]:
    """Each job's supervisor in ``namespace`` (the newest launch listed when a job has two:
    the others are left to ``discard``)."""
    return {n.job_id: n for n in sorted(named_actors(ray, namespace), key=lambda n: n.launch) if n.role == GANG}


def handle(ray: Any, name: str, namespace: str) -> Any:
    """The actor named ``name``, or None when it is gone."""
    try:
        return ray.get_actor(name, namespace=namespace)
    except ValueError:
        return None


def discard(ray: Any, namespace: str, keep: set[str]) -> list[str]:
    """Kill every podfleet actor in ``namespace`` whose name is not in ``keep``, and the
    placement groups their supervisors name; the jobs whose actors went."""
    from ray.util.placement_group import remove_placement_group

    gone: set[str] = set()
    for n in named_actors(ray, namespace):
        if n.name in keep:
            continue
        actor = handle(ray, n.name, namespace)
        if actor is None:
            continue
        if n.role == GANG:
            with contextlib.suppress(Exception):  # a supervisor that no longer answers
                rec = ray.get(actor.state.remote(), timeout=LOOKUP_TIMEOUT_S)
                for pg in [rec.get("pg"), *(rec.get("pgs") or []), *(x.get("pg") for x in rec.get("ranks") or [])]:
                    if pg is not None:
                        remove_placement_group(pg)
        with contextlib.suppress(Exception):  # already gone
            ray.kill(actor, no_restart=True)
        gone.add(n.job_id)
    return sorted(gone)
