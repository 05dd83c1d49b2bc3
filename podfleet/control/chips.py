"""Chip lifecycle the operator drives: cordon, drain, uncordon, repair; and spare accounting.

Two things describe a chip. Its *state* (``ChipState``: healthy, degraded, failed,
isolated, updating) is the fabric's, written by faults and repairs. Its *mode*
(``ChipMode`` below) is the operator's: whether new work may be placed on it.

    schedulable --cordon--> cordoned --uncordon--> schedulable
         |                     |
         +------drain------> draining --(its rank moved off)--> cordoned

* cordon: placement and rank moves skip the chip (``scheduling.sync`` shows it to the
  scheduler as out of service; ``ClusterRuntime.usable``/``replacement_chips`` leave it
  out); a job already on it keeps running.
* drain: cordon, and move the rank it holds off through the recovery path: on the twin
  a live migration by the recovery orchestrator (``RecoveryPort.drain``); on fabrics of
  worker processes the slot is taken out of service (isolated) and the fabric or the
  process driver moves the rank to a spare or free slot, from its checkpoint. The chip
  turns cordoned when no job holds it any more (``settle``, every telemetry tick).
* repair: a failed, isolated or degraded chip no job holds goes back to healthy (the
  twin's ``repair_chip`` clears its faults; other fabrics get their slot back), and must
  read healthy afterwards: that re-read is the health check. Its mode is unchanged.
* uncordon: back to placement (cancels a drain whose rank has not moved yet).

Spares are accounted as they are used (``settle``): a spare that took a rank (a
recovery moved one onto it) stops being a spare, and, when the cluster's spec says
``restore_spares`` (the default), free healthy schedulable chips take the lost spares'
places, the cluster's original spares first. When none is free the cluster says so
(``spare_shortfall`` in its view, a line in its log).

Modes persist with the cluster (``status.chip_modes``), spares too (``status.spares``).
"""

from __future__ import annotations

import contextlib

import numpy as np

from podfleet.control import scheduling
from podfleet.control.chipmodes import ChipMode, shown_mode
from podfleet.control.ports import PlanePort
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import ConflictError, InvalidInputError, PodfleetError
from podfleet.fabric.base import ChipState, FaultInjection, WorkerKill
from podfleet.wire import JsonObject

# What each operator command does to the mode (None: the mode is left as it is).
_TARGET: dict[str, ChipMode | None] = {
    "cordon": ChipMode.CORDONED,
    "drain": ChipMode.DRAINING,
    "uncordon": ChipMode.SCHEDULABLE,
    "repair": None,
}
ACTIONS = tuple(_TARGET)
OPERATIONS = {"cordon": "CordonChip", "drain": "DrainChip", "uncordon": "UncordonChip", "repair": "RepairChip"}


# --- commands (engine thread) ------------------------------------------------------------------

def chip_command(plane: PlanePort, ref: str, chip: int, action: str, *, actor: str = "system",
                 reason: str | None = None) -> JsonObject:
    """Run one operator command on a chip, audited as Cordon/Drain/Uncordon/RepairChip;
    ``reason`` (the operator's words) goes into the audit record and the cluster's log."""
    if action not in _TARGET:
        raise InvalidInputError(f"chip action must be one of {', '.join(ACTIONS)}, got {action!r}",
                                field="action", allowed=list(ACTIONS))

    def do() -> tuple[JsonObject, str]:
        rt = plane.resolve(ref)
        rt.check_chip(chip)
        if action == "repair":
            _repair(plane, rt, chip)
        else:
            _set_mode(plane, rt, chip, action, reason)
        plane.save_health(rt)
        persist(plane, rt)
        plane.render(rt)
        return chip_view(rt, chip), f"{rt.id}/chip/{chip}"

    body: JsonObject = {"chip": chip, **({"reason": reason} if reason else {})}
    out = plane.mutation(OPERATIONS[action], actor, f"{ref}/chip/{chip}", do, body=body)
    rt = plane.clusters.get(str(out["cluster_id"]))
    if rt is not None:  # after the commit: a repaired or uncordoned chip may take waiting work
        plane.jobs.schedule(rt)
    return out


