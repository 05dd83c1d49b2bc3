"""The twin's board: chip and link state machines, which job holds which chip, link
telemetry and chip-time accounting, as numpy arrays.

Two hooks connect it to the other parts without a reference to them: ``on_repaired``
(a chip back from isolation: its pending faults are void) and ``on_chip_lost`` (a chip
of a job failed, was isolated or went to update: pause the job).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from podfleet.errors import InvalidInputError, NotFoundError
from podfleet.fabric.base import ChipState, LinkState, check_chip_transition, check_link_transition
from podfleet.fabric.sim.context import SimContext
from podfleet.fabric.sim.telemetry import ro
from podfleet.hardware.specs import ChipSpec
from podfleet.hardware.topology import Topology

CHIP_STATES: tuple[ChipState, ...] = tuple(ChipState)
LINK_STATES: tuple[LinkState, ...] = tuple(LinkState)
_CODE = {s: i for i, s in enumerate(CHIP_STATES)}
_LCODE = {s: i for i, s in enumerate(LINK_STATES)}
FAILED, ISOLATED = _CODE[ChipState.FAILED], _CODE[ChipState.ISOLATED]
L_UP, L_DEGRADED, L_DOWN = _LCODE[LinkState.UP], _LCODE[LinkState.DEGRADED], _LCODE[LinkState.DOWN]
DEGRADED_LINK_BW = 0.5  # a degraded link retrained at half width
_DOWN_STATES = (ChipState.FAILED, ChipState.ISOLATED)
_LOSES_JOB = (ChipState.FAILED, ChipState.ISOLATED, ChipState.UPDATING)


def _noop(*_: Any) -> None:
    return None


class Board:
    def __init__(self, ctx: SimContext, start_t: float) -> None:
        self.ctx = ctx
        n, nl = ctx.n_chips, ctx.links.n
        self.n_links = nl
        self.state = np.zeros(n, np.int8)  # codes into CHIP_STATES (written only by ``transition``)
        self._states_list: list[ChipState] | None = None  # ``chip_states()`` until the next transition
        self.reasons: dict[int, str] = {}
        self.chip_job: dict[int, str] = {}  # chip -> the job holding it
        self.link_state = ro(np.zeros(nl, np.int8))
        self._lstates: list[LinkState] = []
        self._lstates_of: np.ndarray | None = None  # the ``link_state`` array ``_lstates`` was built from
        self.link_bw_eff = ctx.links.bw_bytes_per_s
        self.link_utilization = ro(np.zeros(nl))
        self.link_errors = ro(np.zeros(nl, np.int64))
        self._ltx_acc = np.zeros(nl)  # link bytes accumulate lazily, like the chips'
        self._ltx_t0 = 0.0
        self._link_rate = np.zeros(nl)
        self._tx_cache: tuple[float, float, np.ndarray, np.ndarray, np.ndarray] | None = None  # (now, t0, acc, rate, tx)
        self._links_dirty = True
        self._link_cache: dict[int, tuple[Any, tuple[np.ndarray, np.ndarray, bool]]] = {}
        # Chip-time accounting (for chip-hours lost and observed fault rates).
        self._acc_t = start_t
        self.down_chip_s = 0.0  # chip-seconds failed or isolated
        self.exposed_chip_s = 0.0  # chip-seconds in which a chip could fault
        self._n_down = 0
        self.on_repaired: Callable[[int], None] = _noop
        self.on_chip_lost: Callable[[str, str], None] = _noop

    # --- what step-time functions read (``StepModel``) -------------------------------------
    @property
    def spec(self) -> ChipSpec:
        return self.ctx.spec

    @property
    def topology(self) -> Topology:
        return self.ctx.topology

    # --- chips ---------------------------------------------------------------------------
    def check_chip(self, chip: int) -> int:
        if isinstance(chip, bool) or not isinstance(chip, int | np.integer):
            raise InvalidInputError(f"chip must be an integer, got {chip!r}", field="chip")
        self.ctx.topology.check_chip(int(chip))
        return int(chip)

    def chip_state(self, chip: int) -> ChipState:
        return CHIP_STATES[self.state[self.check_chip(chip)]]

    def chip_states(self) -> list[ChipState]:
        # Built once per state change (a fleet's list takes milliseconds), copied per call.
        if self._states_list is None:
            self._states_list = [CHIP_STATES[c] for c in self.state.tolist()]
        return list(self._states_list)

    def usable_mask(self) -> np.ndarray:
        """Chips that can run work (healthy or degraded)."""
        return self.state <= _CODE[ChipState.DEGRADED]

    def is_down(self, chip: int) -> bool:
        return int(self.state[chip]) in (FAILED, ISOLATED)

    def transition(self, chip: int, dst: ChipState, reason: str, **detail: Any) -> None:
        """Move a chip through its state machine (InvalidTransitionError if not allowed)."""
        src = CHIP_STATES[self.state[chip]]
        check_chip_transition(src, dst)
        self.account()
        self._n_down += int(dst in _DOWN_STATES) - int(src in _DOWN_STATES)
        self.state[chip] = _CODE[dst]
        self._states_list = None
        self.reasons[chip] = reason
        t = self.ctx.telemetry
        t.powered[chip] = dst != ChipState.FAILED
        t.dirty = True
        if dst == ChipState.HEALTHY and src == ChipState.ISOLATED:
            self.on_repaired(chip)
        job_id = self.chip_job.get(chip)
        self.ctx.bus.event(f"chip-{dst.value}", chip=chip, job_id=job_id, prev=src.value, reason=reason, **detail)
        if job_id is not None and dst in _LOSES_JOB:
            self.on_chip_lost(job_id, f"chip {chip} {dst.value}: {reason}")

    def account(self) -> None:
        now = self.ctx.now
        dt = now - self._acc_t
        if dt > 0:
            self.down_chip_s += self._n_down * dt
            self.exposed_chip_s += (self.ctx.n_chips - self._n_down) * dt
        self._acc_t = now

    def state_counts(self) -> dict[str, int]:
        counts = np.bincount(self.state, minlength=len(CHIP_STATES))
        return {s.value: int(counts[i]) for i, s in enumerate(CHIP_STATES)}

    # --- which job holds which chip --------------------------------------------------------
    def job_on(self, chip: int) -> str | None:
        return self.chip_job.get(chip)

    def busy_chips(self) -> frozenset[int]:
        return frozenset(self.chip_job)

    def claim(self, chip: int, job_id: str) -> None:
        self.chip_job[chip] = job_id

    def release(self, chip: int, job_id: str) -> None:
        if self.chip_job.get(chip) == job_id:
            del self.chip_job[chip]

    # --- links ---------------------------------------------------------------------------------
    def check_link(self, link: int) -> int:
        n = self.n_links
        if isinstance(link, bool) or not isinstance(link, int | np.integer) or not 0 <= link < n:
            raise NotFoundError(f"link {link} does not exist; valid links are 0-{n - 1}", field="link")
        return int(link)

    def link_states(self) -> list[LinkState]:
        # ``link_state`` is replaced, never written in place: one list per state array.
        if self._lstates_of is not self.link_state:
            self._lstates = [LINK_STATES[c] for c in self.link_state.tolist()]
            self._lstates_of = self.link_state
        return list(self._lstates)

    def link_state_of(self, link: int) -> LinkState:
        return LINK_STATES[self.link_state[self.check_link(link)]]

    def set_link(self, link: int, dst: LinkState, reason: str, **detail: Any) -> None:
        src = LINK_STATES[self.link_state[link]]
        check_link_transition(src, dst)
        st = self.link_state.copy()
        st[link] = _LCODE[dst]
        self.link_state = ro(st)
        lt = self.ctx.links
        factor = np.where(st == L_DOWN, 0.0, np.where(st == L_DEGRADED, DEGRADED_LINK_BW, 1.0))
        self.link_bw_eff = ro(lt.bw_bytes_per_s * factor)
        self._links_dirty = True
        self.ctx.bus.event(f"link-{dst.value}", link=link, prev=src.value, reason=reason,
                           src_chip=int(lt.src[link]), dst_chip=int(lt.dst[link]), **detail)

    def link_state_counts(self) -> dict[str, int]:
        counts = np.bincount(self.link_state, minlength=len(LINK_STATES))
        return {s.value: int(counts[i]) for i, s in enumerate(LINK_STATES)}

    @property
    def link_tx_bytes(self) -> np.ndarray:
        return self._ltx_acc + self._link_rate * (self.ctx.now - self._ltx_t0)

    def _tx_now(self) -> np.ndarray:
        """``link_tx_bytes`` now, read-only, computed once per instant (the health monitor
        and the balancer both read the links at every tick)."""
        now, t0, acc, rate = self.ctx.now, self._ltx_t0, self._ltx_acc, self._link_rate
        hit = self._tx_cache
        if hit is None or hit[0] != now or hit[1] != t0 or hit[2] is not acc or hit[3] is not rate:
            # ``link_tx_bytes`` at ``now`` (read once for the key and the value).
            hit = self._tx_cache = (now, t0, acc, rate, ro(acc + rate * (now - t0)))
        return hit[4]

    def link_metrics(self) -> dict[str, np.ndarray]:
        lt = self.ctx.links
        return {
            "src": lt.src,
            "dst": lt.dst,
            "bandwidth_bytes_per_s": self.link_bw_eff,
            "nominal_bandwidth_bytes_per_s": lt.bw_bytes_per_s,
            "latency_s": lt.latency_s,
            "utilization": self.link_utilization,
            "tx_bytes": self._tx_now(),
            "errors": self.link_errors,
            "state": self.link_state,
        }

    def bump_link_errors(self, link: int, count: int) -> None:
        errs = self.link_errors.copy()
        errs[link] += count
        self.link_errors = ro(errs)
        lt = self.ctx.links
        ends = [c for c in (int(lt.src[link]), int(lt.dst[link])) if c >= 0]
        self.ctx.telemetry.bump("link_errors", np.array(ends), count)

    def refresh_links(self, recomputed: bool) -> None:
        """After a telemetry sample: link load follows its chips' communication load."""
        if not self.n_links or not (recomputed or self._links_dirty):
            return
        t, lt = self.ctx.telemetry, self.ctx.links
        comm, d = t.comm_load * t.powered, lt.dst
        u = np.minimum(comm[lt.src], np.where(d < 0, comm[lt.src], comm[np.maximum(d, 0)]))
        u[self.link_state == L_DOWN] = 0.0
        self.link_utilization = ro(u)
        self._ltx_acc = self.link_tx_bytes
        self._ltx_t0 = self.ctx.now
        self._link_rate = u * lt.bw_bytes_per_s
        self._links_dirty = False

    # --- a gang's links --------------------------------------------------------------------------
    def gang(self, chips: Sequence[int]) -> tuple[np.ndarray, np.ndarray, bool]:
        """(chip index array, links among them, spans several fleet groups), cached.

        Jobs pass the same ``spec.chips`` tuple at every step; the cache is keyed by that
        object's identity so a 4,096-chip gang is not re-hashed at every step.
        """
        ent = self._link_cache.get(id(chips))
        if ent is not None and ent[0] is chips:
            return ent[1]
        lt = self.ctx.links
        arr = np.asarray(chips, dtype=np.int64)
        links = lt.among(arr, self.ctx.n_chips)
        gs = lt.group_size
        spans = bool(lt.net_bw_per_chip > 0 and arr.size and arr.min() // gs != arr.max() // gs)
        if len(self._link_cache) > 256:
            self._link_cache.clear()
        val = (arr, links, spans)
        self._link_cache[id(chips)] = (chips, val)
        return val

    def gang_clock_factor(self, chips: Sequence[int]) -> float:
        t = self.ctx.telemetry
        if not t.any_throttled:
            return 1.0
        return float(t.clock_factor[self.gang(chips)[0]].min())

    def job_nominal_link_bw(self, chips: Sequence[int]) -> float:
        _, idx, spans = self.gang(chips)
        lt = self.ctx.links
        bw = self.ctx.spec.link_bw_bytes_per_s if idx.size == 0 else float(lt.bw_bytes_per_s[idx].min())
        return min(bw, lt.net_bw_per_chip) if spans else bw

    def job_link_bw(self, chips: Sequence[int]) -> float:
        _, idx, spans = self.gang(chips)
        lt = self.ctx.links
        if idx.size == 0:
            bw = self.ctx.spec.link_bw_bytes_per_s
        else:
            st = self.link_state[idx]
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
