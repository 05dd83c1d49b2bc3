"""Twin scenarios: a YAML file -> a validated ``Scenario`` -> a run in virtual time -> a report.

``podfleet sim`` rehearses a scenario with the whole control plane in the loop
(``podfleet.rehearsal.rehearsal.rehearse``); ``run_scenario`` here runs the twin alone (the
twin benchmarks measure it), with its own little recovery loop.

Validation is strict (unknown fields and bad values are refused with a one-line
``InvalidInputError`` naming the field and the valid choices). See docs/twin.md for
the format; examples/ holds working files.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from podfleet.engine.timeline import Timeline
from podfleet.errors import InvalidInputError, UnknownNameError
from podfleet.fabric.base import ChipState, FabricEvent, RunState, WorkerGroupSpec
from podfleet.fabric.sim.fabric import SimFabric
from podfleet.fabric.sim.faults import FaultRates, PrecursorParams
from podfleet.hardware.catalog import TOPOLOGY_NAMES, get_topology
from podfleet.hardware.faults import FaultKind
from podfleet.perf.models import MODELS
from podfleet.validation import range_of, refusal

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_DUR_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_DUR_PARTS = re.compile(r"(?:\d+(?:\.\d+)?[smhd])+")


def _duration(v: Any) -> Any:
    """Seconds as a number, or a string with a unit: 90s, 30m, 24h, 2d."""
    if isinstance(v, str):
        m = _DUR.match(v)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2) or "s"]
        if _DUR_PARTS.fullmatch(v.replace(" ", "")):  # 3h10m, 1d12h
            return sum(float(n) * _UNITS[u] for n, u in _DUR_PART.findall(v))
        raise ValueError(f"{v!r} is not a duration; use seconds or a number with s, m, h or d (e.g. 24h, 3h10m)")
    return v


def _rates(v: Any) -> Any:
    """"default", "none", or a mapping of fault kind -> rate per chip-hour (others default)."""
    if isinstance(v, str):
        if v not in ("default", "none"):
            raise ValueError(f"use 'default', 'none' or a mapping of fault kind to rate, not {v!r}")
        return v
    if not isinstance(v, dict):
        raise ValueError("use 'default', 'none' or a mapping of fault kind to rate per chip-hour")
    valid = [k.value for k in FaultKind]
    for k, rate in v.items():
        if k not in valid:
            raise ValueError(f"unknown fault kind {k!r}; valid: {', '.join(valid)}")
        if isinstance(rate, bool) or not isinstance(rate, int | float) or rate < 0:
            raise ValueError(f"rate of {k} must be a number >= 0 per chip-hour, got {rate!r}")
    return dict(v)


Duration = Annotated[float, BeforeValidator(_duration), Field(ge=0)]
if TYPE_CHECKING:
    KindName = str
else:  # the one fault-kind list, as a Literal so a bad kind's error lists the good ones
    KindName = Literal[tuple(k.value for k in FaultKind)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class ScriptedFault(_Strict):
    at: Duration
    kind: KindName
    chip: int | None = Field(default=None, ge=0)
    link: int | None = Field(default=None, ge=0)
    precursor: bool = False
    lead: Duration | None = None


class JobConfig(_Strict):
    id: str = Field(min_length=1)
    model: str = "llama3-8b"

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        # Checked at load: a job the control plane would refuse leaves an empty rehearsal.
        if v not in MODELS:
            raise ValueError(UnknownNameError("model", v, MODELS).message)
        return v
    chips: int | list[int] = Field(description="a count (first free chips) or explicit chip ids")
    steps: int = Field(ge=1)
    checkpoint_interval: int = Field(default=0, ge=0)
    tokens_per_step: int | None = Field(default=None, ge=1)
    start_at: Duration = 0.0
    # Control plane only (the twin alone ignores them): the scheduler's priority and the
    # layout ({tp, pp, dp}; dp > 1 lets recovery restore a rank from a peer replica).
    priority: int = Field(default=50, ge=0, le=100)
    parallelism: Literal["auto"] | dict[str, int] = "auto"

    @property
    def n_chips(self) -> int:
        return self.chips if isinstance(self.chips, int) else len(self.chips)


class FaultCommand(_Strict):
    """A fault as ``podfleet fault inject`` sends it: at a chip, a link (index or "A-B"),
    or the chip that holds ``rank`` of scenario job ``job`` at that moment."""

    kind: KindName
    chip: int | None = Field(default=None, ge=0)
    link: int | str | None = None
    job: str | None = None
    rank: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_target(self) -> FaultCommand:
        given = [n for n, v in (("chip", self.chip), ("link", self.link), ("job", self.job)) if v is not None]
        if len(given) > 1:
            raise ValueError(f"give one target of chip, link or job+rank, not {' and '.join(given)}")
        if (self.job is None) != (self.rank is None):
            raise ValueError("job and rank go together (the chip holding that rank of the job)")
        return self


class FirmwareCommand(_Strict):
    version: str = Field(min_length=1)
    unit: Literal["chip", "node"] = "chip"
    chips: list[int] | None = None


COMMANDS = ("submit", "stop", "fault", "firmware")


class Command(_Strict):
    """One operator command at scenario time ``at``: exactly one of submit (a job, as in
    ``jobs``), stop (a scenario job id), fault, firmware."""

    at: Duration
    submit: JobConfig | None = None
    stop: str | None = None
    fault: FaultCommand | None = None
    firmware: FirmwareCommand | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Command:
        given = [c for c in COMMANDS if getattr(self, c) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(COMMANDS)}, got {', '.join(given) or 'none'}")
        return self

    @property
    def name(self) -> str:
        return next(c for c in COMMANDS if getattr(self, c) is not None)


class Scenario(_Strict):
    name: str = "scenario"
    seed: int = 0
    pod_type: str = "trn2-ultraserver"
    pods: int = Field(default=1, ge=1, le=4096)
    duration: Duration
    telemetry_interval_s: float = Field(default=2.0, gt=0)
    fault_rates: Annotated[Any, BeforeValidator(_rates)] = "default"
    fault_rate_scale: float = Field(default=1.0, ge=0)
    hbm_precursor_share: float = Field(default=0.7, ge=0, le=1)
    thermal_precursor_share: float = Field(default=0.3, ge=0, le=1)
    faults: list[ScriptedFault] = []
    repair: Duration | None = 4 * 3600.0
    spares: int = Field(default=0, ge=0)
    jobs: list[JobConfig] = []
    commands: list[Command] = []

    @model_validator(mode="after")
    def _job_ids(self) -> Scenario:
        seen: set[str] = set()
        for j in [*self.jobs, *(c.submit for c in sorted(self.commands, key=lambda c: c.at) if c.submit)]:
            if j.id in seen:
                raise ValueError(f"job id {j.id!r} is used twice")
            seen.add(j.id)
        timed = sorted(self.commands, key=lambda c: c.at)
        known = {j.id: j.start_at for j in self.jobs}
        for c in timed:
            if c.submit is not None:
                known[c.submit.id] = c.at
            for ref in (c.stop, c.fault.job if c.fault else None):
                if ref is not None and (ref not in known or known[ref] > c.at):
                    raise ValueError(f"command at {c.at:g} s names job {ref!r}, which is not submitted before it; "
                                     f"jobs: {', '.join(known) or 'none'}")
        return self

    @property
    def topology_name(self) -> str:
        return self.pod_type if self.pods == 1 else f"{self.pod_type}:{self.pods}"

    def rates(self) -> FaultRates:
        if self.fault_rates == "none":
            base = FaultRates.none()
        elif self.fault_rates == "default":
            base = FaultRates()
        else:
            base = FaultRates.from_mapping(self.fault_rates)
        return base.scaled(self.fault_rate_scale)


def _clean_loc(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[str]]:
    """The error location cut to real field names (pydantic appends union member tags),
    and the valid field names of the innermost model."""
    cur: Any = model
    out: list[Any] = []
    valid: list[str] = list(model.model_fields)
    for part in loc:
        if isinstance(part, int):
            out.append(part)
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            break
        valid = list(cur.model_fields)
        if part not in cur.model_fields:
            out.append(part)
            break
        out.append(part)
        ann = cur.model_fields[part].annotation
        inner = [ann, *getattr(ann, "__args__", ())]
        cur = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return tuple(out), valid


def parse_scenario(data: Any) -> Scenario:
    if not isinstance(data, dict):
        raise InvalidInputError("a scenario must be a YAML mapping of fields", field="scenario")
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc, valid = _clean_loc(Scenario, tuple(err["loc"]))
        field = ".".join(str(p) for p in loc)
        if err["type"] == "extra_forbidden" and loc and loc[-1] == "cordon":
            raise InvalidInputError("cordon is not supported yet (chip lifecycle is a later issue); "
                                    f"commands: {', '.join(COMMANDS)}", field=field) from None
        if err["type"] == "extra_forbidden":
            raise InvalidInputError(f"unknown field {field!r}; valid: {', '.join(valid)}", field=field) from None
        if err["type"] == "missing":
            raise InvalidInputError(f"missing required field {field!r}", field=field) from None
        if err["type"] == "value_error":  # our own validators' sentences already name the value
            msg = str(err["msg"]).removeprefix("Value error, ")
            raise InvalidInputError(f"{field or 'scenario'}: {msg}", field=field or "scenario") from None
        out = refusal(err, field or "scenario", allowed=range_of(Scenario, loc))
        raise InvalidInputError(out.message, field=out.field, allowed=out.allowed) from None
    try:
        get_topology(sc.topology_name)
    except UnknownNameError:
        raise UnknownNameError("pod type", sc.pod_type, TOPOLOGY_NAMES, field="pod_type") from None
    return sc


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"scenario file {str(p)!r} does not exist", field="scenario")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InvalidInputError(f"scenario {p.name} is not valid YAML{where}", field="scenario") from None
    return parse_scenario(data)


def build(sc: Scenario) -> tuple[Timeline, SimFabric]:
    """The timeline and fabric of a scenario, with its faults and jobs scheduled."""
    tl = Timeline(sc.seed)
    fab = SimFabric(
        get_topology(sc.topology_name), tl, fault_rates=sc.rates(),
        telemetry_interval_s=sc.telemetry_interval_s, spares=sc.spares,
        precursors=PrecursorParams(hbm_share=sc.hbm_precursor_share, chip_thermal_share=sc.thermal_precursor_share),
        auto_repair_s=sc.repair,
    )
    for i, f in enumerate(sc.faults):
        for name, idx, limit in (("chip", f.chip, fab.n_chips), ("link", f.link, fab.links.n)):
            if idx is not None and idx >= limit:
                raise InvalidInputError(f"faults.{i}.{name} {idx} does not exist; valid 0-{limit - 1}", field=f"faults.{i}.{name}")
        tl.call_at(f.at, functools.partial(_scripted, fab, f))
    free = [c for c in range(fab.n_chips) if c not in set(fab.spares)]
    for i, j in enumerate(sc.jobs):
        if isinstance(j.chips, int):
            if j.chips > len(free):
                raise InvalidInputError(f"jobs.{i}.chips asks for {j.chips} chips, {len(free)} are free", field=f"jobs.{i}.chips")
            chips, free = tuple(free[: j.chips]), free[j.chips :]
        else:
            chips = tuple(j.chips)
            for c in chips:
                fab.topology.check_chip(c)
        opts: dict[str, Any] = {} if j.tokens_per_step is None else {"tokens_per_step": j.tokens_per_step}
        spec = WorkerGroupSpec(j.id, chips, j.model, j.steps, j.checkpoint_interval, options=opts)
        tl.call_at(j.start_at, functools.partial(fab.launch, spec))
    _standalone_recovery(tl, fab)
    return tl, fab


def _scripted(fab: SimFabric, f: ScriptedFault) -> None:
    from podfleet.errors import ConflictError

    try:
        fab.inject_fault(f.kind, f.chip, f.link, precursor=f.precursor, lead_s=f.lead)
    except ConflictError as exc:  # e.g. the chip already failed: record, go on
        assert fab.tl is not None
        fab.tl.emit("fault-skipped", fault=f.kind, reason=exc.message)


def _standalone_recovery(tl: Timeline, fab: SimFabric) -> None:
    """Without a control plane: move a failed rank to a free spare, else wait for the
    repair; then resume from the last checkpoint."""

    def act(job_id: str) -> None:
        run = fab.jobs.get(job_id)
        if run is None or run.state != RunState.PAUSED:
            return
        used = set(fab.busy_chips())
        for rank, c in enumerate(run.chips):
            if fab.chip_state(c) not in (ChipState.HEALTHY, ChipState.DEGRADED):
                spare = next((s for s in fab.spares if s not in used and fab.usable_mask()[s]), None)
                if spare is None:
                    return  # wait for the repair (a chip-healthy event brings us back)
                fab.move_rank(job_id, rank, spare)
                used.add(spare)
        fab.resume(job_id, from_step=run.last_checkpoint)

    def on_event(ev: FabricEvent) -> None:
        if ev.kind == "job-paused" and ev.job_id:
            tl.call_at(0, functools.partial(act, ev.job_id))
        elif ev.kind == "chip-healthy":
            for jid, run in fab.jobs.items():
                if run.state == RunState.PAUSED:
                    tl.call_at(0, functools.partial(act, jid))

    fab.subscribe(on_event)


def run_scenario(sc: Scenario, *, events_path: str | Path | None = None, read_metrics: bool = False,
                 monitor: bool = False, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
    """Run ``sc`` on the twin alone and report. ``read_metrics`` adds a consumer that reads
    every chip and link metric at every telemetry sample; ``monitor`` runs the real
    ``HealthMonitor`` (telemetry history, scan, failure predictor) at every sample, as the
    server's health service does (benchmarks). ``progress(fraction)`` is called as virtual
    time advances (in 100 chunks; the event log does not depend on it)."""
    from dataclasses import replace

    from podfleet.health.monitor import HealthMonitor
    from podfleet.health.scan import HealthConfig

    t0 = time.perf_counter()
    tl, fab = build(sc)
    if read_metrics:
        tl.every(sc.telemetry_interval_s, lambda: (fab.chip_metrics(), fab.link_metrics()))
    mon = None
    if monitor:
        mon = HealthMonitor(sc.name, fab, tl, config=replace(HealthConfig(), interval_s=sc.telemetry_interval_s))
        mon.start()
    if progress is None:
        tl.run(sc.duration)
    else:
        for i in range(1, 101):
            tl.run(sc.duration * i / 100)
            progress(i / 100)
    wall = time.perf_counter() - t0
    if events_path is not None:
        tl.log.to_jsonl(events_path)
    return {
        **twin_figures(sc, fab, tl, wall),
        "jobs": [{k: v for k, v in r.summary().items() if k != "chips"} for r in fab.jobs.values()],
        **({"alerts": len(mon.book.all(sc.name)), "alarms": len(mon.alarms)} if mon is not None else {}),
    }


def twin_figures(sc: Scenario, fab: SimFabric, tl: Timeline, wall: float) -> dict[str, Any]:
    """What every scenario report says of the run and the twin (bare or rehearsed)."""
    lost = fab.chip_hours_lost()
    total = fab.n_chips * sc.duration / 3600.0
    faults = {k.value: fab.faults_by_kind.get(k.value, 0) for k in FaultKind}
    return {
        "scenario": sc.name,
        "topology": sc.topology_name,
        "chips": fab.n_chips,
        "seed": sc.seed,
        "sim_s": sc.duration,
        "wall_s": round(wall, 3),
        "speedup_x": round(sc.duration / wall, 1) if wall > 0 else None,
        "events_processed": tl.events_processed,
        "log_records": len(tl.log),
        "telemetry_samples": fab.ticks,
        "faults_total": sum(faults.values()),
        "faults_by_kind": faults,
        "chip_hours_lost": round(lost, 4),
        "chip_hours_total": round(total, 3),
        "availability": round(1 - lost / total, 6) if total else None,
        "final_chip_states": fab.state_counts(),
        "links_not_up": int((fab.link_metrics()["state"] != 0).sum()),
    }


def benchmark_figures(read: dict[str, Any], bare: dict[str, Any]) -> dict[str, Any]:
    """The twin benchmarks' figures from two runs of one scenario: ``read`` with every
    sample read (as a health monitor would), ``bare`` with nobody reading."""
    keys = ("wall_s", "speedup_x", "sim_s", "chips", "telemetry_samples", "events_processed",
            "log_records", "faults_total", "alerts", "alarms")
    return {**{k: read[k] for k in keys if k in read}, "wall_s_unread": bare["wall_s"],
            "speedup_x_unread": bare["speedup_x"]}
