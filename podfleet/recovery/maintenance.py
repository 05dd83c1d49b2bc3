"""Rolling maintenance on real hosts: an admin's command run on each host of a cluster,
one group of chips at a time, with the group's ranks moved away first.

    mt = MaintenanceRollouts(fabric, timeline, chips_port, audit=...)
    r = mt.start(["sh", "-c", "apt-get upgrade -y"], unit="chip" | "host", chips=None,
                 max_failures=1, timeout_s=600.0, actor="u-1:alice")
    mt.get(r.id).to_dict()    # state, progress, done, current, failed, runs (exit codes, output)
    mt.resume(r.id)           # a rollout paused after ``max_failures`` failed groups

A group is one chip (``unit: chip``) or every chip of one host (``unit: host``), taken
in chip order, the groups no rank runs on first (a rank that has to move then finds the
free chips maintained already, so it moves once). For each group:

1. take the chips out of service (``ChipOps.take_out``: the chip lifecycle's drain, so a
   chip running a rank is cordoned and its rank moves to a spare or free chip through
   the fabric's own rank move, while the job's other ranks keep running); chips already
   out of service (failed, isolated) at their turn are skipped, not updated;
2. wait until no rank holds them (``drain_timeout_s``: a rank that cannot move is a
   failed group); the next group also waits until the jobs moved train again (no job of
   the cluster ``RECOVERING``), so each move is a pause of its own;
3. run the command once per host of the group (``HostCommands.host_command``, on a
   thread of its own: the engine never blocks), with ``PODFLEET_MAINTENANCE_ID``,
   ``PODFLEET_HOST`` and ``PODFLEET_CHIPS`` in its environment; its exit code, output
   tail and duration are kept in the rollout's ``runs``;
4. exit 0: the chips are health-checked and return to service (``ChipOps.bring_back``:
   repair, the fabric must read them healthy, uncordon). A non-zero exit, a timeout,
   or a failed health check: the chips stay isolated and cordoned, with the reason in
   ``failed`` and the cluster's log, and the rollout goes on with the next group, or
   pauses (``paused``) once ``max_failures`` groups have failed; ``resume`` goes on.

States (enforced): running -> paused | succeeded | failed; paused -> running. A rollout
that reached its end with some groups failed is ``failed``, and so is one whose cluster
went away under it (``reason`` starts with ``stopped:``); the chips that worked are
back in service either way. Rollouts live with the control plane's process (as firmware
rollouts do): a restarted control plane starts with none, and chips a rollout left
cordoned stay cordoned (modes persist).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import simpy

from podfleet.engine.timeline import Timeline
from podfleet.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PodfleetError,
    UnknownNameError,
)
from podfleet.fabric.base import ChipState, CommandResult, Fabric, HostCommands
from podfleet.states import check_transition, transitions
from podfleet.wire import JsonObject

UNITS = ("chip", "host")
POLL_S = 0.2  # how often a group's drain and command are looked at (timeline seconds)
MAX_TIMEOUT_S = 24 * 3600.0


class MaintenanceState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


MAINTENANCE_TRANSITIONS = transitions(MaintenanceState, {
    MaintenanceState.RUNNING: {MaintenanceState.PAUSED, MaintenanceState.SUCCEEDED, MaintenanceState.FAILED},
    MaintenanceState.PAUSED: {MaintenanceState.RUNNING},
})


@runtime_checkable
class MaintenanceFabric(Fabric, HostCommands, Protocol):
    """What a maintenance rollout drives: chip states (``Fabric``) and host commands."""


class ChipOps(Protocol):
    """The chip lifecycle, as the rollout uses it (``maintenanceservice``: the plane's
    audited chip commands)."""

    def holder(self, chip: int) -> str | None:
        """The job whose rank runs on ``chip``, if any."""

    def take_out(self, chip: int, reason: str) -> None:
        """Out of service: cordoned, its rank (if any) moving off, no new work on it."""

    def bring_back(self, chip: int, reason: str) -> str | None:
        """Health-check the chip and return it to service; None when it passed, else why not."""

    def keep_out(self, chip: int, reason: str) -> None:
        """Leave the chip isolated and cordoned with ``reason``."""

    def recovering(self) -> list[str]:
        """The cluster's jobs still recovering (a moved rank not yet training)."""


