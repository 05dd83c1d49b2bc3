"""The framework: runs the configured plugins at each extension point for one job.

Fleet -> pod -> block: per-pod block summaries (which shapes are free under the
job-independent filters) are refreshed only for pods that changed; the pods that can
hold the job are ranked best-fit (fewest free chips first) and the first
``pods_to_score`` of them are scored block by block, as Kubernetes scores only a
sample of feasible nodes in a large cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from podfleet.errors import InvalidInputError
from podfleet.scheduler import status as st
from podfleet.scheduler.cores import cores_per_chip
from podfleet.scheduler.extension import (
    POINTS,
    AdmitPlugin,
    BindPlugin,
    Candidates,
    CycleState,
    FilterPlugin,
    Handle,
    PermitPlugin,
    Plugin,
    PostFilterPlugin,
    PreFilterPlugin,
    ReclaimPlugin,
    ReservePlugin,
    ScorePlugin,
)
from podfleet.scheduler.status import Code, Status
from podfleet.scheduler.types import JobRequest, Nomination, Placement, fmt_shape


@dataclass(frozen=True)
class PluginConfig:
    name: str
    weight: float = 1.0  # used by Score plugins only
    args: dict[str, Any] = field(default_factory=dict)


DEFAULT_PLUGINS: tuple[PluginConfig, ...] = (
    PluginConfig("queue_admission"),
    PluginConfig("hbm_fit"),
    PluginConfig("health_gate"),
    PluginConfig("spare_guard"),
    PluginConfig("topology_block", weight=2.0),
    PluginConfig("fragmentation", weight=1.0),
    PluginConfig("thermal_headroom", weight=0.5),
    PluginConfig("borrow_packing", weight=1.0),
    PluginConfig("preemption"),
    PluginConfig("reclaim"),
    PluginConfig("reservation"),
    PluginConfig("gang_permit"),
    PluginConfig("default_binder"),
)


@dataclass(frozen=True)
class FrameworkConfig:
    plugins: tuple[PluginConfig, ...] = DEFAULT_PLUGINS
    pods_to_score: int = 4

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FrameworkConfig:
        """``{"plugins": [{"name": ..., "weight": ..., "args": {...}}], "pods_to_score": 4}``."""
        plugins = tuple(
            PluginConfig(p) if isinstance(p, str) else PluginConfig(p["name"], float(p.get("weight", 1.0)), dict(p.get("args", {})))
            for p in d.get("plugins", [p.name for p in DEFAULT_PLUGINS])
        )
        pods = int(d.get("pods_to_score", 4))
        if pods < 1:
            raise InvalidInputError(f"pods_to_score must be >= 1, got {pods}", field="pods_to_score")
        return cls(plugins, pods)


class Framework:
    def __init__(self, handle: Handle, config: FrameworkConfig | None = None) -> None:
        from podfleet.scheduler.registry import build_plugin  # registry imports plugins

        self.handle = handle
        self.config = config or FrameworkConfig()
        self.admitters: list[AdmitPlugin] = []
        self.reclaimers: list[ReclaimPlugin] = []
        self.pre_filters: list[PreFilterPlugin] = []
        self.filters: list[FilterPlugin] = []
        self.post_filters: list[PostFilterPlugin] = []
        self.scorers: list[ScorePlugin] = []
        self.reservers: list[ReservePlugin] = []
        self.permitters: list[PermitPlugin] = []
        self.binders: list[BindPlugin] = []
        # The same lists by extension-point name (as in ``extension.POINTS``), for introspection.
        self.points: dict[str, list[Any]] = {
            "admit": self.admitters, "reclaim": self.reclaimers, "pre_filter": self.pre_filters, "filter": self.filters, "post_filter": self.post_filters,
            "score": self.scorers, "reserve": self.reservers, "permit": self.permitters, "bind": self.binders,
        }
        self.weights: dict[str, float] = {}
        for pc in self.config.plugins:
            plugin = build_plugin(pc.name, handle, pc.args)
            self.weights[plugin.name] = pc.weight
            self._add(plugin)
        if len(self.binders) < 1:
            raise InvalidInputError("the plugin configuration needs a bind plugin", field="plugins")
        cl = handle.cluster
        n_pods, idx = len(cl.pods), cl.blocks
        self._usable = np.zeros((n_pods, cl.chips_per_pod), dtype=bool)
        self._free = np.zeros((n_pods, idx.n_blocks), dtype=bool)
        self._shape_free = np.zeros((n_pods, len(idx.shapes)), dtype=bool)
        self._free_count = np.zeros(n_pods, dtype=np.int64)
        self._job_filters = [f for f in self.filters if f.job_dependent]
        self._static_filters = [f for f in self.filters if not f.job_dependent]

    def _add(self, plugin: Plugin) -> None:
        """File ``plugin`` under every extension point whose Protocol it implements
        (``extension.POINTS``: the same names as ``self.points``)."""
        for point, protocol in POINTS.items():
            if isinstance(plugin, protocol):
                self.points[point].append(plugin)

    # --- pod summaries ---------------------------------------------------------------
    def refresh(self) -> None:
        cl = self.handle.cluster
        if not cl.dirty:
            return
        pods = np.fromiter(sorted(cl.dirty), dtype=np.int64)
        cl.dirty.clear()
        for p in pods:
            pod = cl.pods[p]
            mask = pod.free_mask()
            for f in self._static_filters:
                s, m = f.filter({}, None, pod)
                if s.code is not Code.SKIP:
                    mask &= m
            self._usable[p] = mask
        free = cl.blocks.free_many(self._usable[pods])
        self._free[pods] = free
        self._shape_free[pods] = cl.blocks.shape_free(free)
        self._free_count[pods] = self._usable[pods].sum(axis=1)

    def largest_free_shape(self, pod: int) -> tuple[int, ...] | None:
        self.refresh()
        return self.handle.cluster.blocks.largest_free_shape(self._free[pod])

    def free_counts(self) -> np.ndarray:
        self.refresh()
        return self._free_count

    def summaries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(free blocks [pod, block], free shapes [pod, shape], usable free chips [pod]),
        up to date, under the job-independent filters (read only: ``scheduler.fleet``)."""
        self.refresh()
        return self._free, self._shape_free, self._free_count

    def job_free(self, state: CycleState, job: JobRequest, pod: int) -> tuple[Status, np.ndarray]:
        """Free blocks of ``pod`` for this job: the summary narrowed by the job-dependent
        filters (memory, ...); a filter's refusal is returned as its status."""
        s, mask = self._job_mask(state, job, pod)
        if s.code is not Code.SUCCESS or mask is None:
            return s, self._free[pod]
        return s, self.handle.cluster.blocks.free(mask)

    def _job_mask(self, state: CycleState, job: JobRequest, pod: int) -> tuple[Status, np.ndarray | None]:
        """The pod's usable chips narrowed by the job-dependent filters (None: none of them
        narrowed it), or the first refusal."""
        mask, narrowed = self._usable[pod], False
        for f in self._job_filters:
            s, m = f.filter(state, job, self.handle.cluster.pods[pod])
            if s.code is Code.SKIP:
                continue
            if s.code is not Code.SUCCESS:
                return s.by(f.name), None
            mask, narrowed = mask & m, True
        return st.SUCCESS, (mask if narrowed else None)

    # --- one cycle ---------------------------------------------------------------------
    def admit(self, state: CycleState, job: JobRequest) -> Status:
        """Quota admission: the first plugin that does not admit decides."""
        for p in self.admitters:
            s = p.admit(state, job)
            if s.code is not Code.SUCCESS and s.code is not Code.SKIP:
                return s.by(p.name)
        return st.SUCCESS

    def reclaim(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[Status, Nomination | None]:
        last = st.unschedulable(diagnosis + "; no reclaim plugin is configured")
        for p in self.reclaimers:
            s, result = p.reclaim(state, job, diagnosis)
            if s.ok:
                return s.by(p.name), result
            last = s.by(p.name)
        return last, None

    def pre_filter(self, state: CycleState, job: JobRequest) -> Status:
        idx = self.handle.cluster.blocks
        if not idx.shape_ids_for(job.chips, job.shape):
            dims = fmt_shape(idx.dims)
            if job.chips > idx.n_chips:
                why = (f"job asks {job.chips} chips; a pod has {idx.n_chips} ({dims}) and this cluster is one pod "
                       "(a fleet cluster, created with pods, places gangs across pods)")
            elif job.shape is not None:
                why = f"block shape {fmt_shape(job.shape)} does not fit a {dims} pod"
            else:
                why = f"no contiguous block of {job.chips} chips fits a {dims} pod"
            return st.unresolvable(why).by("framework")
        for p in self.pre_filters:
            s = p.pre_filter(state, job)
            if s.code is not Code.SUCCESS and s.code is not Code.SKIP:
                return s.by(p.name)
        return st.SUCCESS

    def find(self, state: CycleState, job: JobRequest) -> tuple[Status, Candidates | None]:
        """Filter: candidate blocks on up to ``pods_to_score`` pods, or why there are none."""
        self.refresh()
        cl = self.handle.cluster
        idx = cl.blocks
        sids = idx.shape_ids_for(job.chips, job.shape)
        feasible = np.flatnonzero(self._shape_free[:, sids].any(axis=1))
        # Best fit: the fullest pods that can still hold the job (stable: ties keep pod order).
        feasible = feasible[np.argsort(self._free_count[feasible], kind="stable")]
        picked_pods: list[int] = []
        free_by_pod: dict[int, np.ndarray] = {}
        for p in feasible:
            free = self._free[p]
            if self._job_filters:
                s, mask = self._job_mask(state, job, int(p))
                if s.code is not Code.SUCCESS:
                    return s, None
                if mask is not None:
                    free = idx.free(mask)
                    if not idx.shape_free(free)[sids].any():
                        continue
            picked_pods.append(int(p))
            free_by_pod[int(p)] = free
            if len(picked_pods) >= self.config.pods_to_score:
                break
        if not picked_pods:
            return st.unschedulable(self.diagnose(job)).by("framework"), None
        # All candidate blocks of the picked pods in one gather (blocks of one size share a table).
        ids, chips = idx.blocks_for(job.chips, job.shape)
        free_rows = np.stack([free_by_pod[p] for p in picked_pods])
        pos, j = np.nonzero(free_rows[:, ids])
        pods = np.asarray(picked_pods)
        cands = Candidates(pods[pos], ids[j], idx.block_shape[ids[j]], chips[j], pods, pos, free_rows, cl)
        return st.SUCCESS, cands

    def diagnose(self, job: JobRequest) -> str:
        """The pending reason: what is missing and the best the cluster has now."""
        self.refresh()
        cl = self.handle.cluster
        other = ""
        if job.shape:
            want = fmt_shape(job.shape)
        else:
            from podfleet.scheduler.plugins.topology_block import preferred_shape

            pref = preferred_shape(cl.pods[0].grid, job.chips, job.tp, job.comm)
            n_shapes = len(cl.blocks.shape_ids_for(job.chips))
            want = fmt_shape(pref)
            other = f" (nor any other {job.chips}-chip shape)" if n_shapes > 1 else ""
        best = int(np.argmax(self._free_count)) if len(cl.pods) else 0
        pod = cl.pods[best]
        largest = cl.blocks.largest_free_shape(self._free[best])
        where = "" if len(cl.pods) == 1 else f" in any pod (best pod {best})"
        # The block's own size beside its shape, then the pod's counts: "largest free block
        # 2x4x3 (24 chips); 30 usable chips free" never reads as a 30-chip block.
        size = int(np.prod(largest)) if largest else 0
        parts = [f"no free {want} block{where}{other}; largest free block {fmt_shape(largest)} ({size} chips)"]
        parts.append(f"{int(self._free_count[best])} usable chips free")
        held = int((pod.owner >= 0).sum())
        if held:
            parts.append(f"{held} allocated")
        if pod.spare.any():
            parts.append(f"{int(pod.spare.sum())} spare")
        unhealthy = int((~pod.healthy).sum())
        if unhealthy:
            parts.append(f"{unhealthy} unhealthy")
        return parts[0] + "; " + ", ".join(parts[1:])

    def score(self, state: CycleState, job: JobRequest, cands: Candidates) -> tuple[Status, np.ndarray]:
        total = np.zeros(len(cands))
        for p in self.scorers:
            s, scores = p.score(state, job, cands)
            if s.code is Code.SKIP:
                continue
            if s.code is not Code.SUCCESS:
                return s.by(p.name), total
            total += self.weights[p.name] * np.clip(scores, 0.0, 100.0)
        return st.SUCCESS, total

    def select(self, state: CycleState, job: JobRequest, cands: Candidates, scores: np.ndarray) -> Placement:
        i = int(np.argmax(scores))  # ties: first = best-fit pod, then block order
        cl = self.handle.cluster
        idx = cl.blocks
        pod = int(cands.pod[i])
        local = tuple(int(c) for c in cands.chips[i])
        shape = idx.shapes[int(cands.shape_id[i])].shape
        plan = state.get("plans", {}).get(shape)
        offset = tuple(int(v) for v in idx.block_offset[int(cands.block[i])])
        if plan is not None and cl.bad_link_pods:
            # The block holds a bad link: its plan pays the detour (or the narrower link).
            from podfleet.scheduler.links import block_links, plan_on_block

            bad = block_links(cl.pods[pod], int(cands.block[i]))
            if bad:
                plan = plan_on_block(plan, job.model, cl.pods[pod].grid, shape, offset, bad)
        return Placement(
            job_id=job.job_id,
            pod=pod,
            chips=cl.global_chips(pod, local),
            local_chips=local,
            shape=shape,
            offset=offset,
            cores_per_chip=cores_per_chip(cl.pods[pod].grid.chip_type),
            score=float(scores[i]),
            plan=plan,
            reason=f"block {fmt_shape(shape)} on pod {pod}",
        )

    def post_filter(self, state: CycleState, job: JobRequest, diagnosis: str) -> tuple[Status, Nomination | None]:
        last = st.unschedulable(diagnosis)
        for p in self.post_filters:
            s, result = p.post_filter(state, job, diagnosis)
            if s.ok:
                return s.by(p.name), result
            if s.code is not Code.SKIP:  # a plugin that does not apply leaves the reason as it was
                last = s.by(p.name)  # its reason extends the diagnosis (why preemption did not help)
        return last, None

    def reserve(self, state: CycleState, job: JobRequest, placement: Placement) -> Status:
        for p in self.reservers:
            s = p.reserve(state, job, placement)
            if not s.ok:
                self.unreserve(state, job, placement)
                return s.by(p.name)
        return st.SUCCESS

    def unreserve(self, state: CycleState, job: JobRequest, placement: Placement) -> None:
        for p in reversed(self.reservers):
            p.unreserve(state, job, placement)

    def permit(self, state: CycleState, job: JobRequest, placement: Placement) -> Status:
        waiting: Status | None = None
        for p in self.permitters:
            s = p.permit(state, job, placement)
            if s.code is Code.WAIT:
                waiting = s.by(p.name)
            elif s.rejected:
                return s.by(p.name)
        return waiting or st.SUCCESS

    def bind(self, state: CycleState, job: JobRequest, placement: Placement) -> Status:
        for p in self.binders:
            s = p.bind(state, job, placement)
            if s.code is Code.SKIP:
                continue
            return s.by(p.name)
        return st.error("no bind plugin accepted the job")


# Re-exported for type checkers of plugin modules.
__all__ = [
    "AdmitPlugin",
    "BindPlugin",
    "Candidates",
    "CycleState",
    "FilterPlugin",
    "Framework",
    "FrameworkConfig",
    "Handle",
    "PermitPlugin",
    "Plugin",
    "PluginConfig",
    "PostFilterPlugin",
    "PreFilterPlugin",
    "ReclaimPlugin",
    "ReservePlugin",
    "ScorePlugin",
]
