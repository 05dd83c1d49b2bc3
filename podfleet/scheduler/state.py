"""The scheduler's view of the hardware: per-pod numpy arrays, one writer.

``owner[chip]`` is the slot of the job holding the chip (-1 free); ``nominated[chip]`` is
the slot of a preemptor waiting for that chip's victim to checkpoint. Every change bumps
the pod's ``version`` and marks it dirty so the framework refreshes only that pod's
block summary.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.fabric.base import ChipState
from podfleet.hardware.catalog import custom_grid
from podfleet.hardware.specs import CHIPS, get_chip
from podfleet.hardware.topology import FleetTopology, GridTopology, Topology
from podfleet.scheduler.blocks import BlockIndex, block_index

FREE = -1
AMBIENT_C = 35.0
THROTTLE_C = 95.0  # thermal limit used for headroom; a parameter (not published for trn2)


def pod_grid(group: Topology) -> GridTopology:
    """The grid the scheduler indexes blocks on; a switched node is a 1-D line of chips."""
    if isinstance(group, GridTopology):
        return group
    # Worker slots of a real fabric (chip type "cpu"/"cuda") have no chip spec; the line grid
    # only shapes block search, so it borrows trn2's.
    chip_type = group.chip_type if group.chip_type in CHIPS else "trn2"
    return custom_grid([group.n_chips], chip_type, wrap=False, name=f"{group.name}-line")


class ChipArrays:
    """The chip arrays of every pod of a cluster, [pods, chips per pod]: a pod's arrays
    are rows of these (views), so a fleet-wide question (which chips of these 64 pods
    are free?) is one numpy expression rather than a loop over pods."""

    def __init__(self, pods: int, n: int, hbm_bytes: int) -> None:
        self.owner = np.full((pods, n), FREE, dtype=np.int64)
        self.nominated = np.full((pods, n), FREE, dtype=np.int64)
        self.spare = np.zeros((pods, n), dtype=bool)
        self.healthy = np.ones((pods, n), dtype=bool)
        self.hbm_bytes = np.full((pods, n), hbm_bytes, dtype=np.int64)
        # The same owners and nominations by global chip (pod * n + local chip): views (the
        # arrays are contiguous and never rebound), so a gang's thousands of chips are one
        # flat gather or scatter.
        self.flat_owner = self.owner.reshape(-1)
        self.flat_nominated = self.nominated.reshape(-1)

    def free(self, pods: np.ndarray) -> np.ndarray:
        """bool [len(pods), n]: chips neither held nor nominated."""
        free: np.ndarray = (self.owner[pods] == FREE) & (self.nominated[pods] == FREE)
        return free


class PodState:
    def __init__(self, index: int, grid: GridTopology, blocks: BlockIndex, *, uniform_hops: bool = False,
                 arrays: ChipArrays | None = None) -> None:
        n = grid.n_chips
        self.index = index
        self.grid = grid
        self.blocks = blocks
        self.uniform_hops = uniform_hops  # switched: every pair one hop apart
        self.n_chips = n
        spec = get_chip(grid.chip_type)
        row = index if arrays is not None else 0
        arrays = arrays or ChipArrays(1, n, spec.hbm_bytes)
        # Rows of the cluster's arrays: written in place only (never rebound), so both views agree.
        self.owner = arrays.owner[row]
        self.nominated = arrays.nominated[row]
        self.spare = arrays.spare[row]
        self.chip_state = [ChipState.HEALTHY] * n
        self.healthy = arrays.healthy[row]
        self.hbm_bytes = arrays.hbm_bytes[row]
        self.temperature_c = np.full(n, AMBIENT_C)
        self.power_w = np.zeros(n)
        self.forecast_power_w = np.zeros(n)  # predicted demand of the jobs on each chip
        self.tdp_w = spec.tdp_w
        self.version = 0
        self.telemetry_version = 0  # bumped when temperature / power arrays change
        self.cache: dict[str, tuple[int, np.ndarray]] = {}  # plugin -> (version it was derived at, array)
        # Links of this pod's grid (local link index) that are not up: "degraded" / "down".
        # Kept apart from ``version``: link states change scores, not which blocks are free.
        self.bad_links: dict[int, str] = {}
        self.link_version = 0
        # Ring edges of running jobs on each directed local link (2 * link + direction;
        # ``scheduler.traffic``); None while nobody reported traffic on this pod.
        self.link_traffic: np.ndarray | None = None

    def free_mask(self) -> np.ndarray:
        free: np.ndarray = (self.owner == FREE) & (self.nominated == FREE)
        return free


class SchedulerView:
    """The scheduler's view of one cluster: every pod's arrays (one pod for a grid topology,
    ``count`` for a fleet), the block index and which pods changed."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        group = topology.group if isinstance(topology, FleetTopology) else topology
        count = topology.count if isinstance(topology, FleetTopology) else 1
        grid = pod_grid(group)
        self.blocks = block_index(grid)
        self.chips_per_pod = grid.n_chips
        self.arrays = ChipArrays(count, grid.n_chips, get_chip(grid.chip_type).hbm_bytes)
        self.pods = [
            PodState(p, grid, self.blocks, uniform_hops=not isinstance(group, GridTopology), arrays=self.arrays)
            for p in range(count)
        ]
        self.dirty: set[int] = set(range(count))
        # Link indices run pod by pod (a fleet numbers pod p's links from p * links_per_pod),
        # as the fabrics number them. A switched node has no torus links to avoid.
        self.links_per_pod = 0 if self.pods[0].uniform_hops else len(grid.links)
        self.bad_link_pods: set[int] = set()  # pods with a link not up: the only ones scored for it
        self.traffic_pods: set[int] = set()  # pods with traffic on some link: the only ones scored for it
        self._traffic_rows: np.ndarray | None = None  # the load set_link_traffic was last given, per pod

    @property
    def n_chips(self) -> int:
        return self.chips_per_pod * len(self.pods)

    def locate(self, chip: int) -> tuple[PodState, int]:
        if not 0 <= chip < self.n_chips:
            raise NotFoundError(
                f"chip {chip} does not exist; valid chips are 0-{self.n_chips - 1}", field="chip"
            )
        p, local = divmod(chip, self.chips_per_pod)
        return self.pods[p], local

    def global_chips(self, pod: int, local: np.ndarray | tuple[int, ...]) -> tuple[int, ...]:
        return tuple((np.asarray(local, dtype=np.int64) + pod * self.chips_per_pod).tolist())

    def touch(self, pod: PodState) -> None:
        pod.version += 1
        self.dirty.add(pod.index)

    def touch_pods(self, pods: Sequence[int]) -> None:
        for p in pods:
            self.pods[p].version += 1
        self.dirty.update(pods)

    def release(self, slot: int, pods: Sequence[int]) -> None:
        """Free every chip ``slot`` holds on ``pods`` (one gather and scatter for a gang
        across many pods); only the pods where it held a chip change."""
        rows = np.asarray(pods, dtype=np.int64)
        held = self.arrays.owner[rows]
        mine = held == slot
        hit = mine.any(axis=1)
        if not hit.any():
            return
        held[mine] = FREE
        self.arrays.owner[rows[hit]] = held[hit]
        self.touch_pods(rows[hit].tolist())

    # --- operator / telemetry inputs ----------------------------------------------
    def set_spares(self, chips: tuple[int, ...]) -> None:
        for pod in self.pods:
            pod.spare[:] = False
            self.touch(pod)
        for c in chips:
            pod, local = self.locate(c)
            if pod.owner[local] != FREE:
                raise InvalidInputError(f"chip {c} is allocated and cannot be a spare", field="spares")
            pod.spare[local] = True

    def set_chip_state(self, chip: int, state: ChipState) -> None:
        pod, local = self.locate(chip)
        pod.chip_state[local] = ChipState(state)
        pod.healthy[local] = state is ChipState.HEALTHY
        self.touch(pod)

    def set_link_states(self, states: Sequence[str]) -> bool:
        """One state per link ("up", "degraded", "down"), indexed as ``topology.links``
        (pod by pod in a fleet). True when any pod's bad links changed."""
        per = self.links_per_pod
        if not per:
            return False  # switched: every pair one hop apart, nothing to avoid
        if len(states) != per * len(self.pods):
            raise InvalidInputError(
                f"link states need {per * len(self.pods)} values, got {len(states)}", field="links"
            )
        bad: dict[int, dict[int, str]] = {}
        for i in [i for i, s in enumerate(states) if s != "up"]:  # usually none: one fast pass
            v = str(states[i])
            if v not in ("degraded", "down"):
                raise InvalidInputError(f"link {i} state must be up, degraded or down; got {v!r}", field="links")
            p, local = divmod(i, per)
            bad.setdefault(p, {})[local] = v
        changed = False
        for p in self.bad_link_pods | set(bad):
            pod, now = self.pods[p], bad.get(p, {})
            if pod.bad_links != now:
                pod.bad_links = now
                pod.link_version += 1
                changed = True
        self.bad_link_pods = set(bad)
        return changed

    def set_link_traffic(self, load: np.ndarray) -> bool:
        """Ring edges of the running jobs on each directed link (``2 * link + direction``,
        links indexed as ``topology.links``, pod by pod in a fleet): what traffic-aware
        scoring (``scheduler.traffic``) counts as in use. True when any pod's changed."""
        per = 2 * self.links_per_pod
        if not per:
            return False
        load = np.asarray(load, dtype=np.float64)
        if load.shape != (per * len(self.pods),):
            raise InvalidInputError(f"link traffic needs {per * len(self.pods)} values (two per link), "
                                    f"got {load.size}", field="traffic")
        rows = load.reshape(len(self.pods), per)
        busy = set(np.flatnonzero(rows.any(axis=1)).tolist())
        last = self._traffic_rows
        # Only pods whose load moved since the last call (one pass over the whole array):
        # a fleet compared pod by pod cost milliseconds with a few hundred jobs running.
        moved = (self.traffic_pods | busy if last is None or last.shape != rows.shape
                 else set(np.flatnonzero((rows != last).any(axis=1)).tolist()))
        self._traffic_rows = rows.copy()
        changed = False
        for p in moved:
            pod = self.pods[p]
            now = load[p * per:(p + 1) * per].copy() if p in busy else None
            same = (now is None and pod.link_traffic is None) or (
                now is not None and pod.link_traffic is not None and np.array_equal(now, pod.link_traffic))
            if not same:
                pod.link_traffic = now
                changed = True
        self.traffic_pods = busy
        return changed

    def set_telemetry(
        self,
        temperature_c: np.ndarray | None = None,
        power_w: np.ndarray | None = None,
        forecast_power_w: np.ndarray | None = None,
    ) -> None:
        """Arrays over all chips of the cluster (scores only; no summary refresh needed)."""
        per = self.chips_per_pod
        for name, arr in (
            ("temperature_c", temperature_c),
            ("power_w", power_w),
            ("forecast_power_w", forecast_power_w),
        ):
            if arr is None:
                continue
            arr = np.asarray(arr, dtype=float)
            if arr.shape != (self.n_chips,):
                raise InvalidInputError(
                    f"{name} needs {self.n_chips} values, got {arr.shape}", field=name
                )
            for pod in self.pods:
                getattr(pod, name)[:] = arr[pod.index * per : (pod.index + 1) * per]
                pod.telemetry_version += 1
