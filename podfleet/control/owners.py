"""Which job holds which chip: one map per cluster, and the only place that writes it.

The job manager assigns a job's chips at launch and releases them when it ends; the
recovery orchestrator moves a rank's chip. Everyone else (placement, rendering, the
balancer, the scheduler's own arrays, which ``control.scheduling.sync`` derives from
this map when ``version`` moved) only reads.
"""

from __future__ import annotations

from collections.abc import Iterable

from podfleet.control.chipmap import ChipMap
from podfleet.errors import ConflictError


class ChipOwners(ChipMap[str]):
    # --- reads (``ChipMap`` is the Mapping) ----------------------------------------------------
    def job_count(self) -> int:
        """How many jobs hold chips (one C-level pass, not a Mapping walk)."""
        return len(set(self._by_chip.values()))

    def copy(self) -> dict[int, str]:
        """chip -> job as of now (a plain dict the caller may keep)."""
        return dict(self._by_chip)

    def chips_of(self, job_id: str) -> list[int]:
        return sorted(c for c, j in list(self._by_chip.items()) if j == job_id)

    def jobs(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for c, j in list(self._by_chip.items()):
            out.setdefault(j, []).append(c)
        return out

    # --- writes ---------------------------------------------------------------------------
    def assign(self, job_id: str, chips: Iterable[int]) -> None:
        """Give ``chips`` to ``job_id`` (idempotent); a chip another job holds is a conflict."""
        chips = [int(c) for c in chips]
        for c in chips:
            other = self._by_chip.get(c)
            if other not in (None, job_id):
                raise ConflictError(f"chip {c} already belongs to job {other}", field="chips")
        for c in chips:
            self._by_chip[c] = job_id
        self.version += 1

    def release(self, job_id: str) -> list[int]:
        """Free every chip ``job_id`` holds; returns them."""
        gone = [c for c, j in self._by_chip.items() if j == job_id]
        for c in gone:
            del self._by_chip[c]
        if gone:
            self.version += 1
        return gone

    def release_chip(self, chip: int, job_id: str | None = None) -> str | None:
        """Free one chip (only if ``job_id`` holds it, when given); returns its former holder."""
        holder = self._by_chip.get(chip)
        if holder is None or (job_id is not None and holder != job_id):
            return None
        del self._by_chip[chip]
        self.version += 1
        return holder

    def replace(self, job_id: str, chips: Iterable[int]) -> None:
        """The job now holds exactly ``chips`` (a recovered gang on its new chips)."""
        self.release(job_id)
        self.assign(job_id, chips)

    def move(self, job_id: str, old: int, new: int) -> None:
        """One rank of ``job_id`` moved from chip ``old`` to chip ``new``."""
        self.release_chip(old, job_id)
        self.assign(job_id, [new])
