"""Start and stop a cluster's Kafka listeners: one KafkaListener actor per alive Ray node."""

from __future__ import annotations

import logging
from typing import Any

from ..protocol import names
from . import routing

logger = logging.getLogger("kcoord.kafka")

DEFAULT_KAFKA_PORT = 9092


def listener_name(cluster: str, node_id: str) -> str:
    return f"{names.prefix(cluster)}kafka/{node_id}"


def start_listeners(
    cluster: str,
    namespace: str = names.DEFAULT_NAMESPACE,
    port: int = DEFAULT_KAFKA_PORT,
    host: str | None = None,
    *,
    local: bool = False,
    options: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> str:
    """One listener per alive node; returns the bootstrap servers string.

    ``local``: bind to loopback (an embedded local cluster). Otherwise each listener binds
    to its node's address; ``host`` overrides the advertised address (one node only, or a
    name that resolves to every node's own address)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .actor import KafkaListener

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if local:
        nodes = nodes[:1] if nodes else []
    handles = []
    for n in nodes:
        node_id = n["NodeID"]
        bind = "127.0.0.1" if local else n.get("NodeManagerAddress") or "0.0.0.0"
        name = listener_name(cluster, node_id)
        opts: dict[str, Any] = dict(
            name=name,
            namespace=namespace,
            num_cpus=0,
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=100_000,
            lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        )
        if not local:
            opts["get_if_exists"] = True
        handle = ray.remote(KafkaListener).options(**opts).remote(cluster, namespace, bind, port, host or bind, options)
        handles.append(handle)
    addresses = ray.get([h.start.remote() for h in handles], timeout=timeout_s)
    return ",".join(addresses)


def stop_listeners(cluster: str, namespace: str = names.DEFAULT_NAMESPACE) -> int:
    """Kill every listener of ``cluster`` recorded in the GCS; forget their addresses."""
    import ray

    killed = 0
    for node_id in routing.listener_nodes(cluster):
        try:
            ray.kill(ray.get_actor(listener_name(cluster, node_id), namespace=namespace), no_restart=True)
            killed += 1
        except ValueError:
            pass
    routing.forget_listeners(cluster)
    return killed


def listener_actor_names(cluster: str) -> list[str]:
    return [listener_name(cluster, node) for node in routing.listener_nodes(cluster)]


def bootstrap_servers(cluster: str) -> str:
    """``host:port[,host:port...]`` of the cluster's listeners ("" when none runs)."""
    return ",".join(sorted(routing.listener_addresses(cluster).values()))
