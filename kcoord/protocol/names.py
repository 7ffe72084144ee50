"""Actor names: the one contract between clients, actors and deployment.

All actors of a cluster live in one Ray namespace (``kcoord`` by default) under names
``"{cluster}/{kind}/{...}"``, so any driver, Ray task or Spark executor can find them with
``ray.get_actor(name, namespace=...)``.
"""

from __future__ import annotations

DEFAULT_NAMESPACE = "kcoord"


def controller(cluster: str) -> str:
    return f"{cluster}/controller"


def replica(cluster: str, topic: str, partition: int, broker: int) -> str:
    return f"{cluster}/replica/{topic}/{partition}/{broker}"


def group_coordinator(cluster: str, index: int) -> str:
    return f"{cluster}/group/{index}"


def prefix(cluster: str) -> str:
    return f"{cluster}/"
