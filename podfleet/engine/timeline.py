"""The one timeline every part of podfleet runs on.

Virtual time (``speed=None``): a plain ``simpy.Environment`` runs as fast as possible.
Paced time (``speed=X``): ``PacedEnvironment`` is a ``simpy.rt.RealtimeEnvironment``
that only changes how a step waits: instead of sleeping until the next event it waits
on the command inbox, so a command submitted from an API thread runs within
milliseconds, at the sim time that corresponds to the wall clock.

Single writer: other threads never touch engine state; they ``submit`` a callable and
get a ``concurrent.futures.Future`` for its result (``await asyncio.wrap_future(f)``).

Stalls: when the engine falls behind the wall clock by more than ``REANCHOR_S`` (the
process was paused, a step blocked for minutes), the paced clock re-anchors instead of
running the backlog at full speed behind the wall clock: the events due keep their order,
and ``skew_s`` grows by the time lost, so ``now + skew_s`` (what the control plane stamps)
never lags the wall clock by more than ``REANCHOR_S``.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Generator
from concurrent.futures import Future
from contextlib import AbstractContextManager, ExitStack
from time import monotonic, time
from typing import Any, ParamSpec, TypeVar

import numpy as np
import simpy
import simpy.rt

from podfleet.engine.eventlog import EventLog, Record
from podfleet.errors import UnavailableError

T = TypeVar("T")
P = ParamSpec("P")

# The inbox holds commands of every result type, so it erases them: a command is a
# zero-argument call and the future its result goes to.
_Command = tuple[Callable[[], Any], "Future[Any]"]
# Paced time: behind the wall clock by more than this (wall seconds), the clock re-anchors.
REANCHOR_S = 1.0


class Timeline:
    def __init__(
        self, seed: int = 0, *, speed: float | None = None, start: float = 0.0, log_keep: int | None = None
    ) -> None:
        if speed is not None and speed <= 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.seed = seed
        self.speed = speed
        self.rng = np.random.default_rng(seed)
        self.log = EventLog(keep=log_keep)
        self._inbox: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.engine_thread: int | None = None
        # Optional group-commit context for ``drain`` (see there); None: no batching.
        self.batch: Callable[[], AbstractContextManager[object]] | None = None
        self.events_processed = 0  # SimPy events stepped by run() / serve_forever()
        # (interval, first round) -> the periodic work sharing one process, until that round.
        self._rounds: dict[tuple[float, float], tuple[list[Callable[[], object]], simpy.Process]] = {}
        # Timeline seconds lost to stalls (paced time only; see the module docstring).
        self.skew_s = 0.0
        self.env: simpy.Environment = (
            simpy.Environment(start) if speed is None else PacedEnvironment(self, self._wake, start, 1.0 / speed)
        )
        self.anchor_wall()

    # --- the wall clock people read ------------------------------------------------
    def anchor_wall(self) -> None:
        """Timeline time ``now`` happens at unix time ``time()`` (the control plane anchors
        when it is built). From here ``wall_at`` maps timeline time to the wall clock."""
        self._wall0, self._t0 = time(), self.now

    @property
    def pace(self) -> float:
        """Timeline seconds per wall second: the speed when paced; 1 in virtual time (a
        rehearsal's stamps are its own time from the anchor, as fast as it runs)."""
        return self.speed or 1.0

    def wall_at(self, t: float) -> float:
        """Unix seconds at which timeline time ``t`` happens on the wall clock: a demo at 20x
        stamps its events with the wall clock, not a clock running 20 times too fast. The
        time lost to stalls (``skew_s``) counts as passed, so stamps never lag the wall."""
        return self._wall0 + (t - self._t0 + self.skew_s) / self.pace

    def timeline_at(self, unix: float) -> float:
        """The inverse of ``wall_at``: the timeline time of a wall-clock instant."""
        return self._t0 + (unix - self._wall0) * self.pace - self.skew_s

    # --- time and events -------------------------------------------------------
    @property
    def now(self) -> float:
        return float(self.env.now)

    def emit(self, kind: str, **fields: object) -> Record:
        """Append an event to the log at the current sim time."""
        return self.log.append(self.now, kind, fields)

    def process(self, gen: Generator[simpy.Event, Any, Any]) -> simpy.Process:
        return self.env.process(gen)

    def every(self, interval_s: float, fn: Callable[[], object], *, start_delay: float | None = None) -> simpy.Process:
        """Run ``fn`` every ``interval_s`` of sim time (one SimPy process, not one per item).

        Periodic work registered for the same interval and the same first round before that
        round comes (the fabric's telemetry, the health scan, the plane's tick and the
        balancer, all every 2 s from a cluster's start) shares one process and runs in the
        order it was registered, as the separate processes ran: one SimPy event a round
        instead of one each (each costs a timeout, a heap push and pop and a generator
        resume: a tenth of a pod rehearsal's time was five of them every tick)."""
        delay = interval_s if start_delay is None else start_delay
        key = (interval_s, self.now + delay)
        group = self._rounds.get(key)
        if group is not None:
            group[0].append(fn)
            return group[1]
        fns: list[Callable[[], object]] = [fn]

        def loop() -> Generator[simpy.Event, Any, None]:
            yield self.env.timeout(delay)
            # From its first round on, the group takes no more members (one registered
            # later starts its own rounds, as before).
            if self._rounds.get(key, (None,))[0] is fns:
                del self._rounds[key]
            while True:
                for f in fns:
                    try:
                        f()
                    except UnavailableError as exc:
                        # The store is unreachable: this round is skipped, the next one runs on
                        # time (periodic work upserts whole records, so it catches up).
                        self.emit("round-skipped", reason=exc.message)
                yield self.env.timeout(interval_s)

        proc = self.env.process(loop())
        self._rounds[key] = (fns, proc)
        return proc

    def call_at(self, delay_s: float, fn: Callable[[], object]) -> None:
        """Run ``fn`` once after ``delay_s`` of sim time."""
        def fire(_event: simpy.Event) -> None:
            fn()

        self.env.timeout(delay_s).callbacks.append(fire)

    # --- commands from other threads ------------------------------------------------
    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Thread-safe: run ``fn(*args, **kwargs)`` on the engine thread; returns its Future."""
        fut: Future[T] = Future()
        self._inbox.put((functools.partial(fn, *args, **kwargs), fut))
        self._wake.set()
        return fut

    def drain(self) -> int:
        """Run queued commands now (engine thread only). Returns how many ran.

        Group commit: with a ``batch`` context set (the control plane sets its store's
        ``transaction``), every command queued at this moment runs inside one
        transaction, and their futures resolve only after it commits, so nothing is
        acknowledged before it is durable while N concurrent writes cost one fsync, not
        N. Each command's own ``transaction()`` is a savepoint, so a failing command rolls
        back alone. If the commit itself fails, no command of the batch is acknowledged
        and the engine stops (fail-stop: memory may be ahead of the store, and a restart
        reloads the truth from the store).
        """
        cmds: list[_Command] = []
        while True:
            try:
                cmds.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        if not cmds:
            return 0
        done: list[tuple[Future[Any], bool, Any]] = []
        if self.batch is None:
            for cmd in cmds:
                self._run(cmd, done)
                self._resolve(done)
            return len(cmds)
        stack = ExitStack()
        try:
            stack.enter_context(self.batch())
        except UnavailableError as exc:
            # The store refused to open the transaction (unreachable, or this server no
            # longer leads): no command ran, so each is answered with that and the engine
            # goes on; nothing in memory moved ahead of the store.
            for _, fut in cmds:
                if fut.set_running_or_notify_cancel():
                    fut.set_exception(exc)
            self.emit("batch-refused", reason=exc.message, commands=len(cmds))
            return len(cmds)
        try:
            with stack:
                for cmd in cmds:
                    self._run(cmd, done)
        except BaseException as exc:
            for fut, _, _ in done:
                fut.set_exception(exc)
            self.emit("engine-fatal", reason=f"batch commit failed: {exc!r}")
            self.stop()
            raise
        self._resolve(done)
        return len(cmds)

    @staticmethod
    def _run(cmd: _Command, done: list[tuple[Future[Any], bool, Any]]) -> None:
        call, fut = cmd
        if not fut.set_running_or_notify_cancel():
            return
        try:
            done.append((fut, True, call()))
        except BaseException as exc:  # delivered to the caller, who decides
            done.append((fut, False, exc))

    @staticmethod
    def _resolve(done: list[tuple[Future[Any], bool, Any]]) -> None:
        for fut, ok, value in done:
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)
        done.clear()

    # --- running -------------------------------------------------------------------
    def run(self, until: float | None = None) -> None:
        """Advance until sim time ``until`` (or the schedule empties), running commands between events."""
        env = self.env
        self.engine_thread = threading.get_ident()
        stop_at = float("inf") if until is None else until
        wake_set, stopping = self._wake.is_set, self._stop.is_set
        step, peek, n = env.step, env.peek, 0
        try:
            # ``stop()`` raises the wake flag after the stop flag, and only the engine thread
            # lowers it: the stop flag is read only when the wake flag is up (one flag read
            # per event, not two).
            if not stopping():
                while peek() < stop_at:
                    if wake_set():
                        if stopping():
                            break
                        self._wake.clear()
                        self.drain()
                        if stopping():  # stopped meanwhile: seen after this step, as before
                            self._wake.set()
                    step()
                    n += 1
        finally:
            self.events_processed += n
        if self._wake.is_set():
            self._wake.clear()
            self.drain()
        if until is not None and env.now < until and not self._stop.is_set():
            # Nothing left before ``until``: SimPy's own ``run(until)`` moves the clock there
            # (its stop event is urgent, so nothing scheduled at ``until`` runs yet).
            env.run(until=until)

    def serve_forever(self) -> None:
        """Paced mode: step in real time until ``stop()``; commands run promptly."""
        if not isinstance(self.env, PacedEnvironment):
            raise RuntimeError("serve_forever needs a paced timeline (speed=...)")
        self.engine_thread = threading.get_ident()
        self.env.sync()
        while not self._stop.is_set():
            self.env.step()
            self.events_processed += 1

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()


class PacedEnvironment(simpy.rt.RealtimeEnvironment):
    """Real time whose wait is interruptible by commands (see module docstring)."""

    def __init__(self, timeline: Timeline, wake: threading.Event, start: float, factor: float) -> None:
        super().__init__(start, factor=factor, strict=False)
        self._timeline = timeline
        self._wake = wake  # the timeline's: set when a command arrives or on stop

    def wall_now(self) -> float:
        return self.env_start + (monotonic() - self.real_start) / self.factor

    def step(self) -> None:
        tl = self._timeline
        while True:
            if tl.stopping:
                return
            evt_time = self.peek()
            if self._wake.is_set():
                self._wake.clear()
                # Commands run at the sim time matching the wall clock; never past the
                # next scheduled event, so causality holds.
                self._now = max(self._now, min(self.wall_now(), evt_time))
                tl.drain()
                continue
            delay = 0.5 if evt_time == float("inf") else (
                self.real_start + (evt_time - self.env_start) * self.factor - monotonic()
            )
            if delay < -REANCHOR_S:
                self._reanchor(-delay)
                break
            if delay <= 0:
                break
            self._wake.wait(min(delay, 0.5))
        simpy.Environment.step(self)

    def _reanchor(self, behind_s: float) -> None:
        """The next event is ``behind_s`` wall seconds late: move the anchor by as much, so
        the backlog runs paced from here, and count the timeline time lost in ``skew_s``."""
        self.real_start += behind_s
        lost = behind_s / self.factor
        self._timeline.skew_s += lost
        self._timeline.emit("timeline-reanchored", behind_s=round(behind_s, 3), skew_s=round(self._timeline.skew_s, 3))
