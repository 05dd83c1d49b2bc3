"""The one writer of a cluster's record: its state (through the enforced transitions) and
its typed ``ClusterStatus``.

``ClusterRuntime`` and ``ConnectingCluster`` (a cluster whose fabric is still being built)
are owners of their record by inheriting ``ClusterRecordOwner``; a record reloaded at a
restart before either exists is written through ``ClusterRecordOwner(rec)``. No other
module assigns ``rec.state``, ``rec.updated_at`` or a field of ``rec.status``
(``tests/test_architecture.py`` checks it). Persisting stays with the caller (the plane's
store), so a change and its save are still one step of the engine thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from podfleet.control.lifecycle import ClusterState, check_cluster_transition
from podfleet.store.records import ClusterRecord
from podfleet.wire import JsonObject


class ClusterRecordOwner:
    rec: ClusterRecord

    def __init__(self, rec: ClusterRecord) -> None:
        self.rec = rec

    def transition(self, dst: ClusterState, reason: str, now: float, *,
                   deployment: JsonObject | None = None) -> None:
        """A state change (``check_cluster_transition``), with the reason shown for it."""
        check_cluster_transition(ClusterState(self.rec.state), dst)
        self.rec.state = dst.value
        self.rec.updated_at = now
        self.rec.status.reason = reason
        if deployment is not None:
            self.rec.status.deployment = deployment

    def set_reason(self, reason: str, now: float | None = None) -> None:
        """A new reason without a state change; ``now``: the record counts as updated."""
        self.rec.status.reason = reason
        if now is not None:
            self.rec.updated_at = now

    def set_deployment(self, deployment: JsonObject) -> None:
        self.rec.status.deployment = deployment

    def set_spares(self, spares: Iterable[int]) -> None:
        self.rec.status.spares = [int(c) for c in spares]

    def set_chip_layout(self, chip_modes: Mapping[str, Any], spares: Iterable[int], original_spares: Iterable[int],
                        now: float) -> None:
        """The operator's cordons and drains and the spares now and at the start."""
        st = self.rec.status
        st.chip_modes = dict(chip_modes)
        st.spares = [int(c) for c in spares]
        st.original_spares = [int(c) for c in original_spares]
        self.rec.updated_at = now

    def set_links(self, states: Mapping[int, str]) -> bool:
        """The links not up now (index -> state); True when that changed."""
        links = {str(i): str(s) for i, s in sorted(states.items())} or None
        if links == self.rec.status.links:
            return False
        self.rec.status.links = links
        return True

    def set_connected(self, connected: bool | None) -> None:
        """False: the fabric was never reached (not retried at a restart); None: no mark."""
        self.rec.status.fabric_connected = connected