@dataclass(frozen=True)
class HostRun:
    """One run of the command on one host: which chips it served and what it did."""

    host: str
    chips: list[int]
    exit_code: int | None
    output: str
    duration_s: float
    error: str
    t_start: float
    t_end: float


@dataclass
class Maintenance:
    id: str
    command: list[str]
    unit: str
    batches: list[list[int]]
    max_failures: int
    timeout_s: float
    drain_timeout_s: float
    actor: str
    t_start: float
    state: MaintenanceState = MaintenanceState.RUNNING
    next_batch: int = 0
    done: list[int] = field(default_factory=list)
    current: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)  # out of service at their turn
    failed: dict[int, str] = field(default_factory=dict)  # chip -> why it stays cordoned
    failed_groups: int = 0
    runs: list[HostRun] = field(default_factory=list)
    reason: str = ""
    t_end: float | None = None
    version: str | None = None  # a firmware update run as a maintenance rollout: its version

    @property
    def total(self) -> int:
        return sum(len(b) for b in self.batches)

    def set_state(self, state: MaintenanceState) -> None:
        check_transition("maintenance rollout", MAINTENANCE_TRANSITIONS, self.state, state)
        self.state = state

    def to_dict(self) -> JsonObject:
        d = asdict(self)
        d["state"] = self.state.value
        finished = len(self.done) + len(self.skipped) + len(self.failed)
        d["progress"] = round(finished / self.total, 4) if self.total else 1.0
        d["failed"] = {str(k): v for k, v in self.failed.items()}
        d["chips"] = self.total
        d.pop("batches")
        d.pop("next_batch")
        return d


class _Pending:
    """A command running on a thread; ``result`` is set once it ends."""

    def __init__(self, call: Callable[[], CommandResult]) -> None:
        self.result: CommandResult | None = None
        self._call = call
        threading.Thread(target=self._run, name="podfleet-maintenance", daemon=True).start()

    def _run(self) -> None:
        self.result = self._call()


