"""Cluster deployment as visible steps on the timeline: chip initialisation, interconnect
configuration, storage mounts, self-test. Each step logs, reports progress and persists
its outcome; on the twin the whole deployment takes a few seconds of timeline time.

A write that the store refuses (unreachable, or this server no longer leads) is tried
again every ``SAVE_RETRY_S`` until it goes through: raised out of the deployment's
process, it would stop the engine, and the server with it, over an outage of the store."""

from __future__ import annotations

from collections.abc import Callable, Generator

import simpy

from podfleet.control.lifecycle import ClusterState
from podfleet.control.logbuf import rfc3339
from podfleet.control.ports import PlanePort
from podfleet.control.runtime import DEPLOY_STEPS, ClusterRuntime
from podfleet.errors import UnavailableError
from podfleet.fabric.base import ChipState, ResumableRuns
from podfleet.hardware.topology import FleetTopology
from podfleet.wire import JsonObject

_TICKS_PER_STEP = 5
SAVE_RETRY_S = 1.0


def step_durations_s(rt: ClusterRuntime) -> dict[str, float]:
    """Twin timings: scale with what each step touches (chips, links, mounts). A fabric of
    worker processes has its slots already (its workers start per job): its steps only
    check them. A fleet's pods are separate UltraServers, each initialising its own chips
    and NeuronLinks on its own hosts: they deploy side by side, so a step takes what one
    pod's takes (these per-chip and per-link times are the twin's assumptions)."""
    if not isinstance(rt.fabric, ResumableRuns):
        return dict.fromkeys(DEPLOY_STEPS, 0.1)
    topo = rt.topology
    pod = topo.group if isinstance(topo, FleetTopology) else topo
    return {
        "chip-initialisation": 0.5 + 0.02 * pod.n_chips,
        "interconnect-configuration": 0.3 + 0.003 * len(pod.links),
        "storage-mounts": 0.2 + 0.3 * rt.spec.storage_nodes,
        "self-test": 1.0,
    }


def start_deployment(plane: PlanePort, rt: ClusterRuntime) -> None:
    plane.tl.process(_deploy(plane, rt))


def _deploy(plane: PlanePort, rt: ClusterRuntime) -> Generator[simpy.Event, object, None]:
    durations = step_durations_s(rt)
    total = sum(durations.values())
    done_s = 0.0
    rt.deployment = {"state": "running", "percent": 0,
                     "steps": [{"name": s, "state": "pending"} for s in DEPLOY_STEPS]}
    rt.logs.append(plane.now(), f"deploying {rt.spec.type} ({rt.topology.n_chips} chips, "
                                f"{len(rt.topology.links)} links, {rt.spec.storage_nodes} storage nodes, "
                                f"{rt.spec.spares} spares) on fabric {rt.spec.fabric}")
    for k, name in enumerate(DEPLOY_STEPS):
        if rt.state != ClusterState.DEPLOYING:
            return  # deleted while deploying
        step = {"name": name, "state": "running", "started_at": rfc3339(plane.now())}
        _set_step(rt, k, step)
        rt.logs.append(plane.now(), f"step {k + 1}/{len(DEPLOY_STEPS)}: {name} started", step=name)
        for _ in range(_TICKS_PER_STEP):
            yield plane.tl.env.timeout(durations[name] / _TICKS_PER_STEP)
            done_s += durations[name] / _TICKS_PER_STEP
            rt.deployment = {**rt.deployment, "percent": round(100 * done_s / total)}
        if rt.state != ClusterState.DEPLOYING:
            return
        detail = _step_detail(rt, name)
        failed = name == "self-test" and detail.startswith("no healthy")
        _set_step(rt, k, {**step, "state": "failed" if failed else "succeeded",
                          "finished_at": rfc3339(plane.now()), "detail": detail})
        rt.logs.append(plane.now(), f"step {k + 1}/{len(DEPLOY_STEPS)}: {name} {'failed' if failed else 'done'}: {detail}", step=name)
        if failed:
            rt.deployment = {**rt.deployment, "state": "failed"}
            yield from _settle(plane, rt, ClusterState.FAILED, detail)
            rt.logs.closed = True
            return
        # Progress survives a restart (the step reruns).
        yield from _persisted(plane, rt, lambda: plane.store.save_cluster(rt.rec))
    rt.deployment = {**rt.deployment, "state": "succeeded", "percent": 100}
    yield from _settle(plane, rt, ClusterState.ACTIVE, "deployment succeeded")
    yield from _persisted(plane, rt, lambda: plane.save_health(rt))
    plane.render(rt)
    rt.logs.closed = True
    plane.jobs.schedule(rt)


def _persisted(plane: PlanePort, rt: ClusterRuntime, write: Callable[[], object]) -> Generator[simpy.Event, object, None]:
    while True:
        try:
            write()
            return
        except UnavailableError as exc:
            plane.tl.emit("deploy-write-retry", cluster=rt.id, reason=exc.message)
            yield plane.tl.env.timeout(SAVE_RETRY_S)


def _settle(plane: PlanePort, rt: ClusterRuntime, dst: ClusterState, reason: str) -> Generator[simpy.Event, object, None]:
    try:
        plane.set_cluster_state(rt, dst, reason)
    except UnavailableError:
        # The transition is made in memory; its record goes once the store answers.
        yield from _persisted(plane, rt, lambda: plane.store.save_cluster(rt.rec))
        rt.logs.append(plane.now(), f"cluster {dst.value}: {reason}")


def _set_step(rt: ClusterRuntime, k: int, step: JsonObject) -> None:
    steps = list(rt.deployment["steps"])
    steps[k] = step
    rt.deployment = {**rt.deployment, "steps": steps}
    rt.set_deployment(rt.deployment)


def _step_detail(rt: ClusterRuntime, name: str) -> str:
    if name == "chip-initialisation" and not isinstance(rt.fabric, ResumableRuns):
        where = f" at {rt.spec.ray_address}" if rt.spec.ray_address else ""
        return f"{rt.topology.n_chips} {rt.topology.chip_type} worker slots on fabric {rt.fabric.kind}{where}"
    if name == "chip-initialisation":
        return f"{rt.topology.n_chips} {rt.topology.chip_type} chips initialised"
    if name == "interconnect-configuration":
        return f"{len(rt.topology.links)} links configured, dims {'x'.join(map(str, rt.topology.dims))}" + (
            ", network isolated" if rt.spec.network_isolation else "")
    if name == "storage-mounts":
        enc = "encrypted" if rt.spec.encryption else "unencrypted"
        return f"{rt.spec.storage_nodes} storage node(s) mounted, {enc}"
    states = rt.chip_states()
    healthy = sum(s == ChipState.HEALTHY for s in states)
    if healthy == 0:
        return "no healthy chip passed the self-test"
    return f"{healthy}/{len(states)} chips healthy"
