"""Link flows of the recovery orchestrator: reroute around a down or flapping link
(``hardware.routing.Router``; one router per torus, so a fleet's pods route apart),
mark it degraded, tell the scheduler. Jobs keep running over the detour."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from typing import Protocol

import simpy

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import LinkState
from podfleet.hardware.routing import Router
from podfleet.hardware.topology import GridTopology, Topology
from podfleet.recovery.journal import RecoveryListener
from podfleet.recovery.model import Recovery, RecoveryState, Step, Timings


class LinkFabric(Protocol):
    """What the link flows read of the fabric."""

    @property
    def topology(self) -> Topology: ...

    def link_state(self, link: int) -> LinkState: ...


class LinkFlows(ABC):
    """The link half of a recovery orchestrator (``RecoveryOrchestrator`` is the one
    subclass): it sets the attributes below and keeps the journal (``_new``, ``_step``,
    ``_finish``)."""

    fab: LinkFabric
    tl: Timeline
    timings: Timings
    listener: RecoveryListener
    link_active: dict[int, Recovery]  # link -> its open recovery
    _procs: list[simpy.Process]
    _routers: dict[int, Router]  # torus index -> its router

    @abstractmethod
    def _new(self, kind: str, target: str, reason: str, job_id: str | None) -> Recovery: ...

    @abstractmethod
    def _step(self, rec: Recovery, name: str, reason: str, **detail: object) -> Step: ...

    @abstractmethod
    def _finish(self, rec: Recovery, state: RecoveryState) -> None: ...

    def link_fault(self, link: int, state: str, reason: str) -> Recovery | None:
        if link in self.link_active:
            return self.link_active[link]
        rec = self._new("link", f"link:{link}", f"link {link} {state}" + (f" ({reason})" if reason else ""), None)
        self.link_active[link] = rec
        self.listener.recovery_changed(rec)
        self._procs.append(self.tl.process(self._link_flow(rec, link)))
        return rec

    def router(self, link: int) -> tuple[Router, int, int] | None:
        """(router of the link's torus, the link's index there, chip offset); None when
        the topology is not a grid (a switched node has no detours to compute)."""
        topo = self.fab.topology
        group = getattr(topo, "group", None)
        if isinstance(topo, GridTopology):
            g, local, off, grid = 0, link, 0, topo
        elif isinstance(group, GridTopology):
            per = len(group.links)
            g, local, off, grid = link // per, link % per, (link // per) * group.n_chips, group
        else:
            return None
        if g not in self._routers:
            self._routers[g] = Router(grid)
        return self._routers[g], local, off

    def _link_flow(self, rec: Recovery, link: int) -> Generator[simpy.Event, object, None]:
        try:
            detour = None
            rt = self.router(link)
            if rt is not None:
                r, local, off = rt
                r.fail_link(local)
                route = r.detour(local)
                detour = None if route is None else [c + off for c in route.chips]
            self._step(rec, "reroute", "traffic over the link takes its detour", link=link, detour=detour)
            yield self.tl.env.timeout(self.timings.reroute_s)
            if rt is not None and self.fab.link_state(link) != LinkState.DOWN:
                rt[0].restore_link(rt[1])  # back up at reduced width: usable, not preferred
            self._step(rec, "mark-degraded", "link kept out of new placements until repaired", link=link)
            self._step(rec, "notify-scheduler", "placement avoids the link", link=link)
            self.listener.link_changed(link, "degraded", rec)
            self._finish(rec, RecoveryState.DONE)
        except simpy.Interrupt:
            return
        finally:
            self.link_active.pop(link, None)
