"""Where replica actors run: binding broker ids to Ray nodes, and re-binding on node loss.

A kcoord broker is a logical id. On a single-node Ray cluster brokers stay logical and the
replicas are placed wherever Ray likes. On a multi-node cluster each broker is bound to one
node, so the replicas of a partition (always on distinct brokers) run on distinct nodes and
a node failure costs each partition at most the replicas of the brokers it hosted.

What happens when a node dies (the policy this module implements for the controller):

* Replica actors of a bound broker are created with a *hard* node affinity and without Ray
  restarts. When their node dies they die with it (Ray would otherwise restart them on any
  node, silently putting two replicas of one partition on one machine), the controller
  fails them over like any dead replica, and its "ensure" timer asks to recreate them.
* The broker is then re-bound to another alive node, but only to one that hosts no broker
  sharing a partition with it; spare nodes (hosting no broker) are preferred, then the
  least loaded. If no such node exists the broker waits, its partitions run with the
  replicas they have left (under-replicated, still writable while the ISR is at least
  ``min.insync.replicas``), exactly like a dead Kafka broker.
* Adding a node gives the waiting broker a home: it is re-bound there, its replicas are
  recreated, catch up from the leaders and rejoin the ISR, restoring full replication.
* The binding is persisted in the controller's metadata store, so a restarted controller
  keeps the re-bound placement.

The policy functions are pure (node ids in, node ids out) so they are unit-tested without
Ray; :class:`ReplicaPlacement` is the controller's small stateful helper around them.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

logger = logging.getLogger("kcoord.placement")

# Key of the broker -> node binding in the controller's metadata store.
PLACEMENT_KEY = "placement/brokers"
# A resource every Ray head node advertises (Ray >= 2.x), used to tell the head apart.
HEAD_NODE_RESOURCE = "node:__internal_head__"
_NODES_TTL_S = 0.5


# ------------------------------------------------------------------------------------------
# pure policy
# ------------------------------------------------------------------------------------------
def order_nodes(nodes: Iterable[str], head: str | None = None) -> list[str]:
    """Nodes in binding order: workers first (sorted by id), the head last, so that with
    more nodes than brokers the head (which also runs the GCS and the controller) is the
    spare one."""
    unique = sorted(set(nodes))
    workers = [n for n in unique if n != head]
    return workers + ([head] if head in unique else [])


def initial_binding(brokers: Iterable[int], nodes: list[str]) -> dict[int, str]:
    """Bind broker ids to nodes (already in :func:`order_nodes` order).

    With one node (or none) brokers stay logical: ``{}``. With at least as many nodes as
    brokers every broker gets its own node. With fewer, brokers are dealt round-robin; the
    replicas of a partition (consecutive broker ids) then still land on distinct nodes as
    long as the replication factor is at most the node count and the node count divides the
    broker count."""
    ids = sorted(brokers)
    if len(nodes) < 2:
        return {}
    return {b: nodes[i % len(nodes)] for i, b in enumerate(ids)}


def peers_of(assignments: Iterable[Iterable[int]]) -> dict[int, set[int]]:
    """{broker: the other brokers it shares at least one partition with}."""
    peers: dict[int, set[int]] = {}
    for replicas in assignments:
        rs = list(replicas)
        for b in rs:
            peers.setdefault(b, set()).update(r for r in rs if r != b)
    return peers


def choose_node(broker: int, binding: Mapping[int, str], alive: Iterable[str], peers: Mapping[int, set[int]]) -> str | None:
    """The node ``broker`` should run on now, or None when it has to wait for one.

    Its bound node while that is alive. Otherwise an alive node that hosts no broker sharing
    a partition with it, preferring nodes with the fewest bound brokers (spare nodes first),
    ties broken by node id so every controller incarnation decides the same way."""
    alive_set = set(alive)
    current = binding.get(broker)
    if current in alive_set:
        return current
    hosted: dict[str, set[int]] = {n: set() for n in alive_set}
    for b, node in binding.items():
        if b != broker and node in hosted:
            hosted[node].add(b)
    mine = peers.get(broker, set())
    candidates = [n for n, bs in hosted.items() if not (bs & mine)]
    if not candidates:
        return None
    return min(candidates, key=lambda n: (len(hosted[n]), n))


def colocated_partitions(
    assignments: Mapping[tuple[str, int], Iterable[int]], binding: Mapping[int, str]
) -> list[tuple[str, int]]:
    """Partitions with two replicas bound to one node (what the policy tries to avoid)."""
    out = []
    for key, replicas in sorted(assignments.items()):
        nodes = [binding[b] for b in replicas if b in binding]
        if len(nodes) != len(set(nodes)):
            out.append(key)
    return out


# ------------------------------------------------------------------------------------------
# the controller's helper
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    """Where to create one replica actor.

    ``node`` None and ``wait`` False: no binding (single node), let Ray place it.
    ``wait`` True: its broker has no acceptable node now; do not create it yet."""

    node: str | None
    wait: bool = False
    rebound_from: str | None = None


class ReplicaPlacement:
    """The controller's broker -> node binding: answers "where does this replica go",
    re-binds brokers whose node died (see the module docstring) and persists changes
    through ``persist(key, value)`` before any actor is created on the new node."""

    def __init__(
        self,
        binding: Mapping[int, str] | None,
        persist: Callable[[str, bytes], None],
        alive_nodes: Callable[[], list[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.binding: dict[int, str] = {int(b): str(n) for b, n in (binding or {}).items()}
        self._persist = persist
        self._alive_nodes = alive_nodes or ray_alive_nodes
        self._clock = clock
        self._alive_cache: tuple[float, set[str]] = (-1e9, set())
        self._waiting: set[int] = set()
        self.rebinds = 0

    @property
    def bound(self) -> bool:
        return bool(self.binding)

    def load(self, stored: Mapping[str, bytes]) -> None:
        """Prefer a binding persisted by an earlier controller incarnation (it may hold
        re-bindings the deploy-time one does not)."""
        raw = stored.get(PLACEMENT_KEY)
        if raw:
            try:
                self.binding = {int(b): str(n) for b, n in json.loads(raw).items()}
            except (ValueError, AttributeError):
                logger.error("ignoring an unreadable %s entry in the metadata store", PLACEMENT_KEY)

    def encode(self) -> bytes:
        return json.dumps({str(b): n for b, n in sorted(self.binding.items())}).encode()

    def alive(self) -> set[str]:
        at, nodes = self._alive_cache
        now = self._clock()
        if now - at > _NODES_TTL_S:
            nodes = set(self._alive_nodes())
            self._alive_cache = (now, nodes)
        return nodes

    def decide(self, broker: int, assignments: Callable[[], Iterable[Iterable[int]]]) -> Decision:
        """Where a replica of ``broker`` goes now. ``assignments`` lists every partition's
        replica set (only evaluated when a re-binding is needed)."""
        if not self.binding:
            return Decision(None)
        alive = self.alive()
        current = self.binding.get(broker)
        if current in alive:
            return Decision(current)
        node = choose_node(broker, self.binding, alive, peers_of(assignments()))
        if node is None:
            if broker not in self._waiting:
                self._waiting.add(broker)
                logger.warning(
                    "broker %d: its node %s is gone and no alive node can take it without sharing a partition "
                    "with another of its replicas; its replicas stay down until a node is added",
                    broker,
                    current,
                )
            return Decision(None, wait=True)
        self._waiting.discard(broker)
        self.binding[broker] = node
        self.rebinds += 1
        self._persist(PLACEMENT_KEY, self.encode())
        logger.warning("broker %d re-bound from node %s (gone) to node %s", broker, current, node)
        return Decision(node, rebound_from=current)

    def describe(self) -> dict[str, Any]:
        alive = self.alive() if self.binding else set()
        return {
            "brokers": {b: {"node": n, "alive": n in alive} for b, n in sorted(self.binding.items())},
            "waiting": sorted(self._waiting),
            "rebinds": self.rebinds,
        }


def ray_alive_nodes() -> list[str]:
    """Ids of the alive nodes of the connected Ray cluster."""
    import ray

    return [n["NodeID"] for n in ray.nodes() if n.get("Alive")]


def ray_head_node() -> str | None:
    import ray

    for n in ray.nodes():
        if n.get("Alive") and HEAD_NODE_RESOURCE in (n.get("Resources") or {}):
            return n["NodeID"]
    return None


def broker_placement(brokers: int) -> dict[int, str]:
    """The deploy-time binding of brokers ``0..brokers-1`` on the connected Ray cluster
    (``{}`` on a single node: brokers are logical there)."""
    return initial_binding(range(brokers), order_nodes(ray_alive_nodes(), ray_head_node()))


def wait_for_nodes(count: int, timeout_s: float, poll_s: float = 1.0) -> int:
    """Block until the Ray cluster has ``count`` alive nodes (the binding is made once, at
    deploy time, from the nodes alive then). Returns the number of alive nodes; raises
    TimeoutError if ``count`` is not reached within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = len(ray_alive_nodes())
        if alive >= count:
            return alive
        if time.monotonic() >= deadline:
            raise TimeoutError(f"only {alive} of the {count} Ray nodes asked for with --min-nodes joined within {timeout_s:.0f} s")
        time.sleep(poll_s)
