"""Recoveries of process-fabric jobs, recorded like the twin's recovery journals.

Two sources: a gang the process driver relaunched after a rank was lost (``open`` at the
loss, ``relaunched`` when the new gang starts, ``trained`` at its first new step), and a
recovery the fabric made itself and measured (``fabric_recovered``, the local fabric's
``recovered`` event). Either way the record lands in the job's ``runtime.recoveries``
(saved with the job) and ``alerts recoveries`` lists it: path (``spare``, ``free-chip``,
``own-chip``), ``mechanism`` (``rank-move``: the other ranks kept running; ``relaunch``: the
gang restarted), moves, where the state came from, steps lost and the resume time.

Every record names its chip (``chip``, ``target: "chip:N"``) and carries its times as
RFC 3339 (``t_start``, ``t_end``, each step's ``t_start``) like every time the API shows;
``detected_t`` (unix seconds) and ``resume_s`` are the numbers to compute with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from podfleet.control.logbuf import rfc3339
from podfleet.wire import JsonObject

if TYPE_CHECKING:
    from podfleet.control.jobtable import Job, JobTable, RunCounts


def recovery_record(job_id: str, n: int, *, rank: object, cause: object, chip: object,
                    detected_t: float | None, last_step: int | None) -> JsonObject:
    """A process-fabric job's recovery, in the twin journal's shape (``detected_t``: unix seconds)."""
    at = rfc3339(detected_t) if detected_t is not None else None
    return {"id": f"rec-{job_id}-{n}", "kind": "worker-lost", "target": f"chip:{chip}", "job_id": job_id,
            "state": "running", "reason": f"rank {rank} lost ({cause})", "rank": rank, "chip": chip,
            "cause": cause, "t_start": at, "detected_t": detected_t, "t_end": None,
            "last_step": last_step, "restored_from": None, "path": None, "moves": {},
            "restored_step": None, "steps_lost": None, "resume_s": None,
            "steps": [{"name": "detect", "reason": f"rank {rank} lost ({cause})", "t_start": at}]}


class Relaunches:
    def __init__(self, table: JobTable, counts: Callable[[Job], RunCounts], now: Callable[[], float],
                 spares: Callable[[], tuple[int, ...]]) -> None:
        self.table, self.counts, self.now, self.spares = table, counts, now, spares
        self.open_records: dict[str, JsonObject] = {}  # job -> its recovery in flight

    def open(self, job: Job, rank: object, cause: str, chip: int | None) -> None:
        """A rank was lost and the gang will be relaunched."""
        self._close(job, "failed")  # a second loss before the first relaunch trained a step
        rec = recovery_record(job.id, len(self.counts(job).recoveries) + 1, rank=rank, cause=cause, chip=chip,
                              detected_t=self.now(), last_step=int(job.status.progress.step or 0))
        rec["chips_before"] = list(job.chips)
        self.open_records[job.id] = rec

    def relaunched(self, job: Job, chips: tuple[int, ...], start_step: int) -> None:
        """The new gang starts on ``chips`` from ``start_step`` (no-op without a loss)."""
        rec = self.open_records.get(job.id)
        if rec is None:
            return
        before = rec.pop("chips_before", None) or list(job.chips)
        rank = rec.get("rank")
        moves = {str(r): [a, b] for r, (a, b) in enumerate(zip(before, chips, strict=False)) if a != b}
        new = chips[rank] if isinstance(rank, int) and 0 <= rank < len(chips) else None
        if new is not None:
            path = "own-chip" if rec.get("chip") == new else "spare" if new in self.spares() else "free-chip"
        else:
            path = "spare" if any(b in self.spares() for _a, b in moves.values()) else "free-chip"
        source = "checkpoint" if start_step else "scratch"
        t = self.now()
        rec.update(path=path, mechanism="relaunch", moves=moves, restored_step=start_step, source=source,
                   restored_from=source,
                   relaunched_t=t, steps_lost=max(0, int(rec.get("last_step") or 0) - start_step))
        rec["steps"].append({"name": "relaunch", "reason": f"rank {rank} -> chip {new} ({path}); from {source} "
                                                           f"step {start_step}", "t_start": rfc3339(t)})

    def trained(self, job: Job, step: int) -> None:
        """A progress report: the first step past the restored one closes the recovery."""
        rec = self.open_records.get(job.id)
        if rec is None or "relaunched_t" not in rec or step <= int(rec["restored_step"]):
            return
        del self.open_records[job.id]
        now = self.now()
        rec.update(state="done", t_end=rfc3339(now), resume_s=now - float(rec["detected_t"]), first_step=step)
        rec["steps"].append({"name": "resume", "reason": f"step {step} trained", "t_start": rfc3339(now)})
        self.table.add_run_recovery(job, rec)
        self.table.log(job, f"recovered: rank {rec.get('rank')} via {rec.get('path')}, resumed from "
                            f"{rec.get('source')} step {rec.get('restored_step')} in {rec['resume_s']:.2f} s, "
                            f"{rec.get('steps_lost')} step(s) lost")
        self.table.save(job)

    def ended(self, job: Job) -> None:
        """The job ended before its relaunched gang trained a step."""
        self._close(job, "failed")

    def fabric_recovered(self, job: Job, d: Mapping[str, Any], chip: int | None) -> None:
        """The fabric recovered a rank itself and measured it (local: ``recovered``, whose
        event names the chip the rank was lost on). It ended now, ``resume_s`` after the
        fabric noticed the loss."""
        counts = self.counts(job)
        now = self.now()
        took = d.get("resume_s")
        detected = now - float(took) if isinstance(took, int | float) else None
        rec = recovery_record(job.id, len(counts.recoveries) + 1, rank=d.get("rank"), cause=d.get("cause"),
                              chip=chip, detected_t=detected, last_step=d.get("last_step"))
        rec.update({k: d.get(k) for k in ("source", "restored_step", "steps_lost", "resume_s", "moves", "path",
                                          "mechanism")})
        rec.update(state="done", restored_from=d.get("source"), t_end=rfc3339(now))
        self.table.add_run_recovery(job, rec)
        self.table.log(job, f"recovered: resumed from {d.get('source')} step {d.get('restored_step')} in "
                            f"{float(d.get('resume_s') or 0):.2f} s, {d.get('steps_lost')} step(s) lost")
        self.table.save(job)

    def forget(self, job_id: str | None) -> None:
        """A job that ended elsewhere (stopped, deleted): nothing more will come for it."""
        if job_id is not None:
            self.open_records.pop(job_id, None)

    def _close(self, job: Job, state: str) -> None:
        rec = self.open_records.pop(job.id, None)
        if rec is not None:
            rec.pop("chips_before", None)
            rec.update(state=state, t_end=rfc3339(self.now()))
            self.table.add_run_recovery(job, rec)
