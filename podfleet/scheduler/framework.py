"""The framework: runs the configured plugins at each extension point for one job.

Fleet -> pod -> block: per-pod block summaries (which shapes are free under the
job-independent filters) are refreshed only for pods that changed; the pods that can
hold the job are ranked best-fit (fewest free chips first) and the first
``pods_to_score`` of them are scored block by block, as Kubernetes scores only a
sample of feasible nodes in a large cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    FleetPostFilterPlugin,
    Handle,
    PermitPlugin,
    Plugin,
    PodsFilterPlugin,
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
    PluginConfig("reservation_window"),
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


_PATTERNS = 4096  # usable-chip patterns whose summaries a framework keeps (9 MB for a 4x4x4 pod)


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
        self._size_free = np.zeros((n_pods, len(idx.sizes)), dtype=bool)
        self._size_count = np.zeros(len(idx.sizes), dtype=np.int64)  # pods with a free block of each size
        self._with_free = 0  # pods with a usable chip free
        # Summaries by usable-chip pattern (pods of <= 64 chips): a fleet's pods are mostly
        # wholly free or wholly held, so most refreshed pods repeat a pattern already seen.
        self._patterns: dict[int, int] = {}  # pattern -> its row in the two tables below
        self._pattern_free = np.zeros((0, idx.n_blocks), dtype=bool)
        self._pattern_shapes = np.zeros((0, len(idx.shapes)), dtype=bool)
        self._pattern_sizes = np.zeros((0, len(idx.sizes)), dtype=bool)
        self._job_filters = [f for f in self.filters if f.job_dependent]
        self._static_filters = [f for f in self.filters if not f.job_dependent]
        # Which filters answer for many pods in one call (asked once, by the Protocol they declare).
        self._batch: dict[int, PodsFilterPlugin] = {id(f): f for f in self.filters if isinstance(f, PodsFilterPlugin)}
        # Asked once here: a runtime-checkable Protocol's isinstance reads every member.
        self._fleet_post_filters = [p for p in self.post_filters if isinstance(p, FleetPostFilterPlugin)]

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
        pods = np.fromiter(sorted(cl.dirty), dtype=np.int64, count=len(cl.dirty))
        cl.dirty.clear()
        # Every changed pod at once: a gang across pods changes tens of them per bind.
        _, mask, _ = self._filter_pods(self._static_filters, {}, None, pods, cl.arrays.free(pods))
        self._usable[pods] = mask
        idx = cl.blocks
        if idx.bits is None or len(cl.pods) == 1:  # one pod's patterns seldom repeat
            free = idx.free_many(mask)
            shape_free = idx.shape_free(free)
            size_free = idx.size_free(shape_free)
        else:
            free, shape_free, size_free = self._by_pattern(idx.pack(mask))
        self._free[pods] = free
        self._shape_free[pods] = shape_free
        count = np.count_nonzero(mask, axis=1)  # count_nonzero: bools counted without a cast
        self._with_free += int(np.count_nonzero(count)) - int(np.count_nonzero(self._free_count[pods]))
        self._free_count[pods] = count
        self._size_count += np.count_nonzero(size_free, axis=0) - np.count_nonzero(self._size_free[pods], axis=0)
        self._size_free[pods] = size_free

    def _by_pattern(self, patterns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(free blocks, free shapes, free sizes) per row of usable-chip bit patterns, each
        new pattern computed once (one AND over the index for all of them) and remembered."""
        idx = self.handle.cluster.blocks
        keys = patterns.tolist()
        new = sorted({k for k in keys if k not in self._patterns})
        if new:
            base = len(self._patterns)
            if base + len(new) > _PATTERNS:  # bounded: forget and start over
                self._patterns.clear()
                base = 0
            need = base + len(new)
            if need > len(self._pattern_free):  # the tables grow by doubling, not per pattern
                cap = min(_PATTERNS, max(need, 2 * len(self._pattern_free), 64))
                grown = np.zeros((cap, idx.n_blocks), dtype=bool)
                grown_shapes = np.zeros((cap, len(idx.shapes)), dtype=bool)
                grown_sizes = np.zeros((cap, len(idx.sizes)), dtype=bool)
                grown[:base], grown_shapes[:base] = self._pattern_free[:base], self._pattern_shapes[:base]
                grown_sizes[:base] = self._pattern_sizes[:base]
                self._pattern_free, self._pattern_shapes, self._pattern_sizes = grown, grown_shapes, grown_sizes
            usable = (np.asarray(new, dtype=np.uint64)[:, None] >> np.arange(idx.n_chips, dtype=np.uint64)) & 1
            free = idx.free_many(usable.astype(bool))
            self._pattern_free[base:need] = free
            shapes = idx.shape_free(free)
            self._pattern_shapes[base:need] = shapes
            self._pattern_sizes[base:need] = idx.size_free(shapes)
            self._patterns.update((k, base + i) for i, k in enumerate(new))
        rows = np.fromiter((self._patterns[k] for k in keys), dtype=np.int64, count=len(keys))
        return self._pattern_free[rows], self._pattern_shapes[rows], self._pattern_sizes[rows]

    def _filter_pods(self, filters: Sequence[FilterPlugin], state: CycleState, job: JobRequest | None,
                     pods: np.ndarray, mask: np.ndarray) -> tuple[Status, np.ndarray, bool]:
        """``mask`` [len(pods), chips] narrowed by ``filters``, and whether any narrowed it;
        the first refusal is returned as its status (with the mask so far). Filters that
        answer for many pods are asked once, the others pod by pod."""
        cl = self.handle.cluster
        narrowed = False
        for f in filters:
            batch = self._batch.get(id(f))
            if batch is not None:
                s, m = batch.filter_pods(state, job, cl, pods)
                if s.code is Code.SKIP:
                    continue
                if s.code is not Code.SUCCESS:
                    return s.by(f.name), mask, narrowed
                mask, narrowed = mask & m, True
                continue
            for i, p in enumerate(pods.tolist()):
                s, m = f.filter(state, job, cl.pods[p])
                if s.code is Code.SKIP:
                    continue
                if s.code is not Code.SUCCESS:
                    return s.by(f.name), mask, narrowed
                mask[i] &= m
                narrowed = True
        return st.SUCCESS, mask, narrowed

    def largest_free_shape(self, pod: int) -> tuple[int, ...] | None:
        self.refresh()
        return self.handle.cluster.blocks.largest_free_shape(self._free[pod])

    def free_counts(self) -> np.ndarray:
        self.refresh()
        return self._free_count

    def size_summary(self) -> tuple[np.ndarray, np.ndarray]:
        """(free sizes [pod, size], pods with a free block of each size [size]), sizes as
        ``blocks.sizes``, up to date (read only)."""
        self.refresh()
        return self._size_free, self._size_count

    def pods_with_free(self) -> int:
        """How many pods have a usable chip free (kept as pods change, not counted)."""
        self.refresh()
        return self._with_free

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

    def job_free_pods(self, state: CycleState, job: JobRequest, pods: np.ndarray,
                      blocks: slice | np.ndarray | None = None) -> tuple[Status, np.ndarray]:
        """``job_free`` for many pods at once: free blocks [len(pods), n_blocks], or only
        the columns ``blocks`` (a slice of block ids gathers a fraction of each row)."""
        self.refresh()
        cols = slice(None) if blocks is None else blocks
        if not self._job_filters:
            return st.SUCCESS, self._free[pods, cols]
        s, mask, narrowed = self._filter_pods(self._job_filters, state, job, pods, self._usable[pods])
        if not s.ok or not narrowed:
            return s, self._free[pods, cols]
        return st.SUCCESS, self.handle.cluster.blocks.free_many(mask)[:, cols]

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
        out = parts[0] + "; " + ", ".join(parts[1:])
        kept = self.handle.reservations.explain(job, self.handle.now_s()) if self.handle.reservations else ""
        return out + "; " + kept if kept else out

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

    def post_filter_across_pods(self, state: CycleState, job: JobRequest,
                                diagnosis: str) -> tuple[Status, Nomination | None]:
        """``post_filter`` for a gang across pods: the PostFilter plugins that can free room
        on several pods (``FleetPostFilterPlugin``); the others (a one-pod reclaim) do not apply."""
        last = st.unschedulable(diagnosis)
        for p in self._fleet_post_filters:
            s, result = p.post_filter_across_pods(state, job, diagnosis)
            if s.ok:
                return s.by(p.name), result
            if s.code is not Code.SKIP:
                last = s.by(p.name)
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
