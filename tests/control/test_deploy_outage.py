"""A store outage during a cluster's deployment: its writes wait, the engine never stops."""

from __future__ import annotations

from podfleet.errors import UnavailableError
from podfleet.store.memory import MemoryStore
from podfleet.store.records import ClusterRecord
from tests.control.conftest import advance, make_plane


class Outage(MemoryStore):
    down = False

    def save_cluster(self, rec: ClusterRecord) -> None:
        if self.down:
            raise UnavailableError("the store is unavailable (test outage)")
        super().save_cluster(rec)


def test_a_deployment_waits_out_a_store_outage_and_finishes() -> None:
    store = Outage()
    plane = make_plane(store)
    view = plane.create_cluster({"name": "pod", "type": "trn2-ultraserver"}, actor="t")
    advance(plane, 0.5)  # deploying: its step writes come next
    store.down = True
    advance(plane, 60)  # without the retries the deployment's exception ends the timeline here
    assert plane.describe_cluster(view["id"])["state"] == "deploying"
    assert plane.tl.log.filter("deploy-write-retry")
    store.down = False
    advance(plane, 30)
    assert plane.describe_cluster(view["id"])["state"] == "active"
    assert store.get_cluster(view["id"]).state == "active"
