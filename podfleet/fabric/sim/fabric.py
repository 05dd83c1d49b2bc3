"""``SimFabric``: the digital twin, a ``Fabric`` over any topology.

State lives in numpy arrays (chip state codes, telemetry, link arrays). One SimPy
process samples telemetry for the whole fabric (``tl.every``), one samples fault
arrivals, and one runs each job. Every state change is logged on the timeline
(``tl.emit``) and delivered to subscribers as a ``FabricEvent``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.fabric.base import (
    ChipState,
    FabricEvent,
    LinkState,
    check_chip_transition,
    check_link_transition,
)
from podfleet.fabric.sim.faults import FaultRates, PrecursorParams
from podfleet.fabric.sim.injector import FaultsMixin
from podfleet.fabric.sim.jobs import JobsMixin
from podfleet.fabric.sim.links import build_link_table
from podfleet.fabric.sim.telemetry import ChipTelemetry, ThermalParams, ro
from podfleet.fabric.sim.workload import JobState, StepTimeFn, default_step_time
from podfleet.hardware.catalog import get_topology
from podfleet.hardware.specs import get_chip
from podfleet.hardware.topology import Topology

CHIP_STATES: tuple[ChipState, ...] = tuple(ChipState)
LINK_STATES: tuple[LinkState, ...] = tuple(LinkState)
_CODE = {s: i for i, s in enumerate(CHIP_STATES)}
_LCODE = {s: i for i, s in enumerate(LINK_STATES)}
FAILED, ISOLATED = _CODE[ChipState.FAILED], _CODE[ChipState.ISOLATED]
UPDATING = _CODE[ChipState.UPDATING]
L_UP, L_DEGRADED, L_DOWN = _LCODE[LinkState.UP], _LCODE[LinkState.DEGRADED], _LCODE[LinkState.DOWN]
DEGRADED_LINK_BW = 0.5  # a degraded link retrained at half width


class SimFabric(FaultsMixin, JobsMixin):
    kind = "sim"

    def __init__(
        self,
        topology: Topology | str,
        timeline: Timeline,
        *,
        fault_rates: FaultRates | None = None,
        telemetry_interval_s: float = 2.0,
        spares: int | Sequence[int] = (),
        thermal: ThermalParams | None = None,
        precursors: PrecursorParams | None = None,
        step_time_fn: StepTimeFn | None = None,
        auto_repair_s: float | None = None,
        progress_every_steps: int = 10,
        firmware_version: str = "2.21.0",
    ) -> None:
        self.topology = get_topology(topology) if isinstance(topology, str) else topology
        if telemetry_interval_s <= 0:
            raise InvalidInputError(
                f"telemetry_interval_s must be positive, got {telemetry_interval_s}", field="telemetry_interval_s"
            )
        self.spec = get_chip(self.topology.chip_type)
        self.n_chips = n = self.topology.n_chips
        self.telemetry_interval_s = float(telemetry_interval_s)
        self.fault_rates = fault_rates or FaultRates.none()
        self.precursors = precursors or PrecursorParams()
        self.thermal = thermal or ThermalParams()
        self.step_time_fn: StepTimeFn = step_time_fn or default_step_time
        self.auto_repair_s = auto_repair_s
        self.progress_every_steps = max(1, int(progress_every_steps))
        self.spares = self._parse_spares(spares)
        self.links = build_link_table(self.topology)
        nl = self.links.n
        self._state = np.zeros(n, np.int8)
        self._reason: dict[int, str] = {}
        self._link_state = ro(np.zeros(nl, np.int8))
        self._link_bw_eff = self.links.bw_bytes_per_s
        self.link_utilization = ro(np.zeros(nl))
        self._ltx_acc = np.zeros(nl)  # link bytes accumulate lazily, like the chips'
        self._ltx_t0 = 0.0
        self.n_links = nl
        self.link_errors = ro(np.zeros(nl, np.int64))
        self._link_rate = np.zeros(nl)
        self._links_dirty = True
        self._subs: list[Callable[[FabricEvent], None]] = []
        self._link_cache: dict[int, tuple[Any, tuple[np.ndarray, np.ndarray, bool]]] = {}
        # Chip-time accounting (for chip-hours lost and observed fault rates).
        self._acc_t = 0.0
        self.down_chip_s = 0.0  # chip-seconds failed or isolated
        self.exposed_chip_s = 0.0  # chip-seconds in which a chip could fault
        self._n_down = 0
        self.ticks = 0
        self.faults_by_kind: dict[str, int] = {}
        self.tl: Timeline | None = None
        self._init_jobs()
        self._init_faults()
        self._firmware_version = firmware_version
        self.attach(timeline)

    def _parse_spares(self, spares: int | Sequence[int]) -> tuple[int, ...]:
        """An int N marks the last N chips as spares; a sequence names them."""
        if isinstance(spares, int):
            if not 0 <= spares < self.n_chips:
                raise InvalidInputError(
                    f"spares must be 0-{self.n_chips - 1}, got {spares}", field="spares"
                )
            return tuple(range(self.n_chips - spares, self.n_chips))
        for c in spares:
            self.topology.check_chip(int(c))
        return tuple(sorted({int(c) for c in spares}))

    # --- Fabric protocol: attach --------------------------------------------------
    def attach(self, timeline: Timeline) -> None:
        if self.tl is timeline:
            return
        if self.tl is not None:
            raise InvalidInputError("this SimFabric is already attached to another timeline")
        self.tl = timeline
        self.telemetry = ChipTelemetry(
            self.n_chips, self.spec, self.thermal, timeline.rng, self._firmware_version
        )
        self._acc_t = timeline.now
        timeline.every(self.telemetry_interval_s, self._tick)
        self._start_fault_process()

    @property
    def now(self) -> float:
        assert self.tl is not None
        return self.tl.now

    # --- events --------------------------------------------------------------------
    def subscribe(self, callback: Callable[[FabricEvent], None]) -> Callable[[], None]:
        """Call ``callback(FabricEvent)`` on the engine thread; returns an unsubscribe."""
        self._subs.append(callback)
        return lambda: self._subs.remove(callback) if callback in self._subs else None

    def _event(self, kind: str, *, chip: int | None = None, link: int | None = None,
               job_id: str | None = None, **detail: Any) -> FabricEvent:
        assert self.tl is not None
        fields: dict[str, Any] = {}
        if chip is not None:
            fields["chip"] = chip
        if link is not None:
            fields["link"] = link
        if job_id is not None:
            fields["job_id"] = job_id
        self.tl.emit(kind, **fields, **detail)
        return self._deliver(FabricEvent(kind, self.tl.now, chip=chip, link=link, job_id=job_id, detail=detail))

    def _deliver(self, ev: FabricEvent) -> FabricEvent:
        for cb in list(self._subs):
            cb(ev)
        return ev

    # --- chips -----------------------------------------------------------------------
    def check_chip(self, chip: int) -> int:
        if isinstance(chip, bool) or not isinstance(chip, int | np.integer):
            raise InvalidInputError(f"chip must be an integer, got {chip!r}", field="chip")
        self.topology.check_chip(int(chip))
        return int(chip)

    def chip_state(self, chip: int) -> ChipState:
        return CHIP_STATES[self._state[self.check_chip(chip)]]

    def chip_states(self) -> list[ChipState]:
        return [CHIP_STATES[c] for c in self._state.tolist()]

    def chip_state_codes(self) -> np.ndarray:
        """State codes over chips (index into ``CHIP_STATES``); a copy."""
        return self._state.copy()

    def usable_mask(self) -> np.ndarray:
        """Chips that can run work (healthy or degraded)."""
        return self._state <= _CODE[ChipState.DEGRADED]

    def set_chip_state(self, chip: int, state: ChipState | str, reason: str) -> None:
        """Move a chip through its state machine (InvalidTransitionError if not allowed)."""
        self._transition(self.check_chip(chip), ChipState(state), reason)

    def _transition(self, chip: int, dst: ChipState, reason: str, **detail: Any) -> None:
        src = CHIP_STATES[self._state[chip]]
        check_chip_transition(src, dst)
        self._account()
        was_down = src in (ChipState.FAILED, ChipState.ISOLATED)
        is_down = dst in (ChipState.FAILED, ChipState.ISOLATED)
        self._n_down += int(is_down) - int(was_down)
        self._state[chip] = _CODE[dst]
        self._reason[chip] = reason
        self.telemetry.powered[chip] = dst != ChipState.FAILED
        self.telemetry.dirty = True
        if dst == ChipState.HEALTHY and src == ChipState.ISOLATED:
            self._repaired(chip)
        job_id = self._chip_job.get(chip)
        self._event(f"chip-{dst.value}", chip=chip, job_id=job_id, prev=src.value, reason=reason, **detail)
        if job_id is not None and dst in (ChipState.FAILED, ChipState.ISOLATED, ChipState.UPDATING):
            self._pause_job(job_id, f"chip {chip} {dst.value}: {reason}")

    def _account(self) -> None:
        now = self.now
        dt = now - self._acc_t
        if dt > 0:
            self.down_chip_s += self._n_down * dt
            self.exposed_chip_s += (self.n_chips - self._n_down) * dt
        self._acc_t = now

    def chip_metrics(self) -> Mapping[str, np.ndarray]:
        """Latest telemetry: metric name -> array over chips ([chips, cores] for
        ``neuroncore_utilization``). Read-only arrays never changed in place: safe to
        keep without copying; copy before modifying."""
        return self.telemetry.metrics()

    def chip_info(self, chip: int) -> dict[str, Any]:
        """One chip: state, reason, job, links and its latest metrics (JSON-ready)."""
        chip = self.check_chip(chip)
        t = self.telemetry
        m = {k: (v[chip].tolist() if hasattr(v[chip], "tolist") else v[chip]) for k, v in t.metrics().items()}
        return {
            "chip": chip,
            "state": self.chip_state(chip).value,
            "reason": self._reason.get(chip),
            "job_id": self._chip_job.get(chip),
            "spare": chip in self.spares,
            "links": [int(x) for x in self.links.of_chip(chip)],
            "metrics": m,
        }

    # --- links -------------------------------------------------------------------------
    def check_link(self, link: int) -> int:
        if isinstance(link, bool) or not isinstance(link, int | np.integer) or not 0 <= link < self.links.n:
            raise NotFoundError(
                f"link {link} does not exist; valid links are 0-{self.links.n - 1}", field="link"
            )
        return int(link)

    def link_states(self) -> list[LinkState]:
        return [LINK_STATES[c] for c in self._link_state.tolist()]

    def link_state(self, link: int) -> LinkState:
        return LINK_STATES[self._link_state[self.check_link(link)]]

    def set_link_state(self, link: int, state: LinkState | str, reason: str) -> None:
        self._set_link(self.check_link(link), LinkState(state), reason)

    def _set_link(self, link: int, dst: LinkState, reason: str, **detail: Any) -> None:
        src = LINK_STATES[self._link_state[link]]
        check_link_transition(src, dst)
        st = self._link_state.copy()
        st[link] = _LCODE[dst]
        self._link_state = ro(st)
        factor = np.where(st == L_DOWN, 0.0, np.where(st == L_DEGRADED, DEGRADED_LINK_BW, 1.0))
        self._link_bw_eff = ro(self.links.bw_bytes_per_s * factor)
        self._links_dirty = True
        self._event(f"link-{dst.value}", link=link, prev=src.value, reason=reason,
                    src_chip=int(self.links.src[link]), dst_chip=int(self.links.dst[link]), **detail)

    @property
    def link_tx_bytes(self) -> np.ndarray:
        return self._ltx_acc + self._link_rate * (self.now - self._ltx_t0)

    def link_metrics(self) -> Mapping[str, np.ndarray]:
        """Latest link telemetry over links: read-only arrays, safe to keep."""
        lt = self.links
        return {
            "src": lt.src,
            "dst": lt.dst,
            "bandwidth_bytes_per_s": self._link_bw_eff,
            "nominal_bandwidth_bytes_per_s": lt.bw_bytes_per_s,
            "latency_s": lt.latency_s,
            "utilization": self.link_utilization,
            "tx_bytes": ro(self.link_tx_bytes),
            "errors": self.link_errors,
            "state": self._link_state,
        }

    def _bump_link_errors(self, link: int, count: int) -> None:
        errs = self.link_errors.copy()
        errs[link] += count
        self.link_errors = ro(errs)
        ends = [c for c in (int(self.links.src[link]), int(self.links.dst[link])) if c >= 0]
        self.telemetry.bump("link_errors", np.array(ends), count)

    def _gang(self, chips: Sequence[int]) -> tuple[np.ndarray, np.ndarray, bool]:
        """(chip index array, links among them, spans several fleet groups), cached.

        Jobs pass the same ``spec.chips`` tuple at every step; the cache is keyed by that
        object's identity so a 4,096-chip gang is not re-hashed at every step.
        """
        ent = self._link_cache.get(id(chips))
        if ent is not None and ent[0] is chips:
            return ent[1]
        arr = np.asarray(chips, dtype=np.int64)
        links = self.links.among(arr, self.n_chips)
        gs = self.links.group_size
        spans = bool(self.links.net_bw_per_chip > 0 and arr.size and arr.min() // gs != arr.max() // gs)
        if len(self._link_cache) > 256:
            self._link_cache.clear()
        val = (arr, links, spans)
        self._link_cache[id(chips)] = (chips, val)
        return val

    def links_among(self, chips: Sequence[int]) -> np.ndarray:
        """Indices of the links with both ends among ``chips``."""
        return self._gang(chips)[1]

    def gang_clock_factor(self, chips: Sequence[int]) -> float:
        """The slowest clock factor among ``chips`` (1.0 unthrottled)."""
        t = self.telemetry
        if not t._any_throttled:
            return 1.0
        return float(t.clock_factor[self._gang(chips)[0]].min())

    def job_nominal_link_bw(self, chips: Sequence[int]) -> float:
        """``job_link_bw`` as it would be with every link up (the healthy reference)."""
        _, idx, spans = self._gang(chips)
        lt = self.links
        bw = self.spec.link_bw_bytes_per_s if idx.size == 0 else float(lt.bw_bytes_per_s[idx].min())
        return min(bw, lt.net_bw_per_chip) if spans else bw

    def job_link_bw(self, chips: Sequence[int]) -> float:
        """Per-direction bandwidth of the slowest live link among ``chips`` (see workload)."""
        _, idx, spans = self._gang(chips)
        lt = self.links
        if idx.size == 0:
            bw = self.spec.link_bw_bytes_per_s
        else:
            st = self._link_state[idx]
            if not st.any():  # all up: the nominal minimum, cached
                bw = float(lt.bw_bytes_per_s[idx].min())
            else:
                live = st != L_DOWN
                bws = lt.bw_bytes_per_s[idx] * np.where(st == L_DEGRADED, DEGRADED_LINK_BW, 1.0)
                bw = float(bws[live].min()) if live.any() else float(lt.bw_bytes_per_s[idx].min()) * 0.1
                if not live.all():
                    bw *= 0.5
        if spans:
            bw = min(bw, lt.net_bw_per_chip)
        return bw

    # --- telemetry tick ------------------------------------------------------------
    def _tick(self) -> None:
        assert self.tl is not None
        dt = self.telemetry_interval_s
        self.ticks += 1
        self._advance_precursors(dt)
        t = self.telemetry
        recomputed, changed, critical = t.tick(dt, self.tl.rng)
        if self.n_links and (recomputed or self._links_dirty):
            lt = self.links
            comm, d = t.comm_load * t.powered, lt.dst
            u = np.minimum(comm[lt.src], np.where(d < 0, comm[lt.src], comm[np.maximum(d, 0)]))
            u[self._link_state == L_DOWN] = 0.0
            self.link_utilization = ro(u)
            self._ltx_acc = self.link_tx_bytes
            self._ltx_t0 = self.now
            self._link_rate = u * lt.bw_bytes_per_s
            self._links_dirty = False
        for c in changed.tolist():
            self._event("thermal-throttle", chip=c, on=bool(t.throttle[c]),
                        temperature_c=round(float(t.model_temperature_c[c]), 2))
        for c in critical.tolist():
            if self._state[c] not in (FAILED, ISOLATED):
                self._fail(c, "thermal-runaway", action="replace",
                           temperature_c=round(float(t.model_temperature_c[c]), 2))

    # --- summaries ---------------------------------------------------------------------
    def state_counts(self) -> dict[str, int]:
        counts = np.bincount(self._state, minlength=len(CHIP_STATES))
        return {s.value: int(counts[i]) for i, s in enumerate(CHIP_STATES)}

    def summary(self) -> dict[str, Any]:
        """A JSON-ready overview: states, links, thermal and load figures, jobs."""
        t = self.telemetry
        temp = t.temperature_c
        lcounts = np.bincount(self._link_state, minlength=len(LINK_STATES))
        return {
            "kind": self.kind,
            "topology": self.topology.name,
            "chip_type": self.spec.name,
            "chips": self.n_chips,
            "links": self.n_links,
            "spares": list(self.spares),
            "chip_states": self.state_counts(),
            "link_states": {s.value: int(lcounts[i]) for i, s in enumerate(LINK_STATES)},
            "throttled_chips": int(t.throttle.sum()),
            "temperature_c": {"min": round(float(temp.min()), 2), "mean": round(float(temp.mean()), 2),
                              "max": round(float(temp.max()), 2)},
            "power_w_total": round(float(t.power_w.sum()), 1),
            "utilization_pct_mean": round(float(t.neuroncore_utilization.mean()), 2),
            "jobs": {s.value: sum(r.state == s for r in self.jobs.values()) for s in JobState},
            "faults_by_kind": dict(self.faults_by_kind),
            "chip_hours_lost": round(self.chip_hours_lost(), 4),
            "sim_time_s": self.now,
        }

    def chip_hours_lost(self) -> float:
        self._account()
        return self.down_chip_s / 3600.0

