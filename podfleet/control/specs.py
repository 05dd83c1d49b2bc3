"""What an operator asks for: cluster and job specs, validated with messages that name
the field and the allowed values. Pure: no I/O, no clock. The API's pydantic schemas
check types; these check meaning, so the engine never trusts its caller."""

from __future__ import annotations

import copy
import functools
import re
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from podfleet.errors import InfeasibleError, InvalidInputError, UnknownNameError
from podfleet.fabric.commands import (
    DEFAULT_NEURON_LS,
    DEFAULT_NEURON_MONITOR,
    MAX_COMMAND_CHARS,
)
from podfleet.hardware.catalog import (
    MAX_AXIS_CHIPS,
    MAX_FLEET_PODS,
    custom_grid,
    fleet_topology,
    get_topology,
)
from podfleet.hardware.specs import GB, GiB, get_chip
from podfleet.hardware.topology import GridTopology, Topology
from podfleet.perf.compression import parse_grad_compression
from podfleet.wire import JsonObject

CLUSTER_TYPES = ("trn2-ultraserver", "trn2-node", "trn1-node", "custom")
FABRICS = ("sim", "local", "ray", "neuron")
# Fabrics whose clusters may be given as N worker slots (``--chips N``) rather than a shape.
SLOT_FABRICS = ("local", "ray")
MAX_SPARES = 4
MAX_STORAGE_NODES = 16
# The most chips one custom cluster has. The scheduler's block index holds every block of
# every shape of a grid (~chips^3 bytes of membership: 64 MB at 256 chips, 4 GB at 1024),
# so larger grids are out of reach; a 64-chip UltraServer is the product's pod.
MAX_CLUSTER_CHIPS = 256
_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
# A job spanning a lost pod (``control.podloss``): the API's on_pod_loss, the CLI's --on-pod-loss.
POD_LOSS_POLICIES = ("wait", "requeue", "shrink")
_TEAM_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_QUEUE_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_DEP_RE = re.compile(r"^(job|arr)-[a-z0-9-]{1,60}$")



def _refuse_unknown_fields(cls: type, d: Mapping[str, Any], what: str) -> None:
    """A request naming a field the spec does not have is refused, naming the first one
    and the fields there are (a typo is not silently dropped)."""
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    extra = sorted(set(d) - known)
    if extra:
        raise UnknownNameError(what, extra[0], known, field=extra[0])

