"""What a Ray gang is launched with: the chips a Ray cluster offers (``ray_topology``), a
``WorkerGroupSpec`` checked into a ``RayJob`` (``GangConfig.new_job``) and registered on
its chips (``admit``), the bundle and actor options each rank's actor is placed with, and
each rank's ``WorkerConfig``. The fabric's engine-thread ``launch`` and the runner's
starter thread (``starter.py``) and rank moves (``rankmove.py``) share it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from podfleet.errors import ConflictError, InvalidInputError, UnknownNameError
from podfleet.fabric.base import ChipState, WorkerGroupSpec
from podfleet.fabric.ray import control, supervisor
from podfleet.fabric.ray.jobs import STRATEGIES, TERMINAL, RankRecord, RayJob, RayState
from podfleet.fabric.ray.nodes import NodeMap
from podfleet.hardware.topology import SwitchedTopology, Topology
from podfleet.training.config import WorkerConfig

# Strategies whose bundles are pinned to their chips' nodes: the control plane chose the
# chips, so the chips decide the nodes. With SPREAD / STRICT_SPREAD Ray picks the nodes.
PINNED = frozenset({"pack", "strict_pack"})
# Options a WorkerGroupSpec may carry that are the fabric's, not the worker's.
FABRIC_OPTIONS = frozenset({"placement", "max_retries", "recover", "rank_moves"})
# Nominal figures for the pseudo-topology of Ray slots (no physical wiring is known):
# 25 GB/s per chip (EFA on a trn2 instance, reference/trn2.md) and 15 us latency.
RAY_SLOT_BW_BYTES_PER_S = 25e9
RAY_SLOT_LATENCY_S = 15e-6
# What a chip is, by the Ray resource it is a unit of: CPU and GPU units are worker slots,
# named as LocalFabric names its own ("cpu", "cuda"); neuron_cores are Trainium devices,
# whose type the cluster's topology (or ``chip_type``) says.
SLOT_CHIP_TYPES = {"CPU": "cpu", "GPU": "cuda"}


def ray_topology(resource: str, n_chips: int, topology: Topology | None = None,
                 chip_type: str = "trn2") -> Topology:
    """The chips a Ray cluster offers. CPU and GPU slots sit on one switch whatever shape
    the cluster was asked for (Ray knows no wiring between them) and say what they are
    (``cpu``, ``cuda``), never a Trainium type; the name of ``topology`` is kept. On
    ``neuron_cores`` the chips are Trainium devices: ``topology`` as given, else a
    switched one of ``chip_type``."""
    slot = SLOT_CHIP_TYPES.get(resource)
    if slot is None:
        return topology or SwitchedTopology(
            f"ray-{n_chips}", chip_type, n_chips, RAY_SLOT_BW_BYTES_PER_S, RAY_SLOT_LATENCY_S)
    name = topology.name if topology is not None else f"ray-{n_chips}"
    return SwitchedTopology(name, slot, n_chips, RAY_SLOT_BW_BYTES_PER_S, RAY_SLOT_LATENCY_S)


@dataclass(frozen=True)
class GangConfig:
    """The fabric's settings a gang's actors and workers are made from."""

    resource: str
    per_chip: float
    placement: str  # the default strategy (a job's ``placement`` option overrides it)
    workdir: str  # each job's directory is under it (and its default checkpoint dir)
    key_file: str | None
    runtime_env: dict[str, Any] | None
    # Per chip, NEURON_RT_VISIBLE_CORES of its device on its node (a neuron cluster's hosts,
    # ``RayFabric.bind_devices``); empty: Ray's own choice for the bundle stands.
    chip_cores: tuple[str, ...] = ()

    def bundle(self) -> dict[str, float]:
        return {self.resource: self.per_chip}

    def actor_options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {"runtime_env": self.runtime_env} if self.runtime_env else {}
        if self.resource == "CPU":
            return {**opts, "num_cpus": self.per_chip}
        if self.resource == "GPU":
            return {**opts, "num_cpus": 0, "num_gpus": self.per_chip}
        return {**opts, "num_cpus": 0, "resources": {"neuron_cores": self.per_chip}}

    def new_job(self, group: WorkerGroupSpec, topology: Topology) -> RayJob:
        """``group`` checked (chips, placement, options) as the job it launches."""
        chips = tuple(int(c) for c in group.chips)
        if not chips:
            raise InvalidInputError("a job needs at least one chip", field="chips")
        if len(set(chips)) != len(chips):
            raise InvalidInputError(f"chips {list(chips)} repeat a chip", field="chips")
        for c in chips:
            topology.check_chip(c)
        strategy = str(group.options.get("placement", self.placement)).lower()
        if strategy not in STRATEGIES:
            raise UnknownNameError("placement strategy", strategy, STRATEGIES, field="placement")
        workdir = os.path.join(self.workdir, group.job_id)
        ckpt_dir = group.options.get("checkpoint_dir") or (
            os.path.join(workdir, "checkpoints") if group.checkpoint_interval else None)
        # The launch token names the gang's actors before they exist (``discard_unadopted``
        # spares a gang still being started); it also names the launch's control-file directory.
        job = RayJob(group, strategy, workdir, ckpt_dir, launch=supervisor.launch_token())
        job.ranks = [RankRecord(r, c) for r, c in enumerate(chips)]
        self.worker_config(job, 0, "127.0.0.1", 29500)  # bad input is reported before conflicts
        return job

    def worker_config(self, job: RayJob, rank: int, master_addr: str, master_port: int) -> WorkerConfig:
        spec = job.spec
        names = {f.name for f in fields(WorkerConfig)}
        opts = {k: v for k, v in spec.options.items() if k in names}
        unknown = sorted(set(spec.options) - names - FABRIC_OPTIONS)
        if unknown:
            raise UnknownNameError("job option", unknown[0], sorted(names | FABRIC_OPTIONS), field=unknown[0])
        if "entrypoint_args" in opts:
            opts["entrypoint_args"] = tuple(opts["entrypoint_args"])
        base: dict[str, Any] = {
            "device": "cuda" if self.resource == "GPU" else "cpu",
            "checkpoint_dir": job.checkpoint_dir,
            "key_file": self.key_file,
            # No replica files: a survivor keeps its state in memory for a rank move
            # (rankmove.py), and a relaunch restarts from the last checkpoint (writing one
            # would demand a key, and no relaunched gang here reads it).
            "replica_peer": False,
        }
        base.update(opts)
        if self.chip_cores:
            base["neuron_visible_cores"] = self.chip_cores[job.ranks[rank].chip]
        base.update(control.files(job, len(job.ranks)))
        base.update(job_id=spec.job_id, rank=rank, world_size=len(job.ranks), master_addr=master_addr,
                    master_port=master_port, model=spec.model, steps=spec.steps,
                    checkpoint_interval=spec.checkpoint_interval, entrypoint=spec.entrypoint)
        base.setdefault("global_batch", max(8, len(job.ranks)) // len(job.ranks) * len(job.ranks))
        return WorkerConfig(**base)


def bundle_selectors(nodes: NodeMap, job: RayJob, chips: Sequence[int] | None = None) -> list[dict[str, str]] | None:
    """Pin each rank's bundle to its chip's node (PACK strategies); None lets Ray choose.
    Hold the fabric's lock."""
    if job.strategy not in PINNED:
        return None
    sel = nodes.selectors(list(chips) if chips is not None else [r.chip for r in job.ranks])
    return sel if any(sel) else None


