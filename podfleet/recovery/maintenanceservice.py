"""Maintenance rollouts of a control plane's clusters: one ``MaintenanceRollouts`` per
cluster whose fabric declares ``HostCommands`` (local, Ray, neuron). Built by the
composition root beside the firmware service. Each chip a rollout takes out of service
or brings back goes through the chip lifecycle's own audited commands (``DrainChip``,
``RepairChip``, ``UncordonChip``, by ``system:maintenance``), so the ranks it frees move
exactly as an operator's drain moves them.

Commands (engine thread; the API calls them through ``plane.call``):
    svc.start(cluster, command, unit=, chips=, max_failures=, timeout_s=, actor=)  StartMaintenance
    svc.resume(cluster, rollout_id, actor=)                                        ResumeMaintenance
    svc.list(cluster) / svc.describe(cluster, rollout_id)           ListMaintenance / DescribeMaintenance
"""

from __future__ import annotations

from typing import Protocol

from podfleet.control.chipmodes import ChipMode
from podfleet.control.lifecycle import JobState
from podfleet.control.ports import PlaneCore
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import ConflictError, InfeasibleError, InvalidInputError, PodfleetError
from podfleet.fabric.base import ChipCheck, ChipState
from podfleet.fabric.commands import split_command
from podfleet.recovery.maintenance import MaintenanceFabric, MaintenanceRollouts
from podfleet.wire import JsonObject

ACTOR = "system:maintenance"


class MaintenancePlane(PlaneCore, Protocol):
    """PlaneCore and the chip lifecycle's commands (``ControlPlane.chip_command``)."""

    def chip_command(self, ref: str, chip: int, action: str, *, actor: str = ...,
                     reason: str | None = ...) -> JsonObject: ...


class PlaneChips:
    """``ChipOps`` on one cluster, through the plane's audited chip commands."""

    def __init__(self, plane: MaintenancePlane, rt: ClusterRuntime, fabric: MaintenanceFabric) -> None:
        self.plane, self.rt, self.fab = plane, rt, fabric
        self.operator_cordoned: set[int] = set()  # cordoned before the rollout: stay so after it
        # job -> its count of closed recoveries when a rank of it was told to move
        self.moved_at: dict[str, int] = {}

    def holder(self, chip: int) -> str | None:
        return self.rt.owners.get(chip)

    def take_out(self, chip: int, reason: str) -> None:
        if self.rt.modes.mode(chip) is ChipMode.CORDONED:
            self.operator_cordoned.add(chip)
        job = self.plane.table.find(self.holder(chip))
        if job is not None:
            self.moved_at[job.id] = len(self.plane.table.run_counts(job).recoveries)
        # Drain: cordoned at once; a rank on the chip moves off (the fabric evicts it from the
        # isolated slot and moves it), and the chip turns cordoned when no rank holds it.
        self.plane.chip_command(self.rt.id, chip, "drain", actor=ACTOR, reason=reason)
        if self.fab.chip_states()[chip] in (ChipState.HEALTHY, ChipState.DEGRADED):
            # A free chip is only cordoned by the drain: out of service too, so no rank moves onto it.
            self.fab.set_chip_state(chip, ChipState.ISOLATED, reason)

    def bring_back(self, chip: int, reason: str) -> str | None:
        try:
            if self.fab.chip_states()[chip] is not ChipState.HEALTHY:
                self.plane.chip_command(self.rt.id, chip, "repair", actor=ACTOR, reason=reason)
        except PodfleetError as exc:
            return exc.message
        fab = self.fab
        bad = fab.check_chip_health(chip) if isinstance(fab, ChipCheck) else None
        if bad is not None:
            return bad
        if chip not in self.operator_cordoned:
            self.plane.chip_command(self.rt.id, chip, "uncordon", actor=ACTOR, reason=reason)
        return None

    def recovering(self) -> list[str]:
        """Jobs recovering, or a rank of which was moved and whose move has not closed yet:
        a process fabric reports the job running once its gang re-formed, and closes the
        move's recovery (``recovered``) at the first step trained after it."""
        out = []
        for j in self.plane.table.on_cluster(self.rt.id):
            moved = self.moved_at.get(j.id)
            if j.state is JobState.RECOVERING or (
                    moved is not None and len(self.plane.table.run_counts(j).recoveries) <= moved):
                out.append(j.id)
            elif moved is not None:
                del self.moved_at[j.id]
        return out

    def keep_out(self, chip: int, reason: str) -> None:
        if self.fab.chip_states()[chip] in (ChipState.HEALTHY, ChipState.DEGRADED):
            self.fab.set_chip_state(chip, ChipState.ISOLATED, reason)
        if self.rt.modes.mode(chip) is ChipMode.SCHEDULABLE:
            self.plane.chip_command(self.rt.id, chip, "cordon", actor=ACTOR, reason=reason)


