"""Firmware rollouts of a control plane's clusters: one ``FirmwareRollouts`` per cluster
whose fabric declares ``FirmwareUpdate`` and whose runs recovery can move (a spare takes
each chip's work over first). Built by the composition root (``podfleet.compose``) beside
the recovery service it drives; the health service knows nothing of it.

A cluster whose fabric runs commands on its hosts instead (``HostCommands``: local, Ray,
neuron) is updated by a maintenance rollout (``recovery.maintenance``) of the admin-configured
``command`` (``PODFLEET_FIRMWARE_COMMAND``, ``{version}`` replaced by the version, shell
quoted): ranks moved away by the chip lifecycle's drain, the command's exit code and
output kept, chips health-checked and returned, a failing chip left cordoned. Its
rollouts are ``mt-...`` records with ``version`` set, listed with the firmware rollouts;
``unit: node`` is a host there.

Commands (engine thread; the API calls them through ``plane.call``):
    fw.start_firmware(cluster, version, unit=, chips=, actor=)   StartFirmwareUpdate
    fw.firmware_rollouts(cluster) / fw.firmware_rollout(cluster, rollout_id)
    fw.firmware(cluster[, rollout_id])                            either of the two reads
"""

from __future__ import annotations

import shlex
from typing import overload

from podfleet.control.ports import PlaneCore
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import ConflictError, InvalidInputError, NotFoundError
from podfleet.recovery.firmware import FirmwareRollouts, RolloutFabric
from podfleet.recovery.maintenanceservice import MaintenanceService
from podfleet.recovery.service import RecoveryService
from podfleet.wire import JsonObject

VERSION_FIELD = "{version}"


class FirmwareService:
    def __init__(self, plane: PlaneCore, recovery: RecoveryService, maintenance: MaintenanceService | None = None,
                 *, command: str | None = None) -> None:
        self.plane = plane
        self.recovery = recovery
        self.maintenance = maintenance
        self.command = command  # PODFLEET_FIRMWARE_COMMAND
        self.firmware_by_cluster: dict[str, FirmwareRollouts] = {}

    def _by_command(self, rt: ClusterRuntime) -> MaintenanceService | None:
        """The maintenance service, when ``rt`` updates its firmware through a host command."""
        if isinstance(rt.fabric, RolloutFabric) or self.maintenance is None or not self.maintenance.supports(rt):
            return None
        if self.command is None:
            raise ConflictError(f"cluster {rt.rec.name} updates its firmware by a command on each host, and none "
                                "is configured: set PODFLEET_FIRMWARE_COMMAND (e.g. 'sudo /opt/fw/update "
                                "--version {version}') where `podfleet up` runs", field="cluster")
        return self.maintenance

    def _fw(self, rt: ClusterRuntime) -> FirmwareRollouts:
        fw = self.firmware_by_cluster.get(rt.id)
        if fw is None:
            orch = self.recovery.for_cluster(rt)
            fab = rt.fabric
            if not isinstance(fab, RolloutFabric) or orch is None:
                raise InvalidInputError(f"fabric {rt.spec.fabric!r} of cluster {rt.rec.name} cannot update "
                                        "firmware online", field="cluster")
            fw = self.firmware_by_cluster[rt.id] = FirmwareRollouts(
                fab, self.plane.tl, orch, before_batch=lambda: self.recovery.manage_running(rt),
                # Each automatic step of a rollout is an audit record by the system.
                audit=lambda result, target, detail: self.plane.audit(
                    "system:firmware", "FirmwareStep", target, result, {"cluster": rt.id, **detail}))
        return fw

    def start_firmware(self, ref: str, version: str, *, unit: str = "chip", chips: list[int] | None = None,
                       actor: str = "system") -> JsonObject:
        by_command = self._by_command(self.plane.resolve(ref))
        if by_command is not None:
            assert self.command is not None
            command = self.command.replace(VERSION_FIELD, shlex.quote(version))
            return by_command.start(ref, command, unit="host" if unit == "node" else unit, chips=chips,
                                    actor=actor, version=version, operation="StartFirmwareUpdate")

        def do() -> tuple[JsonObject, str]:
            rt = self.plane.resolve(ref)
            fw = self._fw(rt)
            self.recovery.manage_running(rt)
            r = fw.start(version, unit=unit, chips=chips)
            rt.logs.append(self.plane.now(), f"firmware rollout {r.id} to {version} started ({r.total} chips)")
            return {"cluster_id": rt.id, **r.to_dict()}, rt.id

        return self.plane.mutation("StartFirmwareUpdate", actor, ref, do,
                                   body={"version": version, "unit": unit, "chips": chips})

    def firmware_rollouts(self, ref: str) -> list[JsonObject]:
        rt = self.plane.resolve(ref)
        by_command = self._by_command(rt)
        if by_command is not None:
            return by_command.list(ref, firmware=True)
        return [{"cluster_id": rt.id, **r.to_dict()} for r in self._fw(rt).rollouts.values()]

    def firmware_rollout(self, ref: str, rollout_id: str) -> JsonObject:
        rt = self.plane.resolve(ref)
        by_command = self._by_command(rt)
        if by_command is not None:
            got = by_command.describe(ref, rollout_id)
            if got.get("version") is None:
                raise NotFoundError(f"{rollout_id!r} is a maintenance rollout, not a firmware update "
                                    f"(podfleet maintenance status {rt.rec.name} {rollout_id})", field="rollout")
            return got
        return {"cluster_id": rt.id, **self._fw(rt).get(rollout_id).to_dict()}

    @overload
    def firmware(self, ref: str) -> list[JsonObject]: ...

    @overload
    def firmware(self, ref: str, rollout_id: str) -> JsonObject: ...

    def firmware(self, ref: str, rollout_id: str | None = None) -> JsonObject | list[JsonObject]:
        """All of the cluster's rollouts, or the one named."""
        return self.firmware_rollouts(ref) if rollout_id is None else self.firmware_rollout(ref, rollout_id)
