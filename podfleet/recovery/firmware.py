"""Rolling firmware updates: one chip (or one 16-chip node) at a time, a spare taking
over its work first, a health check after each, automatic rollback on a failed one.

On a fleet (several pods) the rollout goes pod by pod: no batch spans two pods (a
tensor-parallel group that a recovery spread over two is updated as one part per pod),
and a pod is finished, the ranks it moved out brought home, before the next one starts,
so at most one pod's jobs are disturbed at a time. ``pods`` is the order, ``pods_done``
and ``current_pod`` the progress.

    fw = FirmwareRollouts(fabric, timeline, orchestrator)
    r = fw.start("2.22.0", unit="chip" | "node", chips=None)   # UnknownNameError / ConflictError
    fw.get(r.id).to_dict()   # state, progress, done, current, failed_chip, interruptions

Validation happens before anything changes: an unknown version or a rollout already
running raises and leaves every chip as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import simpy

from podfleet.engine.timeline import Timeline
from podfleet.errors import ConflictError, InvalidInputError, NotFoundError, UnknownNameError
from podfleet.fabric.base import ChipState, FabricEvent, FirmwareUpdate
from podfleet.hardware.specs import FIRMWARE_VERSIONS
from podfleet.hardware.topology import FleetTopology, Topology
from podfleet.recovery.context import USABLE, RecoveryFabric
from podfleet.recovery.orchestrator import RecoveryOrchestrator
from podfleet.recovery.spares import tp_group, whole_groups
from podfleet.states import check_transition, transitions
from podfleet.wire import JsonObject

KNOWN_VERSIONS = FIRMWARE_VERSIONS
UNITS = ("chip", "node")
NODE_CHIPS = 16


def pod_batches(todo: list[int], topology: Topology, make: Callable[[list[int]], list[list[int]]],
                ) -> tuple[list[list[int]], list[int], list[int]]:
    """``make``'s batches of ``todo``; on a fleet made pod by pod from each pod's own chips
    (so none spans two pods), with the pods in order (first named first) and the index
    after each pod's last batch."""
    if not isinstance(topology, FleetTopology):
        return make(todo), [], []
    pods = list(dict.fromkeys(topology.split_pod(c) for c in todo))
    batches: list[list[int]] = []
    ends: list[int] = []
    for pod in pods:
        batches.extend(make([c for c in todo if topology.split_pod(c) == pod]))
        ends.append(len(batches))
    return batches, pods, ends


class RolloutState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    ROLLED_BACK = "rolled-back"


ROLLOUT_TRANSITIONS = transitions(RolloutState, {
    RolloutState.RUNNING: {RolloutState.SUCCEEDED, RolloutState.ROLLED_BACK},
})


@dataclass
class Rollout:
    id: str
    version: str
    unit: str
    batches: list[list[int]]
    t_start: float
    state: RolloutState = RolloutState.RUNNING
    done: list[int] = field(default_factory=list)
    current: list[int] = field(default_factory=list)
    previous: dict[int, str] = field(default_factory=dict)
    failed_chip: int | None = None
    skipped: list[int] = field(default_factory=list)  # out of service at their turn (isolated/failed)
    reason: str = ""
    t_end: float | None = None
    interruptions_s: list[float] = field(default_factory=list)
    # Fleets: the pods in update order, those finished, and the one being updated.
    pods: list[int] = field(default_factory=list)
    pods_done: list[int] = field(default_factory=list)
    current_pod: int | None = None
    pod_ends: list[int] = field(default_factory=list)  # index after each pod's last batch

    @property
    def total(self) -> int:
        return sum(len(b) for b in self.batches)

    def to_dict(self) -> JsonObject:
        d = asdict(self)
        d["state"] = self.state.value
        d["progress"] = round(len(self.done) / self.total, 4) if self.total else 1.0
        d["previous"] = {str(k): v for k, v in self.previous.items()}
        d.pop("batches")
        d.pop("pod_ends")
        d["chips"] = self.total
        return d


@runtime_checkable
class RolloutFabric(RecoveryFabric, FirmwareUpdate, Protocol):
    """What a rollout drives: rank moves (through the orchestrator) and firmware updates;
    each chip's version is ``chip_metrics()["firmware_version"]``."""


