"""``NeuronHostsFabric``: a neuron cluster whose Trainium hosts are the nodes of a Ray cluster.

    fab = NeuronHostsFabric("HEAD:6379", timeline, neuron_ls="neuron-ls --json-output",
                            neuron_monitor="neuron-monitor")
    fab.hosts        # one per Ray node with neuron_cores: its node, its first chip, its neuron-ls inventory
    fab.topology     # the hosts' 4x4 grids joined as the Z rings (4 hosts: trn2-ultraserver, 4x4x4)
    fab.launch(g)    # a Ray actor per rank on its chip's node, NEURON_RT_VISIBLE_CORES = that device's cores

A host is a Ray node with ``neuron_cores`` (what Ray detects on a Trainium instance): its
chips are ``per_chip`` cores each, numbered node by node as ``RayFabric`` numbers them (the
head first, then by IP and node id). On each host a ``NeuronHostAgent`` actor (pinned to
the node, no CPU reserved) runs neuron-ls once and neuron-monitor for the fabric's life;
a poller thread drains the agents and folds each host's reports into its own
``NeuronTelemetry``, so a fault on device d of host h reaches chip ``16 h + d`` (state,
``chip-failed`` / ``chip-degraded`` event, fault log) as on one host (``faults.py``).

Topology: each host's neuron-ls wiring must be the same grid (``build_topology``; a
trn2.48xlarge is a 4x4 torus); host h is Z coordinate h, chip = device + 16 h
(``GridTopology``'s order: x fastest). The Z links between hosts are not reported by
neuron-ls here: they are assumed up. Jobs run on a composed ``RayFabric``
(``resource="neuron_cores"``), which places each rank's actor on its chip's node and
gives it its device's cores (``bind_devices``); chip states, kills, logs, host commands
and the Ray cluster's health are that fabric's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from podfleet.errors import InfeasibleError, InvalidInputError
from podfleet.fabric.base import (
    FabricEvent,
    LinkState,
)
from podfleet.fabric.commands import split_command
from podfleet.fabric.neuron.fabric import chip_type_of_instance, visible_cores
from podfleet.fabric.neuron.faults import apply_faults
from podfleet.fabric.neuron.front import NeuronFront
from podfleet.fabric.neuron.hostagent import NeuronHostAgent
from podfleet.fabric.neuron.ls import NeuronInventory
from podfleet.fabric.neuron.metrics import link_metrics
from podfleet.fabric.neuron.monitor import MonitorReport
from podfleet.fabric.neuron.telemetry import NeuronTelemetry, link_down_events
from podfleet.fabric.ray import supervisor
from podfleet.fabric.ray.fabric import RayFabric  # imports Ray only when built
from podfleet.hardware.catalog import TRN2_Z_HOP_LATENCY_S, TRN2_Z_LINK
from podfleet.hardware.topology import Axis, GridTopology, Topology

log = logging.getLogger("podfleet.fabric.neuron")

HOST_RESOURCE = "neuron_cores"
CORES_PER_DEVICE = 4.0  # a Trn2 device at LNC=2, as Ray counts neuron_cores
HELLO_SLACK_S = 60.0  # beyond neuron-ls's own timeout: placing the agents on their nodes
DRAIN_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Host:
    """One Trainium host: Z coordinate ``index``, chips ``offset`` to ``offset + n_devices - 1``."""

    index: int
    node_id: str
    ip: str
    offset: int
    inventory: NeuronInventory

    @property
    def name(self) -> str:
        return f"host {self.index} (Ray node {self.node_id[:12]}, {self.ip})"

    def chips(self) -> range:
        return range(self.offset, self.offset + self.inventory.n_devices)


def join_hosts(grids: Sequence[Topology]) -> Topology:
    """The hosts' grids (the same shape each) as one: host h is Z coordinate h. Four
    4x4 Trn2 hosts are the ``trn2-ultraserver`` 4x4x4 torus."""
    first = grids[0]
    if len(grids) == 1:
        return first
    if not isinstance(first, GridTopology):
        raise InvalidInputError(f"a host's wiring ({first.name}) is not a grid", field="connected_to")
    shapes = [g.dims if isinstance(g, GridTopology) else (g.n_chips,) for g in grids]
    if any(s != first.dims for s in shapes):
        raise InvalidInputError(f"the hosts' neuron-ls wiring differs: {' / '.join('x'.join(map(str, s)) for s in shapes)}"
                                " (every host of an UltraServer is the same grid)", field="connected_to")
    if first.chip_type != "trn2":
        raise InfeasibleError(f"{first.chip_type} hosts are not joined by NeuronLink across hosts (only Trn2 "
                              "UltraServers are); run one neuron cluster per host", field="neuron_ls")
    axes = [*first.axes, Axis("z", len(grids), True, TRN2_Z_LINK, TRN2_Z_HOP_LATENCY_S)]
    name = ("trn2-ultraserver" if first.dims == (4, 4) and len(grids) == 4
            else f"trn2-{'x'.join(map(str, first.dims))}x{len(grids)}-hosts")
    return GridTopology(name, "trn2", axes)


def device_cores(inventory: NeuronInventory, device: int, per_device: int) -> list[int]:
    """The NeuronCores (runtime numbering, node-local) of ``device``."""
    return sorted(c for c, d in inventory.core_to_device(per_device).items() if d == device)


class NeuronHostsFabric(NeuronFront):
    kind = "neuron"

    def __init__(
        self,
        address: str,
        timeline: Any = None,
        *,
        neuron_ls: str,
        neuron_monitor: str,
        spares: tuple[int, ...] = (),
        workdir: str | None = None,
        per_chip: float = CORES_PER_DEVICE,
        namespace: str | None = None,
        ls_timeout_s: float = 30.0,
        poll_s: float = 0.5,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        stale_after_s: float = 60.0,
        max_bad_in_row: int = 3,
        keep_events: int = 1000,
    ) -> None:
        split_command(neuron_ls, "neuron-ls")  # refuse a bad command before reaching out
        split_command(neuron_monitor, "neuron-monitor")
        self.neuron_ls_command, self.neuron_monitor_command = neuron_ls, neuron_monitor
        self.poll_s = poll_s
        super().__init__(keep_events)
        self._closed = threading.Event()
        self._degraded: dict[int, str] = {}
        self._status: dict[int, dict[str, Any]] = {}
        self._reports: dict[int, int] = {}
        self._agents: list[Any] = []
        self._runner: RayFabric = RayFabric(address, None, None, resource=HOST_RESOURCE, spares=spares, per_chip=per_chip,
                                 workdir=workdir, namespace=namespace or supervisor.namespace_for("default"))
        self.address = address
        try:
            self.hosts = self._discover(neuron_ls, neuron_monitor, int(per_chip), ls_timeout_s,
                                        {"backoff_initial_s": backoff_initial_s, "backoff_max_s": backoff_max_s,
                                         "stale_after_s": stale_after_s, "max_bad_in_row": max_bad_in_row})
            self.telemetry = [self._telemetry(h) for h in self.hosts]
            self.topology = join_hosts([t.topology for t in self.telemetry])
            self._runner.bind_devices(self.topology, [
                visible_cores(device_cores(h.inventory, c - h.offset, int(per_chip))) for h in self.hosts
                for c in h.chips()])
        except BaseException:
            self._stop_agents()
            self._runner.close()
            raise
        self.missing = frozenset((a + h.offset, b + h.offset) for h, t in zip(self.hosts, self.telemetry, strict=True)
                                 for a, b in t.wiring.missing)
        self._link_metrics = link_metrics(self.topology, self.missing)
        codes = tuple(LinkState)
        self._link_states = [codes[int(c)] for c in self._link_metrics["state"]]
        if timeline is not None:
            self.attach(timeline)
        for ev in link_down_events(self.topology, self.missing, self._now()):
            self._runner.on_engine(self._publish, ev)
        for agent in self._agents:
            agent.start.remote()
        self._poller = threading.Thread(target=self._poll, name="neuron-hosts-poller", daemon=True)
        self._poller.start()

    # --- building -------------------------------------------------------------------------
    def _discover(self, neuron_ls: str, neuron_monitor: str, per_chip: int, ls_timeout_s: float,
                  monitor_opts: dict[str, float]) -> list[Host]:
        """An agent on every node with chips; their neuron-ls inventories, checked against
        the chips Ray's ``neuron_cores`` gave each node."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._runner.state.ray
        nodes = [n for n in self._runner.nodes.describe() if n["chips"]]
        actor = ray.remote(NeuronHostAgent)
        for n in nodes:
            self._agents.append(actor.options(
                num_cpus=0, max_concurrency=4, max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["node_id"], soft=False),
            ).remote(neuron_ls, neuron_monitor, ls_timeout_s=ls_timeout_s, **monitor_opts))
        try:
            hellos = ray.get([a.hello.remote() for a in self._agents], timeout=ls_timeout_s + HELLO_SLACK_S)
        except Exception as exc:  # Ray's: an agent not placed or lost before it answered
            raise InfeasibleError(f"the neuron host agents on {len(nodes)} Ray node(s) did not answer within "
                                  f"{ls_timeout_s + HELLO_SLACK_S:g} s ({type(exc).__name__})",
                                  field="neuron_ls") from None
        hosts = []
        for i, (n, hello) in enumerate(zip(nodes, hellos, strict=True)):
            where = f"Ray node {n['node_id'][:12]} ({n['ip']})"
            err = hello.get("error")
            if err is not None:
                cls = InvalidInputError if err["kind"] == "InvalidInputError" else InfeasibleError
                raise cls(f"{where}: {err['message']}", field=err.get("field") or "neuron_ls")
            inv: NeuronInventory = hello["inventory"]
            chips = list(n["chips"])
            if inv.n_devices != len(chips):
                raise InfeasibleError(f"{where} has {len(chips)} chips of {HOST_RESOURCE} ({per_chip} per chip) but "
                                      f"its neuron-ls reports {inv.n_devices} Neuron devices", field="neuron_ls")
            if chips != list(range(chips[0], chips[0] + len(chips))):
                raise InfeasibleError(f"{where}'s chips {chips} are not contiguous", field="neuron_ls")
            wrong = sorted({d.nc_count for d in inv.devices if d.nc_count not in (None, per_chip)})
            if wrong:
                raise InfeasibleError(f"{where}: neuron-ls reports {wrong[0]} NeuronCores per device; this cluster "
                                      f"counts {per_chip} {HOST_RESOURCE} per chip (PODFLEET_RAY_PER_CHIP)",
                                      field="neuron_ls")
            hosts.append(Host(i, n["node_id"], n["ip"], chips[0], inv))
        if not hosts:
            raise InfeasibleError(f"the Ray cluster at {self.address} has no node with {HOST_RESOURCE}",
                                  field="ray_address")
        return hosts

    @staticmethod
    def _telemetry(host: Host) -> NeuronTelemetry:
        try:
            return NeuronTelemetry(host.inventory, chip_type=chip_type_of_instance(host.inventory))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{host.name}: neuron-ls {exc.message}", field="neuron_ls") from None

    # --- Fabric protocol and capabilities: the rest is NeuronFront's (the Ray fabric's) ------
    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        """Each host's neuron-monitor metrics, host after host (chip order)."""
        per_host = [t.chip_metrics() for t in self.telemetry]
        return {k: np.concatenate([m[k] for m in per_host]) for k in per_host[0]}

    def connection_status(self) -> dict[str, Any]:
        """ClusterConnection: the Ray cluster's (reachable or not, since when, its nodes)."""
        return self._runner.connection_status()

    def close(self) -> None:
        self._closed.set()
        if self._poller.is_alive() and threading.current_thread() is not self._poller:
            self._poller.join(DRAIN_TIMEOUT_S + 1)
        self._stop_agents()
        self._runner.close()

    # --- beyond the protocol -----------------------------------------------------------
    def health_reason(self) -> str | None:
        """Why some host's telemetry is degraded now (None: every host's stream is healthy)."""
        why = [f"{self.hosts[h].name}: {r}" for h, r in sorted(self._degraded.items())]
        return "; ".join(why) or None

    def monitor_status(self) -> dict[str, Any]:
        hosts = []
        for h in self.hosts:
            got = self._status.get(h.index, {})
            reason = self._degraded.get(h.index)
            hosts.append({"host": h.index, "node_id": h.node_id, "ip": h.ip, "chips": [h.offset, h.chips()[-1]],
                          "state": "degraded" if reason else ("ok" if self._reports.get(h.index) else "starting"),
                          "reason": reason, "reports": self._reports.get(h.index, 0),
                          **{k: got.get(k) for k in ("pid", "runs", "restarts", "malformed", "stderr_tail")}})
        return {"state": "degraded" if self._degraded else ("ok" if all(x["state"] == "ok" for x in hosts)
                                                              else "starting"),
                "reason": self.health_reason(), "command": self.neuron_monitor_command, "hosts": hosts}

    def device_cores(self, chip: int) -> list[int]:
        """The NeuronCores (runtime numbering on its host) of chip ``chip``."""
        host = self.host_of(chip)
        return device_cores(host.inventory, chip - host.offset, int(self._runner.per_chip))

    def host_of(self, chip: int) -> Host:
        self.topology.check_chip(chip)
        return next(h for h in self.hosts if chip in h.chips())

    # --- private ----------------------------------------------------------------------------
    def _poll(self) -> None:
        """Poller thread: drain every host's agent; what they say is applied on the engine thread."""
        ray = self._runner.state.ray
        while not self._closed.wait(self.poll_s):
            if self._runner.unreachable is not None:
                continue  # the Ray fabric reports the outage; the agents answer again after it
            refs = [a.drain.remote() for a in self._agents]
            for host, ref in zip(self.hosts, refs, strict=True):
                try:
                    got = ray.get(ref, timeout=DRAIN_TIMEOUT_S)
                except Exception as exc:  # Ray's: the agent (or its node) is gone
                    self._runner.on_engine(self._trouble, host.index,
                                           f"its neuron host agent does not answer ({type(exc).__name__})")
                    continue
                self._status[host.index] = got
                for reason in got["trouble"]:
                    self._runner.on_engine(self._trouble, host.index, reason)
                for report in got["reports"]:
                    self._runner.on_engine(self._apply, host.index, report)

    def _trouble(self, index: int, reason: str) -> None:
        """Engine thread: host ``index``'s monitor (or agent) is broken."""
        first = index not in self._degraded
        self._degraded[index] = reason
        if first or "restarting in" in reason:
            host = self.hosts[index]
            self._publish(FabricEvent("fabric-degraded", self._now(), detail={
                "reason": f"{host.name}: {reason}", "source": "neuron-monitor", "host": index,
                "node_id": host.node_id, "restarts": self._status.get(index, {}).get("restarts", 0)}))

    def _apply(self, index: int, report: MonitorReport) -> None:
        """Engine thread: host ``index``'s report into its metrics; faults onto its chips."""
        t = self._now()
        host = self.hosts[index]
        self._reports[index] = self._reports.get(index, 0) + 1
        was = self._degraded.pop(index, None)
        if was is not None:
            self._publish(FabricEvent("fabric-recovered", t, detail={
                "source": "neuron-monitor", "host": index, "node_id": host.node_id, "after": was}))
        found = self.telemetry[index].update(report, t)
        for ev in apply_faults(found, host.inventory, t, state_of=lambda c: self._runner.chip_states()[c],
                               set_state=self._runner.set_chip_state, offset=host.offset, host=host.name):
            self._publish(ev)

    def _stop_agents(self) -> None:
        """Stop each host's neuron-monitor (its process group on that node), then the agents."""
        if not self._agents:
            return
        ray = self._runner.state.ray
        with contextlib.suppress(Exception):  # an agent already gone has nothing left to stop
            ray.get([a.close.remote() for a in self._agents], timeout=CLOSE_TIMEOUT_S)
        for a in self._agents:
            with contextlib.suppress(Exception):
                ray.kill(a)
        self._agents = []
