"""One cluster's health on the timeline: every ``interval_s`` (2 s) it samples the fabric,
feeds the telemetry history, runs the vectorized scan and the failure predictor, and
asks the recovery orchestrator to drain a chip when a failure is predicted.

    mon = HealthMonitor(cluster_id, fabric, timeline, book=AlertBook(), config=HealthConfig(),
                        drain=orchestrator.drain | None, sink=store_rollup_sink | None,
                        mounts=lambda: [...], jobs=lambda: {...})
    mon.start()                       # tl.every(interval_s, mon.tick)
    mon.chip_health() / mon.link_health()   -> ["ok" | "warning" | "critical", ...]
    mon.history.query(scope, metric, range, now, target)

Worker fabrics (local, Ray) measure processes, not chips: their chip metrics carry NaN for
what a worker slot cannot measure (temperatures, ECC), which the scan's rules read as
"nothing seen". What they do measure gets its own rules here: a busy slot whose worker
has sent no heartbeat for ``HEARTBEAT_STALE_S`` (``worker-heartbeat``, critical, while it
lasts), and each new entry of the fabric's fault log about a worker (``HardwareErrors``,
``worker-fault``: hung, killed from outside, OOM-killed) as an alert on its slot
(``worker-hung``, ``worker-killed``, ``worker-oom-killed``) that resolves once a worker on
that slot heartbeats again ``WORKER_ALERT_HOLD_S`` later (the job recovered).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from podfleet.engine.timeline import Timeline
from podfleet.fabric.base import ChipState, Fabric, HardwareErrors, LinkState
from podfleet.health.alerts import AlertBook
from podfleet.health.predict import DEFAULT_MODEL, Alarm, LogisticModel, Predictor
from podfleet.health.scan import HealthConfig, HealthScanner, ScanResult, thermal_inputs
from podfleet.health.telemetry import RollupRow, TelemetryHistory
from podfleet.scheduler.samples import util_ratio

# A busy worker slot silent for this long is alerting (the fabric's own hang timeout, 1-3 s,
# usually restarts it first: then the fault log's ``hang`` entry raises ``worker-hung``).
HEARTBEAT_STALE_S = 10.0
WORKER_ALERT_HOLD_S = 30.0
_WORKER_RULES = {"hang": "worker-hung", "signal": "worker-killed", "oom-kill": "worker-oom-killed"}
_WORKER_TEXT = {"hang": "worker stopped sending heartbeats (hung); restarted",
                "signal": "worker killed by a signal podfleet did not send",
                "oom-kill": "worker killed by the kernel's OOM killer"}

# State codes the scanner reads: the order of the state enums.
_CHIP_CODE = {s: i for i, s in enumerate(ChipState)}
_LINK_CODE = {s: i for i, s in enumerate(LinkState)}


class HealthMonitor:
    def __init__(self, cluster_id: str, fabric: Fabric, timeline: Timeline, *, book: AlertBook | None = None,
                 config: HealthConfig | None = None, model: LogisticModel = DEFAULT_MODEL,
                 drain: Callable[[int, str], Any] | None = None,
                 sink: Callable[[list[RollupRow]], None] | None = None,
                 mounts: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
                 jobs: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None) -> None:
        self.cluster_id = cluster_id
        self.fab = fabric
        self.tl = timeline
        self.cfg = cfg = config or HealthConfig()
        self.book = book or AlertBook()
        n = fabric.topology.n_chips
        nl = len(fabric.link_states())
        self.scanner = HealthScanner(cluster_id, n, nl, self.book, cfg)
        links = fabric.topology.links
        if len(links) == nl:  # name link alerts "link:A-B" as the API and CLI do
            self.scanner.link_names = [f"{min(k.src, k.dst)}-{max(k.src, k.dst)}" for k in links]
        self.history = TelemetryHistory(cluster_id, n, nl, cfg.interval_s, sink=sink)
        self.predictor = Predictor(n, model, ambient_c=cfg.ambient_c)
        self.drain = drain
        self.mounts = mounts
        self.jobs = jobs
        self.alarms: list[Alarm] = []
        self.last: ScanResult | None = None
        self._prev_states: np.ndarray | None = None
        self._state_list: list[ChipState] | None = None
        self._states: np.ndarray | None = None
        self._usable: np.ndarray | None = None
        self._proc: object | None = None  # the timeline process, once started
        # ``thermal_inputs`` operands over chips (array operands cost less than scalars).
        self._ambient = np.full(n, cfg.ambient_c)
        self._floor_w = np.ones(n)
        self._last_fault: object | None = None  # the newest fault-log entry already read
        self._worker_alerts: dict[tuple[str, str], float] = {}  # (target, rule) -> fired at
        self._stale = np.zeros(n, bool)
        # Every chip counts as heartbeating where the fabric reports no heartbeats (shared,
        # read-only: only read).
        self._all_fresh = np.ones(n, bool)
        self._all_fresh.flags.writeable = False
        # Whether the fabric keeps a fault log, asked once per fabric object: a runtime-checkable
        # protocol's ``isinstance`` walks its members (~15 us, a twentieth of a pod's tick).
        self._errors_of: tuple[object, bool] = (None, False)

    def start(self) -> None:
        if self._proc is None:
            self._proc = self.tl.every(self.cfg.interval_s, self.tick)

    def _chip_states(self) -> np.ndarray:
        """State codes over chips, rebuilt only when the fabric's states changed (a
        read-only array, the same object until then)."""
        states = self.fab.chip_states()
        if states != self._state_list:
            codes = np.fromiter(map(_CHIP_CODE.__getitem__, states), dtype=np.int64, count=len(states))
            codes.flags.writeable = False
            self._state_list, self._states, self._usable = list(states), codes, codes <= 1
        return self._states  # type: ignore[return-value]

    def tick(self) -> ScanResult:
        fab, now = self.fab, self.tl.now
        metrics = fab.chip_metrics()
        states = self._chip_states()
        lm = fab.link_metrics()
        lstates = np.asarray(lm["state"]) if "state" in lm else \
            np.fromiter((_LINK_CODE[s] for s in fab.link_states()), dtype=np.int64)
        util = util_ratio(metrics)
        self.history.add_fabric(now, metrics, util, lm)
        # Temperature rise and floored power: read by the scan (thermal resistance) and the
        # predictor (its lagged resistance) alike, computed once for both.
        rise, power_floor = thermal_inputs(metrics, self._ambient, self._floor_w)
        res = self.scanner.scan(now, metrics, states, lm, lstates,
                                mounts=self.mounts() if self.mounts else (),
                                jobs=self.jobs() if self.jobs else None, util=util,
                                rise=rise, power_floor=power_floor, pace=self.tl.pace)
        # A chip back from isolation (a repaired or replaced one) or from a firmware
        # update (new firmware, and a power history the update broke): no history.
        prev = self._prev_states
        if prev is not None and prev is not states:
            back = ((prev == 3) | (prev == 4)) & (states <= 1)
            if back.any():
                self.predictor.reset(back)
        self._prev_states = states
        same_ambient = self.predictor.feat.ambient_c == self.cfg.ambient_c
        for alarm in self.predictor.observe(now, metrics, self._usable, rise=rise if same_ambient else None,
                                            power_floor=power_floor):
            if states[alarm.chip] > 1:
                continue
            self.alarms.append(alarm)
            _a, _ = self.book.fire(cluster_id=self.cluster_id, target=f"chip:{alarm.chip}", rule="predicted-failure",
                                  severity="critical", message=f"failure predicted (p={alarm.probability:.2f})",
                                  now=now, value=alarm.probability, detail=alarm.features)
            self.tl.emit("failure-predicted", cluster_id=self.cluster_id, chip=alarm.chip,
                         probability=round(alarm.probability, 4))
            if self.drain is not None:
                self.drain(alarm.chip, f"failure predicted (p={alarm.probability:.2f})")
        self._worker_rules(now, metrics)
        self.last = res
        return res

    def _worker_rules(self, now: float, metrics: Mapping[str, np.ndarray]) -> None:
        """Alerts from what a worker fabric measures: heartbeats and its fault log."""
        fab, book, cid = self.fab, self.book, self.cluster_id
        age, busy = metrics.get("heartbeat_age_s"), metrics.get("busy")
        fresh = self._all_fresh
        if age is not None and busy is not None:
            a = np.nan_to_num(np.asarray(age, np.float64))
            b = np.asarray(busy, np.float64) > 0
            stale = b & (a > HEARTBEAT_STALE_S)
            fresh = b & (a <= HEARTBEAT_STALE_S)
            for c in np.flatnonzero(stale & ~self._stale).tolist():
                book.fire(cluster_id=cid, target=f"chip:{c}", rule="worker-heartbeat", severity="critical",
                          message=f"worker sent no heartbeat for {a[c]:.0f} s", now=now, value=float(a[c]))
            for c in np.flatnonzero(self._stale & ~stale).tolist():
                book.clear(cid, f"chip:{c}", "worker-heartbeat", now)
            self._stale = stale
        if self._errors_of[0] is not fab:
            self._errors_of = (fab, isinstance(fab, HardwareErrors))
        if self._errors_of[1]:
            log = cast(HardwareErrors, fab).hardware_errors()
            # New entries are those after the last one seen (the log is bounded: once full,
            # its length stays the same while old entries drop off the front).
            start = 0
            last = self._last_fault
            if last is not None:
                for i in range(len(log) - 1, -1, -1):
                    if log[i] is last:
                        start = i + 1
                        break
            for ev in log[start:]:
                seen = str(ev.detail.get("observed", ""))
                rule = _WORKER_RULES.get(seen) if ev.kind == "worker-fault" else None
                if rule is None or ev.chip is None:
                    continue
                target = f"chip:{ev.chip}"
                book.fire(cluster_id=cid, target=target, rule=rule, severity="critical" if seen == "hang" else "warning",
                          message=f"{_WORKER_TEXT[seen]} (rank {ev.detail.get('rank')} of {ev.job_id})", now=now,
                          detail={k: v for k, v in ev.detail.items() if k in ("rank", "signal", "heartbeat_age_s")})
                self._worker_alerts[(target, rule)] = now
            if log:
                self._last_fault = log[-1]
        for (target, rule), t in list(self._worker_alerts.items()):
            chip = int(target.removeprefix("chip:"))
            if now - t >= WORKER_ALERT_HOLD_S and (chip >= len(fresh) or fresh[chip] or not self._usable_chip(chip)):
                book.clear(cid, target, rule, now)
                del self._worker_alerts[(target, rule)]

    def _usable_chip(self, chip: int) -> bool:
        u = self._usable
        return bool(u[chip]) if u is not None and chip < len(u) else True

    def chip_health(self) -> list[str]:
        return self.scanner.chip_health_names()

    def link_health(self) -> list[str]:
        return self.scanner.link_health_names()
