"""Reservation commands: CreateReservation, DescribeReservation, ListReservations,
DeleteReservation (Slurm's ``scontrol create reservation``).

A reservation holds N chips of one cluster for a window, for one queue's jobs (or for
nobody). Its chips are chosen when it is made and persisted with it (``ReservationRecord``;
the window in unix seconds), and handed to the cluster's scheduler in timeline time
(``scheduler.reservations``), which keeps other work off them: before the start only a
job whose time limit ends by then, in the window only the reservation's queue. Like every
command: validated and persisted with its audit record in one transaction, applied in
memory only after the commit.
"""

from __future__ import annotations

import re

from podfleet.control.aftercommit import mutate_then_apply
from podfleet.control.ids import new_id
from podfleet.control.logbuf import rfc3339
from podfleet.control.namedrecords import NamedCommands
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import ConflictError, InfeasibleError, InvalidInputError, NotFoundError
from podfleet.scheduler.reservations import Reservation
from podfleet.store.records import ReservationRecord
from podfleet.timespec import parse_duration, parse_time
from podfleet.wire import JsonObject

_Held = tuple[ClusterRuntime, ReservationRecord]  # a reservation made or deleted, on its cluster

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
PAST_SLACK_S = 60.0  # a start this close behind now (typed a minute ago) is "now"


