"""The Ray side of replica placement: which nodes a Ray cluster has, and the deploy-time
binding of brokers to them.

The policy itself (binding, re-binding on node loss, waiting for a node) is core logic in
:mod:`kcoord.replication.placement`, applied by the controller so the simulation covers it;
this module only asks Ray which nodes exist.
"""

from __future__ import annotations

import time

from kcoord.actors.runtime import ray_alive_nodes
from kcoord.replication.placement import initial_binding, order_nodes

# A resource every Ray head node advertises (Ray >= 2.x), used to tell the head apart.
HEAD_NODE_RESOURCE = "node:__internal_head__"


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
