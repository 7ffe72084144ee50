"""Where replica actors run: binding broker ids to nodes, and re-binding on node loss.

A kcoord broker is a logical id. On a single-node Ray cluster brokers stay logical and the
replicas are placed wherever Ray likes. On a multi-node cluster each broker is bound to one
node, so the replicas of a partition (always on distinct brokers) run on distinct nodes and
a node failure costs each partition at most the replicas of the brokers it hosted.

The policy, which the controller core applies (so the simulation covers it):

* Replica actors of a bound broker are created with a *hard* node affinity and without Ray
  restarts. When their node dies they die with it (Ray would otherwise restart them on any
  node, silently putting two replicas of one partition on one machine), the controller
  fails them over like any dead replica, and its "ensure" timer asks to recreate them.
* The broker is then re-bound to another alive node, but only to one that hosts no broker
  sharing a partition with it; spare nodes (hosting no broker) are preferred, then the
  least loaded. If no such node exists the broker waits, its partitions run with the
  replicas they have left (under-replicated, still writable while the ISR is at least
  ``min.insync.replicas``), exactly like a dead Kafka broker.
* A broker is only re-bound to another machine once no partition depends on its disk:
  while it is still in an ISR (the last copy of acknowledged records: a partition whose
  ISR had only it, or an offline one) or an ELR, its replicas elsewhere would start empty
  and could be elected with nothing, so it waits for its own machine, as a Kafka broker's
  partitions wait for it. Ray never gives a node its id back: a machine that returns (a
  raylet restarted after a reboot or a crash) is a *new* node on the same host, with the
  same disk. So "its own machine" is any alive node on the host of the node it lost
  (Ray's ``NodeManagerAddress``); waiting for the lost node id itself would wait forever.
* Adding a node gives the waiting broker a home: it is re-bound there, its replicas are
  recreated, catch up from the leaders and rejoin the ISR, restoring full replication.
* A re-binding is persisted in the metadata store (an ordered Persist action of the
  controller, before the CreateReplica that uses it), so a restarted controller keeps it.

Everything here is pure: node ids in, node ids out; which nodes are alive is an input the
controller's driver supplies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

# Key of the broker -> node binding in the controller's metadata store.
PLACEMENT_KEY = "placement/brokers"


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


def encode_binding(binding: Mapping[int, str]) -> bytes:
    return json.dumps({str(b): n for b, n in sorted(binding.items())}).encode()


def decode_binding(raw: bytes) -> dict[int, str]:
    """Raises ValueError on bytes that are not a binding."""
    try:
        data = json.loads(raw)
        return {int(b): str(n) for b, n in data.items()}
    except (AttributeError, TypeError) as exc:
        raise ValueError(f"not a broker binding: {exc}") from None


@dataclass(frozen=True)
class Placement:
    """Where to create one replica actor: ``node`` None and ``wait`` False lets the
    scheduler place it (brokers are logical); ``wait`` True means its broker has no
    acceptable node now (do not create it yet)."""

    node: str | None
    wait: bool = False
    rebound_from: str | None = None


@dataclass
class BrokerBinding:
    """The controller core's broker -> node binding and what it knows of nodes."""

    binding: dict[int, str] = field(default_factory=dict)
    alive: set[str] | None = None  # None: not told yet (the driver supplies it)
    waiting: set[int] = field(default_factory=set)
    rebinds: int = 0
    # node -> host of every node the driver ever reported (dead ones included: the host of
    # a lost node is what tells its machine's return apart from another machine)
    hosts: dict[str, str] = field(default_factory=dict)

    @property
    def bound(self) -> bool:
        return bool(self.binding)

    def decide(self, broker: int, assignments: Iterable[Iterable[int]], movable: bool = True) -> Placement:
        """Where a replica of ``broker`` goes now; re-binds it (the caller persists
        :meth:`encode`) when its node is gone and another may take it. ``movable`` False:
        the broker's machine holds the only copy of something (it is still in an ISR or
        ELR), so it waits for a node on that machine's host -- replicas recreated on another
        machine start empty."""
        if not self.binding:
            return Placement(None)
        current = self.binding.get(broker)
        alive = self.alive
        if alive is None or current in alive:
            return Placement(current)  # nothing known to the contrary: keep the binding
        candidates = alive if movable else self.same_host(current, alive)
        node = choose_node(broker, self.binding, candidates, peers_of(assignments)) if candidates else None
        if node is None:
            self.waiting.add(broker)
            return Placement(None, wait=True)
        self.waiting.discard(broker)
        self.binding[broker] = node
        self.rebinds += 1
        return Placement(node, rebound_from=current)

    def same_host(self, node: str | None, alive: Iterable[str]) -> set[str]:
        """The alive nodes on ``node``'s host (none when its host was never reported)."""
        host = self.hosts.get(node) if node is not None else None
        if not host:
            return set()
        return {n for n in alive if self.hosts.get(n) == host}

    def encode(self) -> bytes:
        return encode_binding(self.binding)

    def describe(self) -> dict[str, Any]:
        alive = self.alive or set()
        return {
            "brokers": {b: {"node": n, "alive": n in alive} for b, n in sorted(self.binding.items())},
            "waiting": sorted(self.waiting),
            "rebinds": self.rebinds,
        }