@dataclass(frozen=True)
class ClusterSpec:
    name: str
    type: str = "trn2-ultraserver"
    dims: tuple[int, ...] | None = None  # custom only
    chip_type: str | None = None  # custom only (default trn2)
    chips: int | None = None  # must match the type; for custom, a 1-D ring when no dims
    hbm_gib: float | None = None  # per-chip memory; default the chip's
    link_bw_gbps: float | None = None  # per link, GB/s; default the type's
    storage_nodes: int = 1
    spares: int = 0
    # Chips the operator names as spares; None: ``choose_spares`` picks ``spares`` chips
    # where they keep the largest blocks free (the choice is persisted with the cluster).
    spare_chips: tuple[int, ...] | None = None
    # A spare that takes a rank stops being a spare; with this on, a free healthy chip
    # (a repaired spare first) takes its place (``control.chips.account_spares``).
    restore_spares: bool = True
    quotas: dict[str, int] | None = None  # team -> most chips its jobs may hold at once
    encryption: bool = True
    network_isolation: bool = True
    fabric: str = "sim"
    # fabric ray, or neuron across hosts: the Ray cluster (HOST:6379, ray://HOST:10001, auto)
    ray_address: str | None = None
    # fabric neuron only: the commands that list the host's devices and stream their telemetry
    neuron_ls: str | None = None  # default DEFAULT_NEURON_LS
    neuron_monitor: str | None = None  # default DEFAULT_NEURON_MONITOR
    # Fleets: ``pods`` groups of ``type`` joined by EFA, ``pods_per_block`` behind each spine
    # (default ``catalog.DEFAULT_PODS_PER_BLOCK``); ``spares`` is then per pod.
    pods: int | None = None
    pods_per_block: int | None = None

    @classmethod
    def parse(cls, d: JsonObject) -> ClusterSpec:
        _refuse_unknown_fields(cls, d, "cluster field")
        if d.get("type") is None and d.get("fabric") in SLOT_FABRICS and d.get("chips") is not None:
            # A real cluster of --chips N worker slots, not a Trainium shape.
            d = {**d, "type": "custom"}
        if d.get("fabric") == "neuron":
            # A Trainium host: neuron-ls gives the real shape; trn2-node (a trn2.48xlarge)
            # is the expected one until it has run.
            d = {"type": "trn2-node", **{k: v for k, v in d.items() if v is not None},
                 "neuron_ls": DEFAULT_NEURON_LS if d.get("neuron_ls") is None else d["neuron_ls"],
                 "neuron_monitor": DEFAULT_NEURON_MONITOR if d.get("neuron_monitor") is None else d["neuron_monitor"]}
        spec = cls(**{k: v for k, v in d.items() if v is not None or k in ("dims",)})
        if spec.dims is not None:
            spec = cls(**{**asdict(spec), "dims": tuple(spec.dims)})
        if spec.spare_chips is not None:
            named = spec.spare_chips
            if not isinstance(named, list | tuple) or any(not isinstance(c, int) or isinstance(c, bool) for c in named):
                raise InvalidInputError(f"spare_chips must be a list of chip indices, got {named!r}",
                                        field="spare_chips")
            spec = cls(**{**asdict(spec), "spare_chips": tuple(sorted(set(named))),
                          "spares": len(set(named)) if spec.spares in (0, len(set(named))) else spec.spares})
        spec.validate()
        return spec

    def fabric_options(self) -> JsonObject:
        """What the fabric factory needs beyond the topology (``make_fabric(options=)``)."""
        return {"ray_address": self.ray_address, "neuron_ls": self.neuron_ls, "neuron_monitor": self.neuron_monitor}

    def to_dict(self) -> JsonObject:
        """A fresh dict each call, copied from one rendering kept with the (frozen) spec:
        every DescribeCluster and ListClusters answer holds it. The rendering's values are
        scalars, lists of ints (dims, spare_chips) and a dict of ints (quotas), so copying
        its containers one level down makes it as fresh as a deep copy (which was most of
        ListClusters' time: 101 specs per page, each ``copy.deepcopy`` walking every field)."""
        return {k: v.copy() if isinstance(v, list | dict) else v for k, v in self._rendered.items()}

    @functools.cached_property
    def _rendered(self) -> JsonObject:
        d = asdict(self)
        d["dims"] = list(self.dims) if self.dims else None
        d["spare_chips"] = list(self.spare_chips) if self.spare_chips is not None else None
        return d

    def validate(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise InvalidInputError(
                f"name {self.name!r} must be 1-63 chars of a-z, 0-9 and '-', starting with a letter",
                field="name",
            )
        if self.type not in CLUSTER_TYPES:
            raise UnknownNameError("cluster type", self.type, CLUSTER_TYPES, field="type")
        if self.fabric not in FABRICS:
            raise UnknownNameError("fabric", self.fabric, FABRICS, field="fabric")
        if self.ray_address is not None and self.fabric not in ("ray", "neuron"):
            raise InfeasibleError(f"ray_address applies to fabric ray or neuron, not {self.fabric!r}",
                                  field="ray_address")
        for name, value in (("neuron_ls", self.neuron_ls), ("neuron_monitor", self.neuron_monitor)):
            if value is None:
                continue
            if self.fabric != "neuron":
                raise InfeasibleError(f"{name} applies to fabric neuron, not {self.fabric!r}", field=name)
            if not isinstance(value, str) or not value.strip() or len(value) > MAX_COMMAND_CHARS or "\x00" in value:
                raise InvalidInputError(f"{name} must be a command line of 1-{MAX_COMMAND_CHARS} characters, "
                                        f"got {value!r}", field=name)
            try:
                ok = bool(shlex.split(value))
            except ValueError as exc:
                raise InvalidInputError(f"{name} command {value!r} cannot be split: {exc}", field=name) from None
            if not ok:
                raise InvalidInputError(f"{name} must be a command line, got {value!r}", field=name)
        if not 0 <= self.spares <= MAX_SPARES:
            raise InvalidInputError(
                f"spares must be 0-{MAX_SPARES}, got {self.spares}", field="spares",
                allowed=f"0-{MAX_SPARES}",
            )
        if not 0 <= self.storage_nodes <= MAX_STORAGE_NODES:
            raise InvalidInputError(
                f"storage_nodes must be 0-{MAX_STORAGE_NODES}, got {self.storage_nodes}",
                field="storage_nodes", allowed=f"0-{MAX_STORAGE_NODES}",
            )
        if self.type != "custom" and (self.dims is not None or self.chip_type is not None):
            raise InfeasibleError(
                f"dims and chip_type apply only to type 'custom', not {self.type!r}", field="dims"
            )
        if self.type == "custom" and self.dims is None and self.chips is None:
            raise InfeasibleError("type 'custom' needs dims (e.g. [4, 4]) or chips", field="dims")
        chip = get_chip(self.chip_type or default_chip_type(self.type))
        max_gib = chip.hbm_bytes / GiB
        if self.hbm_gib is not None and not 0 < self.hbm_gib <= max_gib:
            raise InfeasibleError(
                f"hbm_gib must be > 0 and <= {max_gib:g} for {chip.name}, got {self.hbm_gib}",
                field="hbm_gib", allowed=f"(0, {max_gib:g}]",
            )
        if self.link_bw_gbps is not None and not 0 < self.link_bw_gbps <= 10_000:
            raise InvalidInputError(
                f"link_bw_gbps must be > 0 and <= 10000, got {self.link_bw_gbps}",
                field="link_bw_gbps", allowed="(0, 10000]",
            )
        if self.pods is not None or self.pods_per_block is not None:
            self._validate_fleet()
        topo = self.topology()
        if self.chips is not None and self.chips != topo.n_chips:
            raise InfeasibleError(
                f"chips {self.chips} does not match type {self.type!r} ({topo.n_chips} chips)",
                field="chips", allowed=[topo.n_chips],
            )
        if self.spares >= topo.n_chips:
            raise InfeasibleError(
                f"spares ({self.spares}) must leave at least one chip of {topo.n_chips}",
                field="spares", allowed=f"0-{min(MAX_SPARES, topo.n_chips - 1)}",
            )
        if self.spare_chips is not None:
            if len(self.spare_chips) != self.spares:
                raise InfeasibleError(
                    f"spares ({self.spares}) != number of spare_chips ({len(self.spare_chips)})",
                    field="spare_chips",
                )
            bad = [c for c in self.spare_chips if not 0 <= c < topo.n_chips]
            if bad:
                raise InfeasibleError(f"spare_chips: chip {bad[0]} does not exist; valid chips are "
                                        f"0-{topo.n_chips - 1}", field="spare_chips",
                                        allowed=f"0-{topo.n_chips - 1}")
        for team, chips in (self.quotas or {}).items():
            if not isinstance(team, str) or not _TEAM_RE.match(team):
                raise InvalidInputError(f"quotas: team {team!r} must be 1-63 chars of a-z, 0-9, '-' and '_'",
                                        field="quotas")
            if not isinstance(chips, int) or isinstance(chips, bool) or chips < 0:
                raise InvalidInputError(f"quotas: team {team!r} needs a chip count >= 0, got {chips!r}",
                                        field="quotas")

    def _validate_fleet(self) -> None:
        for name, v in (("pods", self.pods), ("pods_per_block", self.pods_per_block)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_FLEET_PODS):
                raise InvalidInputError(f"{name} must be an integer 1-{MAX_FLEET_PODS}, got {v!r}", field=name,
                                        allowed=f"1-{MAX_FLEET_PODS}")
        if self.pods is None:
            raise InfeasibleError("pods_per_block needs pods (the fleet's size)", field="pods_per_block")
        if self.type == "custom" or self.fabric != "sim":
            raise InfeasibleError(f"a fleet of pods is built from a named type on the twin (fabric sim); "
                                  f"got type {self.type!r} on fabric {self.fabric!r}", field="pods")
        if self.link_bw_gbps is not None:
            raise InfeasibleError("link_bw_gbps applies to a single pod, not a fleet", field="link_bw_gbps")
        if self.spare_chips is not None:
            raise InfeasibleError("a fleet's spares are chosen per pod: give spares (per pod), not spare_chips",
                                  field="spare_chips")

    @property
    def is_fleet(self) -> bool:
        return self.pods is not None

    def total_spares(self) -> int:
        """Spare chips in all: ``spares`` per pod on a fleet."""
        return self.spares * (self.pods or 1)

    def topology(self) -> Topology:
        if self.pods is not None:
            return fleet_topology(self.type, self.pods, self.pods_per_block)
        if self.type == "custom":
            dims = list(self.dims) if self.dims is not None else [int(self.chips or 0)]
            if self.dims is None and dims[0] > MAX_AXIS_CHIPS:
                # chips alone is a ring, and an axis has at most 64 chips: the schema allows
                # up to 256 chips, so this is a 422 that says how to ask for them.
                two = next(([a, dims[0] // a] for a in range(2, MAX_AXIS_CHIPS + 1)
                            if dims[0] % a == 0 and dims[0] // a <= MAX_AXIS_CHIPS), None)
                raise InfeasibleError(
                    f"chips {dims[0]} without dims is a ring of {dims[0]}, and an axis has at most "
                    f"{MAX_AXIS_CHIPS} chips: give dims" + (f", e.g. {two}" if two else " (1-6 axes of 1-64)"),
                    field="chips")
            if any(not isinstance(d, int) or isinstance(d, bool) for d in dims):
                raise InvalidInputError(f"dims must be integers, got {dims}", field="dims")
            if len(dims) == 0 or any(d < 1 for d in dims) or prod(dims) > MAX_CLUSTER_CHIPS:
                raise InfeasibleError(
                    f"dims must be 1-6 positive integers with at most {MAX_CLUSTER_CHIPS} chips, got {dims}",
                    field="dims",
                )
            bw = (self.link_bw_gbps or 256) * GB
            return custom_grid(dims, self.chip_type or "trn2", link_bw_bytes_per_s=bw, name="custom")
        base = get_topology(self.type)
        if self.link_bw_gbps is None:
            return base
        assert isinstance(base, GridTopology)
        return custom_grid(
            base.dims, base.chip_type, link_bw_bytes_per_s=self.link_bw_gbps * GB, name=self.type
        )

    def usable_hbm_bytes(self) -> int:
        chip = get_chip(self.chip_type or default_chip_type(self.type))
        return int(self.hbm_gib * GiB) if self.hbm_gib else chip.hbm_bytes


def default_chip_type(cluster_type: str) -> str:
    return "trn1" if cluster_type == "trn1-node" else "trn2"


def prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


MAX_PRIORITY = 100


@dataclass(frozen=True)
class JobSpec:
    model: str  # preset name, or "custom" with model_dims
    chips: int
    steps: int = 1000
    checkpoint_interval: int = 100  # steps; 0 = never
    priority: int = 50
    parallelism: str | tuple[int, int, int] = "auto"  # "auto" or (tp, pp, dp)
    model_dims: dict[str, int] | None = None
    entrypoint: str | None = None
    name: str | None = None
    team: str | None = None  # quota owner (the cluster's ``quotas``); None: "default"
    max_retries: int = 0  # real fabrics: crashes in the job's own code allowed before it fails
    options: JsonObject | None = None  # real fabrics: worker options (seed, global_batch, ...)
    # Gradient compression: none | bf16 | powersgd:RANK | lossless (perf.compression); real
    # fabrics run it (training.compression), the twin models it in the step time.
    grad_compression: str = "none"
    # Sharing (``control.dependencies``, ``scheduler.queues``): the cluster queue the job is
    # admitted through (None: "default"); jobs it waits for (after-ok: each succeeded;
    # after-any: each ended); an array ("0-15%4") expands at submit into one job per index,
    # each carrying its array id, index and concurrency limit.
    queue: str | None = None
    after_ok: list[str] | None = None
    after_any: list[str] | None = None
    array: str | None = None
    array_id: str | None = None
    array_index: int | None = None
    array_limit: int | None = None
    # Set from a priority class at submit (``control.priorities``): its name and policy.
    priority_class: str | None = None
    priority_preemption: str | None = None
    # Fleets (``scheduler.fleet``): exactly this many pods, and the network level the gang
    # must not cross (required) or should cross least (preferred): "pod" | "block".
    pods: int | None = None
    topology_required: str | None = None
    topology_preferred: str | None = None
    # What a job spanning a pod does when that pod is lost as a whole (power, switch;
    # ``control.podloss``): wait for it (or a pod elsewhere), requeue from its checkpoint,
    # or shrink to its other pods. None: requeue.
    on_pod_loss: str | None = None
    # Slurm's ``--time``: seconds the job may run once placed; past it the job fails with
    # "time limit reached" (``JobCommands.enforce_time_limits``). Only a job with a limit
    # may backfill onto chips a reservation holds later (``scheduler.reservations``).
    time_limit_s: float | None = None

    def to_dict(self) -> JsonObject:
        """The JSON form (the store's ``JobRecord.spec``, DescribeTrainingJob's spec fields).
        A fresh dict each call, built from one rendering kept with the (frozen) spec:
        ``asdict`` walks every field, and a job's view is rendered at each change."""
        return copy.deepcopy(self.view)

    @functools.cached_property
    def view(self) -> JsonObject:
        """``to_dict`` rendered once: shared, so read it and never change it."""
        d = asdict(self)
        if isinstance(self.parallelism, tuple):
            tp, pp, dp = self.parallelism
            d["parallelism"] = {"tp": tp, "pp": pp, "dp": dp}
        return d

    @property
    def tp(self) -> int | None:
        """The tensor-parallel degree the job fixed, None with ``parallelism: auto``."""
        return self.parallelism[0] if isinstance(self.parallelism, tuple) else None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSpec:
        """A stored spec (``to_dict``'s form, validated when it was submitted) back; fields
        this version does not know are left out, so an old row still loads."""
        known = cls.__dataclass_fields__
        vals = {k: v for k, v in d.items() if k in known}
        par = vals.get("parallelism", "auto")
        if isinstance(par, Mapping):
            vals["parallelism"] = (int(par["tp"]), int(par["pp"]), int(par["dp"]))
        elif isinstance(par, list | tuple):
            vals["parallelism"] = tuple(int(x) for x in par)
        elif par is None:
            vals["parallelism"] = "auto"
        for k in ("steps", "checkpoint_interval", "priority", "max_retries"):
            if vals.get(k) is None:
                vals.pop(k, None)
        if vals.get("grad_compression") is None:
            vals.pop("grad_compression", None)
        return cls(**vals)

    @classmethod
    def parse(cls, d: JsonObject) -> JobSpec:
        _refuse_unknown_fields(cls, d, "job field")
        vals = {k: v for k, v in d.items() if v is not None}
        par = vals.get("parallelism", "auto")
        if isinstance(par, dict):
            try:
                par = (int(par["tp"]), int(par["pp"]), int(par["dp"]))
            except (KeyError, TypeError, ValueError):
                raise InvalidInputError(
                    f"parallelism must be 'auto' or {{tp, pp, dp}} integers, got {par}",
                    field="parallelism", allowed=["auto", "{tp, pp, dp}"],
                ) from None
        elif isinstance(par, list | tuple):
            par = tuple(int(x) for x in par)
        vals["parallelism"] = par
        if "model" not in vals and "model_dims" in vals:
            vals["model"] = "custom"
        if "model" not in vals and "entrypoint" in vals:
            vals["model"] = "script"  # a label: the script defines its own model
        if "model" not in vals:
            raise InfeasibleError("model is required (a preset name, or model_dims)", field="model")
        if "chips" not in vals:
            raise InvalidInputError("chips is required", field="chips")
        if "grad_compression" in vals:
            vals["grad_compression"] = parse_grad_compression(vals["grad_compression"]).name
        spec = cls(**vals)
        spec.validate()
        return spec

    def validate(self) -> None:
        if not isinstance(self.chips, int) or self.chips < 1:
            raise InvalidInputError(f"chips must be a positive integer, got {self.chips}", field="chips")
        if not 1 <= self.steps <= 10**9:
            raise InvalidInputError(f"steps must be 1-1e9, got {self.steps}", field="steps")
        if not 0 <= self.checkpoint_interval <= 10**9:
            raise InvalidInputError(
                f"checkpoint_interval must be >= 0 (0 = never), got {self.checkpoint_interval}",
                field="checkpoint_interval",
            )
        if self.team is not None and (not isinstance(self.team, str) or not _TEAM_RE.match(self.team)):
            raise InvalidInputError(
                f"team {self.team!r} must be 1-63 chars of a-z, 0-9, '-' and '_'", field="team"
            )
        if self.queue is not None and (not isinstance(self.queue, str) or not _QUEUE_RE.match(self.queue)):
            raise InvalidInputError(f"queue {self.queue!r} must be 1-63 chars of a-z, 0-9 and '-'", field="queue")
        for fname in ("after_ok", "after_any"):
            deps = getattr(self, fname)
            if deps is not None and (not isinstance(deps, list) or not 1 <= len(deps) <= 100
                                     or not all(isinstance(d, str) and _DEP_RE.match(d) for d in deps)):
                raise InvalidInputError(f"{fname} must be 1-100 job ids (job-...), got {deps!r}", field=fname)
        for fname in ("topology_required", "topology_preferred"):
            level = getattr(self, fname)
            if level is not None and level not in ("pod", "block"):
                raise InvalidInputError(f"{fname} must be pod or block, got {level!r}", field=fname,
                                        allowed=["pod", "block"])
        if self.on_pod_loss is not None and self.on_pod_loss not in POD_LOSS_POLICIES:
            raise InvalidInputError(f"on_pod_loss must be one of {', '.join(POD_LOSS_POLICIES)}, got "
                                    f"{self.on_pod_loss!r}", field="on_pod_loss", allowed=list(POD_LOSS_POLICIES))
        if self.pods is not None and (not isinstance(self.pods, int) or isinstance(self.pods, bool)
                                      or self.pods < 1):
            raise InvalidInputError(f"pods must be a positive integer, got {self.pods!r}", field="pods")
        if self.pods is not None and self.chips % self.pods:
            # Both fields well formed, their combination impossible: a 422, like tp and chips.
            raise InfeasibleError(f"pods ({self.pods}) must be a divisor of chips ({self.chips}): the same "
                                  "number of chips on each pod", field="pods")
        if self.time_limit_s is not None and (isinstance(self.time_limit_s, bool)
                                              or not isinstance(self.time_limit_s, int | float)
                                              or not 0 < self.time_limit_s <= 10**9):
            raise InvalidInputError(f"time_limit_s must be > 0 seconds (at most 1e9), got {self.time_limit_s!r}",
                                    field="time_limit_s")
        if not isinstance(self.max_retries, int) or not 0 <= self.max_retries <= 100:
            raise InvalidInputError(f"max_retries must be 0-100, got {self.max_retries}", field="max_retries",
                                    allowed="0-100")
        parse_grad_compression(self.grad_compression)  # raises naming the valid modes
        if self.options is not None and not isinstance(self.options, dict):
            raise InvalidInputError("options must be an object of worker options", field="options")
        if not 0 <= self.priority <= MAX_PRIORITY:
            raise InvalidInputError(
                f"priority must be 0-{MAX_PRIORITY}, got {self.priority}", field="priority",
                allowed=f"0-{MAX_PRIORITY}",
            )
        if isinstance(self.parallelism, str):
            if self.parallelism != "auto":
                raise InvalidInputError(
                    f"parallelism must be 'auto' or TP,PP,DP, got {self.parallelism!r}",
                    field="parallelism", allowed=["auto", "TP,PP,DP"],
                )
        else:
            if len(self.parallelism) != 3 or any(x < 1 for x in self.parallelism):
                raise InvalidInputError(
                    f"parallelism needs three positive degrees TP,PP,DP, got {list(self.parallelism)}",
                    field="parallelism",
                )
            tp, pp, dp = self.parallelism
            if tp * pp * dp != self.chips:
                raise InfeasibleError(
                    f"tp*pp*dp ({tp}*{pp}*{dp} = {tp * pp * dp}) != chips ({self.chips})",
                    field="parallelism",
                )