class ReservationCommands(NamedCommands[ReservationRecord]):
    # --- lifecycle (``NamedCommands.install``) ----------------------------------------------
    def _persisted(self, rt: ClusterRuntime) -> list[ReservationRecord]:
        return self.plane.store.list_reservations(rt.id)

    def _give(self, rt: ClusterRuntime, rec: ReservationRecord) -> None:
        rt.scheduler.set_reservation(self._reservation(rec))

    def _reservation(self, rec: ReservationRecord) -> Reservation:
        s = rec.spec
        at = self.plane.timeline_at
        return Reservation(rec.name, tuple(int(c) for c in s["chip_ids"]), at(float(s["start_at"])),
                           at(float(s["end_at"])), s.get("queue"))

    # --- commands (engine thread) --------------------------------------------------------
    def create(self, cluster_ref: str, body: JsonObject, *, actor: str = "system") -> JsonObject:
        plane = self.plane

        def do() -> tuple[JsonObject, str, _Held]:
            rt = plane.resolve(cluster_ref)
            rec = self._validated(rt, body)
            plane.store.save_reservation(rec)
            return self._view(rt, rec), rec.id, (rt, rec)

        def hold(made: _Held) -> JsonObject:
            rt, rec = made
            rt.scheduler.set_reservation(self._reservation(rec))
            self._records[(rt.id, rec.name)] = rec
            plane.jobs.schedule(rt)
            return self._view(rt, rec)

        return mutate_then_apply(plane, "CreateReservation", actor, f"{cluster_ref}/{body.get('name', '')}", do,
                                 hold, body=body)

    def delete(self, cluster_ref: str, name: str, *, actor: str = "system") -> JsonObject:
        plane = self.plane

        def do() -> tuple[JsonObject, str, _Held]:
            rt = plane.resolve(cluster_ref)
            rec = self._record(rt, name)
            plane.store.delete_reservation(rec.id)
            return {**self._view(rt, rec), "state": "deleted"}, rec.id, (rt, rec)

        def release(deleted: _Held) -> None:
            rt, rec = deleted
            rt.scheduler.remove_reservation(rec.name)
            self._records.pop((rt.id, rec.name), None)
            plane.jobs.schedule(rt)  # its chips are free to anyone again

        return mutate_then_apply(plane, "DeleteReservation", actor, f"{cluster_ref}/{name}", do, release,
                                 body={"name": name})

    # --- reads ----------------------------------------------------------------------------
    def describe(self, cluster_ref: str, name: str) -> JsonObject:
        rt = self.plane.resolve(cluster_ref)
        return self._view(rt, self._record(rt, name))

    def list_all(self, cluster_ref: str) -> list[JsonObject]:
        rt = self.plane.resolve(cluster_ref)
        recs = sorted((r for (cid, _), r in self._records.items() if cid == rt.id), key=lambda r: r.name)
        return [self._view(rt, r) for r in recs]

    # --- helpers ------------------------------------------------------------------------
    def _record(self, rt: ClusterRuntime, name: str) -> ReservationRecord:
        rec = self._records.get((rt.id, name))
        if rec is None:
            names = self._named(rt)
            raise NotFoundError(f"reservation {name!r} not found on cluster {rt.rec.name} (reservations: "
                                f"{', '.join(names) or 'none'})", field="reservation")
        return rec

    def _validated(self, rt: ClusterRuntime, body: JsonObject) -> ReservationRecord:
        """The new reservation's record, or the one-line error naming the field at fault."""
        now = self.plane.now()
        rid = new_id("rsv")
        name = body.get("name") or rid
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidInputError(f"name {name!r} must be 1-63 chars of a-z, 0-9 and '-'", field="name")
        if (rt.id, name) in self._records:
            raise ConflictError(f"reservation {name!r} already exists on cluster {rt.rec.name}", field="name")
        chips = body.get("chips")
        if not isinstance(chips, int) or isinstance(chips, bool) or chips < 1:
            raise InvalidInputError(f"chips must be a positive integer, got {chips!r}", field="chips")
        capacity = rt.topology.n_chips - len(rt.spares)
        if chips > capacity:
            raise InfeasibleError(f"chips {chips} exceeds the {capacity} chips cluster {rt.rec.name} can place "
                                  f"({rt.topology.n_chips} chips - {len(rt.spares)} spares)", field="chips")
        start_text = body.get("start", "now")
        if not isinstance(start_text, str):
            raise InvalidInputError(f"start must be an RFC 3339 time, now or now+1h, got {start_text!r}",
                                    field="start")
        start = parse_time(start_text, now, "start")
        if start < now - PAST_SLACK_S:
            raise InfeasibleError(f"start {rfc3339(start)} is in the past (now is {rfc3339(now)})", field="start")
        start = max(start, now)
        duration = body.get("duration")
        if duration is None:
            raise InvalidInputError("duration is required (seconds, 2h, 30m, 1d or HH:MM:SS)", field="duration")
        secs = parse_duration(duration, "duration")
        queue = body.get("queue")
        if queue is not None:
            known = sorted(rt.scheduler.queues.specs)
            if queue not in known:
                raise NotFoundError(f"queue {queue!r} not found on cluster {rt.rec.name} (queues: "
                                    f"{', '.join(known)})", field="queue")
        at = self.plane.timeline_at
        try:
            picked = rt.scheduler.choose_reservation_chips(chips, start_s=at(start), end_s=at(start + secs))
        except ValueError as exc:
            raise ConflictError(f"chips: {exc} on cluster {rt.rec.name} in that window", field="chips") from None
        spec: JsonObject = {"chips": chips, "chip_ids": list(picked), "start_at": start, "end_at": start + secs,
                            "queue": queue}
        return ReservationRecord(rid, rt.id, name, spec, now)

    def _view(self, rt: ClusterRuntime, rec: ReservationRecord) -> JsonObject:
        s = rec.spec
        start, end = float(s["start_at"]), float(s["end_at"])
        now = self.plane.now()
        state = "pending" if now < start else ("active" if now < end else "ended")
        # Jobs holding reserved chips now: its queue's, or ones that end before its start.
        holders = sorted({rt.owners[c] for c in s["chip_ids"] if c in rt.owners})
        return {"id": rec.id, "name": rec.name, "cluster_id": rt.id, "cluster": rt.rec.name,
                "chips": int(s["chips"]), "chip_ids": list(s["chip_ids"]), "queue": s.get("queue"),
                "start": rfc3339(start), "end": rfc3339(end), "duration_s": end - start, "state": state,
                "created_at": rfc3339(rec.created_at), "jobs": holders}