def _set_mode(plane: PlanePort, rt: ClusterRuntime, chip: int, action: str, reason: str | None = None) -> None:
    dst = _TARGET[action]
    assert dst is not None
    holder = rt.owners.get(chip)
    if dst is ChipMode.DRAINING and holder is None:
        dst = ChipMode.CORDONED  # nothing to move off: drained already
    src = rt.modes.set(chip, dst)
    why = f": {reason}" if reason else ""
    rt.logs.append(plane.now(), f"chip {chip}: {action} ({src.value} -> {dst.value}){why}", chip=chip)
    recovery = plane.jobs.recovery
    if recovery is not None:
        recovery.set_cordoned(rt, rt.modes.listed())
    if dst is not ChipMode.DRAINING or holder is None:
        return
    job = plane.table.find(holder)
    if job is not None:
        plane.table.log(job, f"chip {chip} is being drained by the operator{why}; its rank moves off")
    if recovery is not None and recovery.drain(rt, chip, f"drained by the operator{why}"):
        return  # a live migration by the recovery orchestrator
    # Fabrics of worker processes: take the slot out of service; the fabric (or the
    # process driver, when the gang ends) moves the rank to a spare or free slot.
    state = rt.chip_states()[chip]
    if state in (ChipState.HEALTHY, ChipState.DEGRADED, ChipState.UPDATING):
        rt.fabric.set_chip_state(chip, ChipState.ISOLATED, f"drained by the operator{why}")
    # A fabric whose slots do not evict their workers when isolated (Ray actors) is asked
    # to end the rank's worker; the local fabric has evicted it already (then this is a no-op).
    fab = rt.fabric
    if isinstance(fab, WorkerKill) and job is not None and chip in job.chips:
        with contextlib.suppress(PodfleetError):
            fab.kill_worker(job.id, list(job.chips).index(chip))


def _repair(plane: PlanePort, rt: ClusterRuntime, chip: int) -> None:
    state = rt.chip_states()[chip]
    if state is ChipState.HEALTHY:
        raise ConflictError(f"chip {chip} of {rt.rec.name} is healthy: nothing to repair"
                            + (f" (it is {rt.modes.mode(chip).value}; uncordon returns it to placement)"
                               if chip in rt.modes else ""), field="chip")
    if state is ChipState.UPDATING:
        raise ConflictError(f"chip {chip} of {rt.rec.name} is updating its firmware; repair it if the "
                            "update leaves it isolated", field="chip")
    holder = rt.owners.get(chip)
    if holder is not None:
        raise ConflictError(f"chip {chip} of {rt.rec.name} runs a rank of {holder}; drain it first", field="chip")
    fab = rt.fabric
    try:
        if isinstance(fab, FaultInjection):  # the twin: a repaired chip has no faults pending
            fab.repair_chip(chip, "repaired by the operator")
        else:
            if state is ChipState.FAILED:
                fab.set_chip_state(chip, ChipState.ISOLATED, "repair: out of service first")
            fab.set_chip_state(chip, ChipState.HEALTHY, "repaired by the operator")
    except PodfleetError as exc:
        raise ConflictError(f"chip {chip} of {rt.rec.name} could not be repaired: {exc.message}",
                            field="chip") from None
    after = rt.chip_states()[chip]
    if after is not ChipState.HEALTHY:  # the health check: the fabric must see it healthy now
        raise ConflictError(f"chip {chip} of {rt.rec.name} failed its health check after repair: it reads "
                            f"{after.value}", field="chip")
    rt.logs.append(plane.now(), f"chip {chip}: repaired ({state.value} -> healthy)", chip=chip)


def chip_view(rt: ClusterRuntime, chip: int) -> JsonObject:
    state = rt.chip_states()[chip].value
    return {"cluster_id": rt.id, "cluster": rt.rec.name, "chip": chip, "state": state,
            "mode": shown_mode(rt.modes.mode(chip), state), "spare": bool(rt.spare_mask[chip]), "job": rt.owners.get(chip)}