class MaintenanceService:
    def __init__(self, plane: MaintenancePlane) -> None:
        self.plane = plane
        self.by_cluster: dict[str, MaintenanceRollouts] = {}

    def _mt(self, rt: ClusterRuntime) -> MaintenanceRollouts:
        mt = self.by_cluster.get(rt.id)
        if mt is None:
            fab = rt.fabric
            if not isinstance(fab, MaintenanceFabric):
                raise ConflictError(f"fabric {rt.spec.fabric!r} of cluster {rt.rec.name} cannot run commands "
                                        "on its hosts (no HostCommands): maintenance rollouts run on local, "
                                        "ray and neuron clusters", field="cluster")
            plane = self.plane
            mt = self.by_cluster[rt.id] = MaintenanceRollouts(
                fab, plane.tl, PlaneChips(plane, rt, fab),
                log=lambda msg, chip: rt.logs.append(plane.now(), msg, chip=chip),
                audit=lambda result, target, detail: plane.audit(
                    ACTOR, "MaintenanceStep", target, result, {"cluster": rt.id, **detail}))
        return mt

    def supports(self, rt: ClusterRuntime) -> bool:
        return isinstance(rt.fabric, MaintenanceFabric)

    def start(self, ref: str, command: str, *, unit: str = "chip", chips: list[int] | None = None,
              max_failures: int = 1, timeout_s: float = 600.0, actor: str = "system",
              version: str | None = None, operation: str = "StartMaintenance") -> JsonObject:
        """A maintenance rollout of ``command``; ``version`` and ``operation``: a firmware
        update run as one (``recovery.rollouts``), audited as ``StartFirmwareUpdate``."""
        try:
            argv = split_command(command, "--command")
        except InvalidInputError as exc:  # well formed (a string) but not a command line: 422
            raise InfeasibleError(exc.message, field="command") from None

        def do() -> tuple[JsonObject, str]:
            rt = self.plane.resolve(ref)
            r = self._mt(rt).start(argv, unit=unit, chips=chips, max_failures=max_failures,
                                   timeout_s=timeout_s, actor=actor, version=version)
            rt.logs.append(self.plane.now(), f"maintenance {r.id} started by {actor} over {r.total} chips "
                                             f"({len(r.batches)} groups by {unit}): {command}")
            return {"cluster_id": rt.id, **r.to_dict()}, rt.id

        body: JsonObject = ({"version": version, "unit": unit, "chips": chips} if version is not None else
                            {"command": command, "unit": unit, "chips": chips, "max_failures": max_failures,
                             "timeout_s": timeout_s})
        return self.plane.mutation(operation, actor, ref, do, body=body)

    def resume(self, ref: str, rollout_id: str, *, actor: str = "system") -> JsonObject:
        def do() -> tuple[JsonObject, str]:
            rt = self.plane.resolve(ref)
            r = self._mt(rt).resume(rollout_id)
            return {"cluster_id": rt.id, **r.to_dict()}, f"{rt.id}/{r.id}"

        return self.plane.mutation("ResumeMaintenance", actor, f"{ref}/{rollout_id}", do)

    def list(self, ref: str, *, firmware: bool | None = None) -> list[JsonObject]:
        """The cluster's rollouts; ``firmware``: only firmware updates (True) or only the others (False)."""
        rt = self.plane.resolve(ref)
        return [{"cluster_id": rt.id, **r.to_dict()} for r in self._mt(rt).rollouts.values()
                if firmware is None or (r.version is not None) is firmware]

    def describe(self, ref: str, rollout_id: str) -> JsonObject:
        rt = self.plane.resolve(ref)
        return {"cluster_id": rt.id, **self._mt(rt).get(rollout_id).to_dict()}
