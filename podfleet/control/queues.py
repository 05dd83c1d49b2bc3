"""Queue commands: CreateQueue, DescribeQueue, ListQueues, UpdateQueue, DeleteQueue.

A queue belongs to one cluster; its definition is persisted (``QueueRecord``) and given
to the cluster's scheduler (``scheduler.queues``), which admits jobs by it. Like every
command: validated and persisted in one store transaction with its audit record, and
only after the commit applied in memory and followed by a scheduling pass (a larger
quota may admit waiting jobs). Every cluster has a ``default`` queue, unlimited until an
operator defines it; deleting a defined ``default`` makes it unlimited again.
"""

from __future__ import annotations

from podfleet.control.aftercommit import mutate_then_apply
from podfleet.control.ids import new_id
from podfleet.control.namedrecords import NamedCommands
from podfleet.control.runtime import ClusterRuntime
from podfleet.errors import ConflictError, InfeasibleError, NotFoundError
from podfleet.scheduler.queues import DEFAULT_QUEUE, QueueSpec
from podfleet.store.records import QueueRecord
from podfleet.wire import JsonObject

_Change = tuple[ClusterRuntime, QueueRecord, QueueSpec]  # what a create or update writes


class QueueCommands(NamedCommands[QueueRecord]):
    # --- lifecycle (``NamedCommands.install``) ----------------------------------------------
    def _persisted(self, rt: ClusterRuntime) -> list[QueueRecord]:
        return self.plane.store.list_queues(rt.id)

    def _give(self, rt: ClusterRuntime, rec: QueueRecord) -> None:
        rt.scheduler.set_queue(QueueSpec.from_dict(rec.spec))

    def names(self, rt: ClusterRuntime) -> list[str]:
        return sorted(rt.scheduler.queues.specs)

    # --- commands (engine thread) --------------------------------------------------------
    def create(self, cluster_ref: str, body: JsonObject, *, actor: str = "system") -> JsonObject:
        plane = self.plane

        def do() -> tuple[JsonObject, str, _Change]:
            rt = plane.resolve(cluster_ref)
            spec = QueueSpec.from_dict(body)
            if (rt.id, spec.name) in self._records:
                raise ConflictError(f"queue {spec.name!r} already exists on cluster {rt.rec.name}", field="name")
            self._check(rt, spec)
            now = plane.now()
            rec = QueueRecord(new_id("q"), rt.id, spec.name, spec.to_dict(), now, now)
            plane.store.save_queue(rec)
            return self._view(rt, spec.name, rec), rec.id, (rt, rec, spec)

        return mutate_then_apply(plane, "CreateQueue", actor, f"{cluster_ref}/{body.get('name', '')}", do,
                                 self._apply, body=body)

    def update(self, cluster_ref: str, name: str, changes: JsonObject, *, actor: str = "system") -> JsonObject:
        plane = self.plane

        def do() -> tuple[JsonObject, str, _Change]:
            rt = plane.resolve(cluster_ref)
            old = self._record(rt, name)
            spec = QueueSpec.from_dict(old.spec).updated(changes)
            self._check(rt, spec)
            rec = QueueRecord(old.id, rt.id, spec.name, spec.to_dict(), old.created_at, plane.now())
            plane.store.save_queue(rec)
            return self._view(rt, name, rec), rec.id, (rt, rec, spec)

        return mutate_then_apply(plane, "UpdateQueue", actor, f"{cluster_ref}/{name}", do, self._apply,
                                 body={"name": name, **changes})

    def delete(self, cluster_ref: str, name: str, *, actor: str = "system") -> JsonObject:
        plane = self.plane

        def do() -> tuple[JsonObject, str, tuple[ClusterRuntime, QueueRecord]]:
            rt = plane.resolve(cluster_ref)
            rec = self._record(rt, name)
            rt.scheduler.remove_queue(name)  # ConflictError while jobs use it: nothing written yet
            # The scheduler forgot it already; the record goes in this transaction (on a
            # failed commit ``put_back`` gives the queue back).
            plane.store.delete_queue(rec.id)
            return {**rec.spec, "id": rec.id, "cluster_id": rt.id, "state": "deleted"}, rec.id, (rt, rec)

        def put_back(deleted: tuple[ClusterRuntime, QueueRecord]) -> None:
            rt, rec = deleted
            rt.scheduler.set_queue(QueueSpec.from_dict(rec.spec))

        def forget(deleted: tuple[ClusterRuntime, QueueRecord]) -> None:
            rt, rec = deleted
            self._records.pop((rt.id, rec.name), None)
            plane.jobs.schedule(rt)  # a deleted default queue is unlimited again

        return mutate_then_apply(plane, "DeleteQueue", actor, f"{cluster_ref}/{name}", do, forget,
                                 body={"name": name}, undo=put_back)

    # --- reads (engine thread: usage moves with every cycle) ------------------------------
    def describe(self, cluster_ref: str, name: str) -> JsonObject:
        rt = self.plane.resolve(cluster_ref)
        if rt.scheduler.queues.get(name) is None:
            raise NotFoundError(f"queue {name!r} not found on cluster {rt.rec.name} (queues: "
                                f"{', '.join(self.names(rt))})", field="queue")
        return self._view(rt, name, self._records.get((rt.id, name)))

    def list_all(self, cluster_ref: str | None = None) -> list[JsonObject]:
        rts = [self.plane.resolve(cluster_ref)] if cluster_ref else \
            [self.plane.clusters[c] for c in sorted(self.plane.clusters)]
        return [self._view(rt, n, self._records.get((rt.id, n))) for rt in rts for n in self.names(rt)]

    # --- helpers ------------------------------------------------------------------------
    def _record(self, rt: ClusterRuntime, name: str) -> QueueRecord:
        rec = self._records.get((rt.id, name))
        if rec is None:
            implicit = " (the implicit default queue: create it to set its quota)" if name == DEFAULT_QUEUE else ""
            raise NotFoundError(f"queue {name!r} not found on cluster {rt.rec.name}{implicit}", field="queue")
        return rec

    @staticmethod
    def _check(rt: ClusterRuntime, spec: QueueSpec) -> None:
        capacity = rt.topology.n_chips - len(rt.spares)
        for fname in ("nominal", "borrowing_limit", "lending_limit"):
            v = getattr(spec, fname)
            if v is not None and v > capacity:
                raise InfeasibleError(f"{fname} {v} exceeds the {capacity} chips cluster {rt.rec.name} can place "
                                        f"({rt.topology.n_chips} chips - {len(rt.spares)} spares)", field=fname)

    def _apply(self, change: _Change) -> JsonObject:
        rt, rec, spec = change
        rt.scheduler.set_queue(spec)
        self._records[(rt.id, rec.name)] = rec
        self.plane.jobs.schedule(rt)
        return self._view(rt, spec.name, rec)

    @staticmethod
    def _view(rt: ClusterRuntime, name: str, rec: QueueRecord | None) -> JsonObject:
        sched = rt.scheduler
        book = sched.queues
        view = book.view(name) if book.get(name) is not None else {**(rec.spec if rec else {}), "used": 0,
                                                                   "borrowed": 0, "lent": 0, "capacity": None}
        return {**view, "id": rec.id if rec else None, "cluster_id": rt.id, "cluster": rt.rec.name,
                "defined": rec is not None, "jobs": sched.queue_jobs(name),
                "created_at": rec.created_at if rec else None, "updated_at": rec.updated_at if rec else None}