def persist(plane: PlanePort, rt: ClusterRuntime) -> None:
    rt.set_chip_layout(rt.modes.to_dict(), rt.spares, rt.original_spares, plane.now())
    plane.store.save_cluster(rt.rec)


# --- accounting (every telemetry tick, engine thread) ------------------------------------------

def settle(plane: PlanePort, rt: ClusterRuntime) -> None:
    """Drained chips whose rank left turn cordoned; spares that took a rank stop being
    spares and, where the spec allows, free chips take their places."""
    # The fabric's states as it gives them (a list compared element by element, no
    # conversion per chip: a fleet has 65,536), and only while spares are short: then a
    # repaired chip may take a used spare's place; otherwise owners and modes say it all.
    short = len(rt.spares) < rt.spec.total_spares()
    key = (rt.owners.version, rt.modes.version, rt.fabric.chip_states() if short else None)
    if key == rt.settled_key:
        return
    rt.settled_key = key
    # The scheduler's arrays from the owners now: a chip a moved rank just left reads free
    # (``account_spares`` asks the scheduler), or it would stay short until the next change.
    scheduling.sync(rt)
    changed = False
    for chip in [c for c in rt.modes.listed() if rt.modes.mode(c) is ChipMode.DRAINING]:
        if rt.owners.get(chip) is None:
            rt.modes.set(chip, ChipMode.CORDONED)
            rt.logs.append(plane.now(), f"chip {chip}: drained; cordoned", chip=chip)
            changed = True
    changed |= account_spares(plane, rt)
    if changed:
        persist(plane, rt)


def account_spares(plane: PlanePort, rt: ClusterRuntime) -> bool:
    """Keep ``rt.spares`` true to what the chips do. True when the spares changed."""
    used = [c for c in rt.spares if rt.owners.get(c) is not None]
    keep = [c for c in rt.spares if c not in used]
    want = rt.spec.total_spares()
    added: list[int] = []
    if len(keep) < want and rt.spec.restore_spares:
        states = rt.chip_states()
        original = set(rt.original_spares)
        free = [c for c in range(rt.topology.n_chips)
                if states[c] is ChipState.HEALTHY and c not in rt.owners and c not in rt.modes
                and c not in keep and not rt.scheduler_holds(c)]
        # The cluster's own spares first (e.g. repaired), then the chip closest to them.
        anchors = keep or sorted(original)
        free.sort(key=lambda c: (c not in original, min((rt.topology.hops(c, a) for a in anchors), default=0), c))
        added = free[:want - len(keep)]
    new = tuple(sorted([*keep, *added]))
    short = want - len(new)
    reason = (f"{len(new)} of {want} spares: no free healthy chip to take the place of "
              f"{'a used spare' if short == 1 else f'{short} used spares'}"
              + ("" if rt.spec.restore_spares else " (restore_spares is off)")) if short > 0 else ""
    if reason != rt.spare_shortfall:
        rt.spare_shortfall = reason
        if reason:
            rt.logs.append(plane.now(), f"spares: {reason}")
    if new == rt.spares:
        return False
    for c in used:
        rt.logs.append(plane.now(), f"spare chip {c} took a rank of {rt.owners.get(c)}: no longer a spare", chip=c)
    for c in added:
        rt.logs.append(plane.now(), f"chip {c} is a spare now (restoring {want} spares)", chip=c)
    set_spares(plane, rt, new)
    return True


def set_spares(plane: PlanePort, rt: ClusterRuntime, spares: tuple[int, ...]) -> None:
    rt.spares = spares
    mask = np.zeros(rt.topology.n_chips, dtype=bool)
    mask[list(spares)] = True
    rt.spare_mask = mask
    try:
        rt.scheduler.set_spares(spares)
    except PodfleetError as exc:  # a chip the scheduler still holds: fold again next tick
        rt.settled_key = None
        rt.logs.append(plane.now(), f"spares: the scheduler could not take {list(spares)} yet: {exc.message}")
    recovery = plane.jobs.recovery
    if recovery is not None:
        recovery.set_spares(rt, spares)