class MaintenanceRollouts:
    """One cluster's maintenance rollouts (one running at a time)."""

    def __init__(self, fabric: MaintenanceFabric, timeline: Timeline, chips: ChipOps, *,
                 log: Callable[[str, int | None], object] | None = None,
                 audit: Callable[[str, str, JsonObject], object] | None = None) -> None:
        self.fab, self.tl, self.chips = fabric, timeline, chips
        self.log = log  # a line of the cluster's log (message, chip)
        self.audit = audit  # (result, target, detail) of each automatic step
        self.rollouts: dict[str, Maintenance] = {}
        self._resumed: set[str] = set()

    # --- commands ---------------------------------------------------------------------------
    def start(self, command: list[str], *, unit: str = "chip", chips: list[int] | None = None,
              max_failures: int = 1, timeout_s: float = 600.0, drain_timeout_s: float = 120.0,
              actor: str = "system", version: str | None = None) -> Maintenance:
        if unit not in UNITS:
            raise UnknownNameError("maintenance unit", unit, UNITS, field="unit")
        if not command:
            raise InvalidInputError("the maintenance command is empty", field="command")
        if max_failures < 1:
            raise InvalidInputError(f"max_failures must be at least 1, got {max_failures}", field="max_failures")
        if not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise InvalidInputError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}], got {timeout_s:g}",
                                    field="timeout_s")
        open_ = [r for r in self.rollouts.values() if r.state in (MaintenanceState.RUNNING, MaintenanceState.PAUSED)]
        if open_:
            raise ConflictError(f"maintenance rollout {open_[0].id} is still {open_[0].state.value} "
                                f"({len(open_[0].done)}/{open_[0].total} chips); resume it or let it end",
                                field="command")
        topo = self.fab.topology
        targets = list(range(topo.n_chips)) if chips is None else sorted(set(chips))
        for c in targets:
            topo.check_chip(c)
        if not targets:
            raise InvalidInputError("no chips to maintain", field="chips")
        batches = [[c] for c in targets] if unit == "chip" else self._host_batches(targets)
        # Groups no rank runs on first: by the time a rank has to move, the free chips it can
        # move to are maintained already, so it moves once (not onto a chip whose turn comes).
        batches.sort(key=lambda b: any(self.chips.holder(c) is not None for c in b))
        r = Maintenance(f"mt-{len(self.rollouts) + 1:04d}", list(command), unit, batches, max_failures,
                        timeout_s, drain_timeout_s, actor, self.tl.now, version=version)
        self.rollouts[r.id] = r
        self.tl.emit("maintenance-start", rollout=r.id, unit=unit, chips=r.total, groups=len(batches))
        self.tl.process(self._run(r))
        return r

    def resume(self, rollout_id: str) -> Maintenance:
        r = self.get(rollout_id)
        if r.state is not MaintenanceState.PAUSED:
            raise ConflictError(f"maintenance rollout {r.id} is {r.state.value}, not paused: nothing to resume",
                                field="rollout")
        r.set_state(MaintenanceState.RUNNING)
        r.failed_groups = 0  # the operator looked at the failures: N more may fail before the next pause
        self._resumed.add(r.id)
        return r

    def get(self, rollout_id: str) -> Maintenance:
        if rollout_id not in self.rollouts:
            raise NotFoundError(f"maintenance rollout {rollout_id!r} not found", field="rollout")
        return self.rollouts[rollout_id]

    # --- the flow ---------------------------------------------------------------------------
    def _host_batches(self, targets: list[int]) -> list[list[int]]:
        hosts = self.fab.chip_hosts()
        by_host: dict[str, list[int]] = {}
        for c in targets:
            by_host.setdefault(str(hosts[c]), []).append(c)
        return list(by_host.values())

    def _note(self, msg: str, chip: int | None = None) -> None:
        if self.log is not None:
            self.log(msg, chip)

    def _run(self, r: Maintenance) -> Generator[simpy.Event, Any, None]:
        try:
            yield from self._batches(r)
        except PodfleetError as exc:  # e.g. the cluster was deleted under the rollout
            r.current = []
            self._finish(r, f"stopped: {exc.message}")
            return
        self._finish(r)

    def _batches(self, r: Maintenance) -> Generator[simpy.Event, Any, None]:
        env = self.tl.env
        while r.next_batch < len(r.batches):
            batch = r.batches[r.next_batch]
            r.next_batch += 1
            r.current = list(batch)
            states = self.fab.chip_states()
            live = [c for c in batch if states[c] not in (ChipState.FAILED, ChipState.ISOLATED)]
            r.skipped.extend(c for c in batch if c not in live)
            if live:
                ok = yield from self._group(r, live)
                if not ok:
                    r.failed_groups += 1
            r.current = []
            if r.failed_groups >= r.max_failures and r.next_batch < len(r.batches):
                r.set_state(MaintenanceState.PAUSED)
                r.reason = f"paused after {r.failed_groups} failed group(s): {self._failures(r)}"
                self._note(f"maintenance {r.id}: {r.reason}")
                self.tl.emit("maintenance-paused", rollout=r.id, failed=len(r.failed))
                while r.id not in self._resumed:
                    yield env.timeout(POLL_S)
                self._resumed.discard(r.id)
                self._note(f"maintenance {r.id}: resumed")

    def _group(self, r: Maintenance, chips: list[int]) -> Generator[simpy.Event, Any, bool]:
        env = self.tl.env
        why = f"maintenance {r.id}"
        # Free chips first, then those running ranks: a rank moving off must not land on
        # a chip of the same group that is about to go.
        for c in sorted(chips, key=lambda c: self.chips.holder(c) is not None):
            self.chips.take_out(c, why)
        deadline = env.now + r.drain_timeout_s
        while any(self.chips.holder(c) is not None for c in chips) and env.now < deadline:
            yield env.timeout(POLL_S)
        held = [c for c in chips if self.chips.holder(c) is not None]
        if held:
            for c in held:
                self._fail(r, c, f"its rank of {self.chips.holder(c)} did not move off within "
                                 f"{r.drain_timeout_s:g} s")
            chips = [c for c in chips if c not in held]
            if not chips:
                return False
        hosts = self.fab.chip_hosts()
        by_host: dict[str, list[int]] = {}
        for c in chips:
            by_host.setdefault(str(hosts[c]), []).append(c)
        runs = []
        for host, cs in by_host.items():
            env_vars = {"PODFLEET_MAINTENANCE_ID": r.id, "PODFLEET_HOST": host,
                        "PODFLEET_CHIPS": ",".join(str(c) for c in cs)}
            call = self.fab.host_command(cs[0], r.command, env=env_vars, timeout_s=r.timeout_s)
            runs.append((host, cs, env.now, _Pending(call)))
        ok = not held
        for host, cs, t0, pending in runs:
            while pending.result is None:
                yield env.timeout(POLL_S)
            res = pending.result
            r.runs.append(HostRun(host, cs, res.exit_code, res.output, round(res.duration_s, 3), res.error, t0,
                                  env.now))
            if self.audit is not None:
                self.audit("ok" if res.ok else "error:command-failed", r.id,
                           {"step": "host-command", "host": host, "chips": cs, "exit_code": res.exit_code,
                            "error": res.error, "duration_s": round(res.duration_s, 3)})
            if not res.ok:
                last = res.output.strip().splitlines()[-1:] if res.output.strip() else []
                what = res.error or f"the command exited {res.exit_code}"
                for c in cs:
                    self._fail(r, c, what + (f" ({last[0][:200]})" if last else ""))
                ok = False
                continue
            for c in cs:
                bad = self.chips.bring_back(c, why)
                if bad is None:
                    r.done.append(c)
                else:
                    self._fail(r, c, f"failed its health check after the command: {bad}")
                    ok = False
        # The next group waits for the jobs this one moved to train again: two moves back
        # to back would make one pause twice as long, and a move onto a chip of the next
        # group would be undone at once.
        deadline = env.now + r.drain_timeout_s
        while self.chips.recovering() and env.now < deadline:
            yield env.timeout(POLL_S)
        self.tl.emit("maintenance-progress", rollout=r.id, done=len(r.done), total=r.total)
        return ok

    def _fail(self, r: Maintenance, chip: int, why: str) -> None:
        r.failed[chip] = why
        self.chips.keep_out(chip, f"maintenance {r.id}: {why}")
        self._note(f"maintenance {r.id}: chip {chip} stays cordoned: {why}", chip)

    @staticmethod
    def _failures(r: Maintenance) -> str:
        return "; ".join(f"chip {c}: {w}" for c, w in sorted(r.failed.items()))

    def _finish(self, r: Maintenance, stopped: str | None = None) -> None:
        state = MaintenanceState.FAILED if r.failed or stopped else MaintenanceState.SUCCEEDED
        if r.state is MaintenanceState.PAUSED:
            r.set_state(MaintenanceState.RUNNING)
        r.set_state(state)
        r.t_end = self.tl.now
        r.reason = (f"{stopped}; " if stopped else "") + (f"{len(r.done)} chips maintained" + (f"; skipped (out of service): {r.skipped}" if r.skipped else "")
                    + (f"; stay cordoned: {self._failures(r)}" if r.failed else ""))
        self._note(f"maintenance {r.id} {state.value}: {r.reason}")
        self.tl.emit("maintenance-end", rollout=r.id, state=state.value, reason=r.reason)
        if self.audit is not None:
            self.audit("ok" if state is MaintenanceState.SUCCEEDED else f"error:{state.value}", r.id,
                       {"step": "rollout-end", "state": state.value, "reason": r.reason,
                        "failed": {str(k): v for k, v in r.failed.items()}})