class FirmwareRollouts:
    def __init__(self, fabric: RolloutFabric, timeline: Timeline, orchestrator: RecoveryOrchestrator, *,
                 versions: tuple[str, ...] = KNOWN_VERSIONS, update_s: float = 60.0, failure_p: float = 0.0,
                 settle_s: float = 5.0, before_batch: Callable[[], object] | None = None,
                 audit: Callable[[str, str, JsonObject], object] | None = None) -> None:
        self.fab, self.tl, self.orch = fabric, timeline, orchestrator
        # (result, target, detail) of each automatic step: a batch updated, the rollout's end.
        self.audit = audit
        self.versions = versions
        self.update_s, self.failure_p, self.settle_s = update_s, failure_p, settle_s
        self.before_batch = before_batch  # e.g. put jobs started meanwhile under the orchestrator
        self.rollouts: dict[str, Rollout] = {}
        self._paused_at: dict[str, float] = {}
        self._current: Rollout | None = None
        fabric.subscribe(self._on_event)

    def start(self, version: str, *, unit: str = "chip", chips: list[int] | None = None) -> Rollout:
        if version not in self.versions:
            raise UnknownNameError("firmware version", version, self.versions, field="version")
        if unit not in UNITS:
            raise UnknownNameError("rollout unit", unit, UNITS, field="unit")
        running = [r for r in self.rollouts.values() if r.state == RolloutState.RUNNING]
        if running:
            raise ConflictError(f"firmware rollout {running[0].id} to {running[0].version} is still running "
                                f"({len(running[0].done)}/{running[0].total} chips)", field="version")
        topo = self.fab.topology
        targets = list(range(topo.n_chips)) if chips is None else [self._check_chip(c) for c in chips]
        if not targets:
            raise InvalidInputError("no chips to update", field="chips")
        versions = self.fab.chip_metrics()["firmware_version"]
        todo = [c for c in targets if str(versions[c]) != version]
        batches, pods, ends = self._batches(todo, unit)
        r = Rollout(f"fw-{len(self.rollouts) + 1:04d}", version, unit, batches, self.tl.now, pods=pods,
                    pod_ends=ends)
        self.rollouts[r.id] = r
        self.tl.emit("firmware-rollout-start", rollout=r.id, version=version, unit=unit, chips=r.total)
        self._current = r
        self.tl.process(self._run(r))
        return r

    def _check_chip(self, chip: int) -> int:
        self.fab.topology.check_chip(chip)
        return chip

    def _state(self, chip: int) -> ChipState:
        return self.fab.chip_states()[chip]

    def _batches(self, todo: list[int], unit: str) -> tuple[list[list[int]], list[int], list[int]]:
        return pod_batches(todo, self.fab.topology, self._tp_batches if unit == "chip" else self._node_batches)

    @staticmethod
    def _node_batches(todo: list[int]) -> list[list[int]]:
        batches: list[list[int]] = []
        for c in todo:
            if batches and len(batches[-1]) < NODE_CHIPS and batches[-1][0] // NODE_CHIPS == c // NODE_CHIPS:
                batches[-1].append(c)
            else:
                batches.append([c])
        return batches

    def _tp_batches(self, todo: list[int]) -> list[list[int]]:
        """One chip at a time, except that the chips of one tensor-parallel group of a
        running job go together: the group's ranks then move as one (one pause), and
        wherever they land (another pod, when the job fills its own) their all-reduces,
        the job's heaviest traffic, stay on NeuronLink; a single rank moved out alone
        would drag its whole group's collectives over the network tier."""
        return whole_groups(todo, self._tp_group)

    def _tp_group(self, chip: int) -> list[int]:
        """The chips of ``chip``'s tensor-parallel group, or just ``chip`` when no managed
        job runs on it."""
        job_id = self.orch.owner.get(chip)
        if job_id is None or job_id not in self.orch.policies:
            return [chip]
        spec = self.fab.run_spec(job_id)
        return tp_group(spec.chips, spec.options, chip) if spec is not None else [chip]

    def get(self, rollout_id: str) -> Rollout:
        if rollout_id not in self.rollouts:
            raise NotFoundError(f"firmware rollout {rollout_id!r} not found", field="rollout")
        return self.rollouts[rollout_id]

    def _on_event(self, ev: FabricEvent) -> None:
        r = self._current
        if r is None or r.state != RolloutState.RUNNING or ev.job_id is None:
            return
        if ev.kind == "job-paused":
            self._paused_at[ev.job_id] = ev.t
        elif ev.kind == "job-resumed" and ev.job_id in self._paused_at:
            r.interruptions_s.append(ev.t - self._paused_at.pop(ev.job_id))

    def _run(self, r: Rollout) -> Generator[simpy.Event, Any, None]:
        env = self.tl.env
        versions = self.fab.chip_metrics()["firmware_version"]
        # While the rollout frees the pod's chips one by one, a rank it moved out comes home
        # only at the end: brought back to each freshly updated chip, it would leave again
        # for the next one (two moves per chip instead of one).
        self.orch.hold_rehome = True
        for i, batch in enumerate(r.batches):
            if r.pods:
                at = next(k for k, end in enumerate(r.pod_ends) if i < end)
                if r.current_pod is not None and r.current_pod != r.pods[at]:
                    yield from self._pod_finished(r)
                r.current_pod = r.pods[at]
            r.current = list(batch)
            self.orch.reserved = set(batch)
            if self.before_batch is not None:
                self.before_batch()
            moving = []
            for c in batch:
                r.previous[c] = str(versions[c])
                # Work first: a free chip takes the chip's rank (a live move at the next step
                # boundary). A node's ranks join one flow: the job pauses once per batch.
                if c in self.orch.owner:
                    moving.append((c, self.orch.chip_fault(c, "firmware-update")))
            for c, rec in moving:
                while rec is not None and rec.state.value in ("running", "waiting") and c in self.orch.owner:
                    yield env.timeout(0.05)
            updating = []
            for c in batch:
                if c not in self.orch.owner and self._state(c) in (ChipState.ISOLATED, ChipState.FAILED):
                    # Out of service already (awaiting repair): nothing runs on it to update
                    # now; it is reported as skipped, not counted as a failed update.
                    r.skipped.append(c)
                    continue
                if c in self.orch.owner or self._state(c) not in USABLE:
                    self._finish(r, RolloutState.ROLLED_BACK, f"chip {c} could not be freed for the update", c)
                    return
                self.fab.update_firmware(c, r.version, duration_s=self.update_s, failure_p=self.failure_p)
                updating.append(c)
            if not updating:
                continue
            yield env.timeout(self.update_s + self.settle_s)
            for c in updating:  # health check: healthy and on the new version
                ok = self._state(c) == ChipState.HEALTHY and \
                    str(self.fab.chip_metrics()["firmware_version"][c]) == r.version
                if not ok:
                    yield from self._rollback(r, c)
                    return
                r.done.append(c)
            self.tl.emit("firmware-progress", rollout=r.id, done=len(r.done), total=r.total)
            if self.audit is not None:
                self.audit("ok", r.id, {"step": "batch-updated", "chips": list(updating), "version": r.version,
                                        "done": len(r.done), "total": r.total})
        r.current = []
        self.orch.reserved = set()
        if r.current_pod is not None:
            r.pods_done.append(r.current_pod)
            r.current_pod = None
        # Ranks the rollout moved to another pod come back to the pod's last freed chips
        # (part of the rollout: the job is whole again when it ends).
        self.orch.hold_rehome = False
        for rec in self.orch.rehome_all():
            while rec.state.value in ("running", "waiting"):
                yield env.timeout(0.05)
        self._finish(r, RolloutState.SUCCEEDED, f"{len(r.done)} chips on {r.version}" + (
            f"; skipped (out of service): {r.skipped}" if r.skipped else ""))

    def _pod_finished(self, r: Rollout) -> Generator[simpy.Event, Any, None]:
        """Between two pods of a fleet: ranks moved out of the finished pod come home to its
        updated chips before the next pod's chips are freed."""
        env = self.tl.env
        r.current = []
        self.orch.reserved = set()
        self.orch.hold_rehome = False
        for rec in self.orch.rehome_all():
            while rec.state.value in ("running", "waiting"):
                yield env.timeout(0.05)
        self.orch.hold_rehome = True
        assert r.current_pod is not None
        r.pods_done.append(r.current_pod)
        self.tl.emit("firmware-pod-done", rollout=r.id, pod=r.current_pod, done=len(r.done), total=r.total)

    def _rollback(self, r: Rollout, bad: int) -> Generator[simpy.Event, Any, None]:
        """The updated chip failed its check: put every updated chip back on its old version."""
        if self._state(bad) == ChipState.FAILED:
            self.fab.set_chip_state(bad, ChipState.ISOLATED, "failed firmware update")
        for c in [*r.done, *r.current]:
            if self._state(c) in (ChipState.HEALTHY, ChipState.ISOLATED) and c not in self.orch.owner:
                self.fab.update_firmware(c, r.previous[c], duration_s=self.update_s)
        yield self.tl.env.timeout(self.update_s)
        self._finish(r, RolloutState.ROLLED_BACK, f"chip {bad} failed its health check after the update; "
                     "rolled back", bad)

    def _finish(self, r: Rollout, state: RolloutState, reason: str, bad: int | None = None) -> None:
        self.orch.reserved = set()
        if self.orch.hold_rehome:
            self.orch.hold_rehome = False
            self.tl.call_at(0, self.orch.rehome_all)
        check_transition("firmware rollout", ROLLOUT_TRANSITIONS, r.state, state)
        r.state, r.reason, r.failed_chip, r.t_end = state, reason, bad, self.tl.now
        self.tl.emit("firmware-rollout-end", rollout=r.id, state=state.value, reason=reason)
        if self.audit is not None:
            self.audit("ok" if state is RolloutState.SUCCEEDED else f"error:{state.value}", r.id,
                       {"step": "rollout-end", "state": state.value, "reason": reason, "failed_chip": bad})
