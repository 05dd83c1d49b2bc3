"""Which Ray node each chip is on, and whether that node is alive.

A chip is ``per_chip`` units of the fabric's resource on one node: chips are numbered
node by node (the head node first, then by IP and node id), as many per node as its
resource allows. A gang's bundles are pinned to their chips' nodes with the node-id
label (``ray.io/node-id``) Ray gives every node, so "rank 1 moves to chip 2" really moves
the rank to chip 2's node. Pure over ``ray.nodes()`` records: no Ray import here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NODE_ID_LABEL = "ray.io/node-id"
HEAD_RESOURCE = "node:__internal_head__"
STALE_AFTER_S = 30.0  # a view of the cluster older than this cannot vouch for a node


@dataclass
class RayNode:
    node_id: str
    ip: str
    head: bool
    capacity: int  # chips it holds
    alive: bool = True

    @property
    def short(self) -> str:
        return self.node_id[:12]


@dataclass(frozen=True)
class NodeChanges:
    """What a fresh view of the cluster changed: chip-holding nodes that died, and nodes
    with room for chips that joined (or came back)."""

    died: tuple[RayNode, ...] = ()
    joined: tuple[RayNode, ...] = ()


class NodeMap:
    """chip -> node, numbered from the cluster's nodes at the start; liveness refreshed by
    ``apply``. A chip whose node is gone keeps naming it (its check fails) until ``remap``
    moves it to a live node with room: a node that joins later, or one after a reconnect."""

    def __init__(self, records: Iterable[Mapping[str, Any]], resource: str, per_chip: float, n_chips: int) -> None:
        self.resource, self.per_chip = resource, per_chip
        self.nodes: dict[str, RayNode] = {}
        for rec in records:
            if rec.get("Alive", False):
                node = self._node(rec)
                self.nodes[node.node_id] = node
        order = sorted(self.nodes.values(), key=lambda n: (not n.head, n.ip, n.node_id))
        self.chip_node: list[str | None] = []
        for node in order:
            take = min(node.capacity, n_chips - len(self.chip_node))
            self.chip_node.extend([node.node_id] * take)
        # Chips the per-node split cannot hold (fractional leftovers): Ray places them freely.
        self.chip_node.extend([None] * (n_chips - len(self.chip_node)))
        self.updated_mono = time.monotonic()

    def _node(self, rec: Mapping[str, Any]) -> RayNode:
        res = rec.get("Resources") or {}
        cap = math.floor(float(res.get(self.resource, 0.0)) / self.per_chip + 1e-9)
        return RayNode(str(rec.get("NodeID", "")), str(rec.get("NodeManagerAddress", "")), HEAD_RESOURCE in res, cap)

    def update(self, records: Iterable[Mapping[str, Any]]) -> list[RayNode]:
        """Apply a fresh ``ray.nodes()``; returns the chip-holding nodes that died since."""
        return list(self.apply(records).died)

    def apply(self, records: Iterable[Mapping[str, Any]]) -> NodeChanges:
        """Apply a fresh ``ray.nodes()``: liveness of the known nodes, and new nodes learnt
        (a raylet started after the fabric, a replacement for a lost one)."""
        recs = list(records)
        alive = {str(r.get("NodeID", "")) for r in recs if r.get("Alive", False)}
        died, joined = [], []
        for node in self.nodes.values():
            now_alive = node.node_id in alive
            if node.alive and not now_alive and node.node_id in self.chip_node:
                died.append(node)
            if now_alive and not node.alive and node.capacity:
                joined.append(node)
            node.alive = now_alive
        for rec in recs:
            node_id = str(rec.get("NodeID", ""))
            if node_id in alive and node_id not in self.nodes:
                node = self._node(rec)
                self.nodes[node_id] = node
                if node.capacity:
                    joined.append(node)
        self.updated_mono = time.monotonic()
        return NodeChanges(tuple(died), tuple(joined))

    def room(self, node: RayNode) -> int:
        """Chips the node could still hold."""
        return node.capacity - self.chip_node.count(node.node_id)

    def remap(self, chip: int) -> RayNode | None:
        """Put a chip whose node is gone on a live node with room (the head first, then by
        IP); the node it is on now, or None when no live node has room. A chip on a live
        node (or on none: Ray places it) stays."""
        current = self.node_of(chip)
        if current is None and self.chip_node[chip] is None:
            return None
        if current is not None and current.alive:
            return current
        order = sorted(self.nodes.values(), key=lambda n: (not n.head, n.ip, n.node_id))
        for node in order:
            if node.alive and self.room(node) > 0:
                self.chip_node[chip] = node.node_id
                return node
        return None

    def lost(self, chip: int) -> bool:
        """The chip names a node that is not alive (it needs ``remap``)."""
        node = self.node_of(chip)
        return node is not None and not node.alive

    def node_of(self, chip: int) -> RayNode | None:
        node_id = self.chip_node[chip]
        return self.nodes.get(node_id) if node_id is not None else None

    def chips_on(self, node_id: str) -> list[int]:
        return [c for c, n in enumerate(self.chip_node) if n == node_id]

    def host(self, chip: int) -> str:
        node = self.node_of(chip)
        return node.ip if node is not None else ""

    def selectors(self, chips: Sequence[int]) -> list[dict[str, str]]:
        """One label selector per bundle: the chip's node (empty where it has none)."""
        out = []
        for c in chips:
            node_id = self.chip_node[c]
            out.append({NODE_ID_LABEL: node_id} if node_id is not None else {})
        return out

    def check(self, chip: int) -> str | None:
        """None when the chip's node is alive in a fresh view of the cluster."""
        node = self.node_of(chip)
        if node is None:
            return None
        age = time.monotonic() - self.updated_mono
        if age > STALE_AFTER_S:
            return f"no fresh view of the Ray cluster (last {age:.0f} s ago)"
        if not node.alive:
            return f"its Ray node {node.short} ({node.ip}) is not alive"
        return None

    def describe(self) -> list[dict[str, Any]]:
        order = sorted(self.nodes.values(), key=lambda n: (not n.head, n.ip, n.node_id))
        return [{"node_id": n.node_id, "ip": n.ip, "head": n.head, "alive": n.alive,
                 "chips": self.chips_on(n.node_id)} for n in order if n.capacity]
