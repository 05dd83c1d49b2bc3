"""Link flows of the recovery orchestrator: reroute around a down or flapping link
(``hardware.routing.Router``; one router per torus, so a fleet's pods route apart),
mark it degraded, tell the scheduler. Jobs keep running over the detour."""

from __future__ import annotations

from collections.abc import Generator

import simpy

from podfleet.fabric.base import LinkState
from podfleet.hardware.routing import Router
from podfleet.hardware.topology import GridTopology
from podfleet.recovery.context import RecoveryContext
from podfleet.recovery.model import Recovery, RecoveryState


class LinkFlows:
    """The link flows of a recovery orchestrator, on its shared ``RecoveryContext``."""

    def __init__(self, ctx: RecoveryContext) -> None:
        self.ctx = ctx
        self._routers: dict[int, Router] = {}  # torus index -> its router

    def link_fault(self, link: int, state: str, reason: str) -> Recovery | None:
        ctx = self.ctx
        if link in ctx.link_active:
            return ctx.link_active[link]
        rec = ctx.new("link", f"link:{link}", f"link {link} {state}" + (f" ({reason})" if reason else ""), None)
        ctx.link_active[link] = rec
        ctx.listener.recovery_changed(rec)
        ctx.procs.append(ctx.tl.process(self._link_flow(rec, link)))
        return rec

    def link_up(self, link: int) -> None:
        """A repaired link: its router takes it back."""
        routed = self.router(link)
        if routed is not None:
            r, local, _ = routed
            r.restore_link(local)
            self.ctx.listener.link_changed(link, "up", Recovery("-", "link", f"link:{link}", "repaired",
                                                                self.ctx.tl.now))

    def router(self, link: int) -> tuple[Router, int, int] | None:
        """(router of the link's torus, the link's index there, chip offset); None when
        the topology is not a grid (a switched node has no detours to compute)."""
        topo = self.ctx.fab.topology
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
        ctx = self.ctx
        try:
            detour = None
            rt = self.router(link)
            if rt is not None:
                r, local, off = rt
                r.fail_link(local)
                route = r.detour(local)
                detour = None if route is None else [c + off for c in route.chips]
            ctx.step(rec, "reroute", "traffic over the link takes its detour", link=link, detour=detour)
            yield ctx.cost(ctx.timings.reroute_s)
            if rt is not None and ctx.fab.link_states()[link] != LinkState.DOWN:
                rt[0].restore_link(rt[1])  # back up at reduced width: usable, not preferred
            ctx.step(rec, "mark-degraded", "link kept out of new placements until repaired", link=link)
            ctx.step(rec, "notify-scheduler", "placement avoids the link", link=link)
            ctx.listener.link_changed(link, "degraded", rec)
            ctx.close(rec, RecoveryState.DONE)
        except simpy.Interrupt:
            return
        finally:
            ctx.link_active.pop(link, None)
