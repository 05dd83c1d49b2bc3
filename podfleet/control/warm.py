"""What a follower keeps ready, so that its takeover's reload does not start from nothing.

A follower (several servers on one PostgreSQL store) has its plane built but not running:
until it wins the lease it must not write, and a reload writes (jobs that cannot be
re-attached move to RECOVERING). What it can do without writing is the work of the reload
that depends only on what the store holds and does not change:

* every job's spec, parsed, with its rendered view (a spec never changes after submit):
  ``Warmth.follow`` scans the job ids and reads and parses the specs of jobs it has not
  seen; the takeover's reload (``JobManager.restore_all``) takes a parsed spec whose
  stored JSON is still the one read, and parses the rest;
* each cluster's scheduler indexes (blocks, ring walks: cached per topology for the
  process's life), built once for every cluster it has not seen.

Parsing and rendering 800 specs and building one pod's block index were about half of a
new leader's reload once its store reads were batched. ``follow`` runs on the follower's
own thread (``api.server``), never on the engine; ``stop`` ends it before the reload.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from podfleet.control.specs import ClusterSpec, JobSpec
from podfleet.errors import PodfleetError
from podfleet.scheduler.state import SchedulerView
from podfleet.store.protocol import StoreProtocol

log = logging.getLogger("podfleet.control")
# Specs read per query and parsed per lock hold: a round gives way to a stop between batches.
BATCH = 200


@dataclass
class WarmStats:
    """What the last reload took from the follower's work (shown in the takeover's log)."""

    specs_warm: int = 0
    specs_parsed: int = 0


@dataclass
class Warmth:
    store: StoreProtocol
    specs: dict[str, tuple[dict[str, Any], JobSpec]] = field(default_factory=dict)
    clusters: set[str] = field(default_factory=set)
    stats: WarmStats = field(default_factory=WarmStats)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False)

    def follow(self) -> int:
        """One round: parse the specs of jobs not seen yet and build the indexes of clusters
        not seen yet. Returns how many jobs were new."""
        new = [j for j in self.store.job_ids() if j not in self.specs]
        for lo in range(0, len(new), BATCH):
            if self._stopped.is_set():
                break
            parsed = {}
            for job_id, raw in self.store.job_specs(new[lo:lo + BATCH]).items():
                spec = JobSpec.from_dict(raw)
                _ = spec.view  # rendered now: the reload's job views read it
                parsed[job_id] = (raw, spec)
            with self._lock:
                self.specs.update(parsed)
        self._warm_clusters()
        return len(new)

    def _warm_clusters(self) -> None:
        after = None
        while not self._stopped.is_set():
            page = self.store.list_clusters(after=after, limit=100)
            if not page:
                return
            after = page[-1].id
            for rec in page:
                if rec.id in self.clusters:
                    continue
                self.clusters.add(rec.id)
                try:
                    SchedulerView(ClusterSpec.parse(rec.spec).topology())
                except PodfleetError as exc:  # the reload says what is wrong with it
                    log.debug("cluster %s not warmed: %s", rec.id, exc.message)

    def spec_for(self, job_id: str, raw: dict[str, Any]) -> JobSpec | None:
        """The parsed spec of ``job_id`` if the follower read this same stored spec, else
        None (the reload parses it)."""
        with self._lock:
            hit = self.specs.get(job_id)
        if hit is not None and hit[0] == raw:
            self.stats.specs_warm += 1
            return hit[1]
        self.stats.specs_parsed += 1
        return None

    def stop(self) -> None:
        """The follower became the leader: any round in progress ends at its next batch."""
        self._stopped.set()

    def run(self, interval_s: float) -> None:
        """The follower's thread: a round every ``interval_s`` until ``stop``."""
        while not self._stopped.is_set():
            try:
                self.follow()
            except Exception as exc:  # the store unreachable: the reload parses what is missing
                log.debug("follower warm-up round failed: %s", exc)
            if self._stopped.wait(interval_s):
                return