def admit(state: RayState, chip_states: Sequence[ChipState], job: RayJob) -> None:
    """Register ``job`` on its chips, or refuse it (a live job of that id, a chip in use or
    out of service)."""
    chips = [r.chip for r in job.ranks]
    with state.lock:
        old = state.jobs.get(job.job_id)
        if old is not None and old.state not in TERMINAL:
            raise ConflictError(f"job {job.job_id} is already {old.state.value} on this fabric", field="job_id")
        busy = [c for c in chips if c in state.chip_job]
        if busy:
            raise ConflictError(f"chips {busy} are in use by job {state.chip_job[busy[0]][0]}", field="chips")
        bad = [c for c in chips if chip_states[c] not in (ChipState.HEALTHY, ChipState.DEGRADED)]
        if bad:
            raise ConflictError(f"chips {bad} are {chip_states[bad[0]].value}", field="chips")
        state.jobs[job.job_id] = job
        for r in job.ranks:
            state.chip_job[r.chip] = (job.job_id, r.rank)


def chip_trouble(state: RayState, nodes: NodeMap, chip_states: Sequence[ChipState], chip: int,
                 unreachable: str | None, holder: str | None = None) -> str | None:
    """Why ``chip`` cannot take a rank now (None: it can): the Ray cluster unreachable, the
    chip out of service, held by a gang other than job ``holder``, or its node not alive in
    the poller's latest view of the cluster (never a Ray call: the engine thread asks)."""
    if unreachable is not None:
        return unreachable
    st = chip_states[chip]
    if st not in (ChipState.HEALTHY, ChipState.DEGRADED):
        return f"chip {chip} is {st.value}"
    with state.lock:
        held = state.chip_job.get(chip)
        if held is not None and held[0] != holder:
            return f"chip {chip} is still held by job {held[0]} rank {held[1]}"
        return nodes.check(chip)


def chip_workers(state: RayState) -> dict[int, dict[str, Any]]:
    """Each chip's live rank: its job, rank, node, ip and pid."""
    out: dict[int, dict[str, Any]] = {}
    with state.lock:
        for job in state.jobs.values():
            if job.state in TERMINAL:
                continue
            for r in job.ranks:
                if not r.done and r.info:
                    out[r.chip] = {"job_id": job.job_id, "rank": r.rank, "node_id": r.info.get("node_id"),
                                   "ip": r.info.get("ip"), "pid": r.info.get("pid")}
    return out
