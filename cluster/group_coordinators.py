"""A cluster's group coordinators: deploying them with their ``__consumer_offsets`` topic,
and changing their settings (Kafka's ``group.*``/``offsets.*`` broker configs) at runtime.

Overrides made with :func:`configure_group_coordinators` are kept in Ray's GCS key/value
store, so a coordinator that Ray restarts picks them up again."""

from __future__ import annotations

import logging
from typing import Any, Mapping

import ray

from kcoord.client.cluster import ClusterClient
from kcoord.group import GroupConfig
from kcoord.group.records import OFFSETS_SEGMENT_BYTES, OFFSETS_TOPIC
from kcoord.protocol import names
from kcoord.protocol.errors import ErrorCode

from kcoord.actors.group_config import CONFIG_KEY, stored_config
from kcoord.actors.group_coordinator import GroupCoordinatorActor

from .coordinator_actors import start_coordinators
from .internal_topics import ensure_internal_topic, internal_topic_config

E = ErrorCode
logger = logging.getLogger("kcoord.group")


def offsets_topic_config(brokers: int) -> tuple[int, dict[str, Any]]:
    """Replication factor and config of ``__consumer_offsets`` for a cluster of ``brokers``
    (compacted, no time/size retention: :func:`kcoord.cluster.internal_topics.internal_topic_config`)."""
    return internal_topic_config(brokers, OFFSETS_SEGMENT_BYTES)


def _ensure_offsets_topic(client: ClusterClient, count: int, timeout_s: float) -> None:
    ensure_internal_topic(client, OFFSETS_TOPIC, count, OFFSETS_SEGMENT_BYTES, "group coordinators", timeout_s)


RemoteGroupCoordinator = ray.remote(GroupCoordinatorActor)


def deploy_group_coordinators(
    client: ClusterClient,
    count: int,
    data_dir: str | None = None,
    timeout_s: float = 120.0,
    config: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Create ``__consumer_offsets`` (``count`` partitions) if missing and the ``count``
    coordinator actors (detached, restarted by Ray forever), and wait until each has loaded
    its partition. ``config``: Kafka-named group settings (``group.initial.rebalance.delay.ms``...).
    ``data_dir`` is accepted for symmetry with the replicas; coordinators keep no local files.
    Idempotent: existing coordinators are reused."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    _ensure_offsets_topic(client, count, timeout_s)
    return start_coordinators(
        client,
        count,
        names.group_coordinator,
        RemoteGroupCoordinator,
        lambda i: (client.name, i, count, client.namespace, dict(config or {})),
        timeout_s,
    )


def configure_group_coordinators(client: ClusterClient, properties: Mapping[str, Any], timeout_s: float = 60.0) -> dict[str, int]:
    """Change group settings of every coordinator of the cluster now and after restarts
    (merged into earlier overrides; kept in Ray's GCS KV store). Returns the effective
    config of coordinator 0. Unknown keys are ignored, bad values raise ValueError."""
    from kcoord.actors.gcs_store import GcsStore

    merged = {**stored_config(client.name), **{str(k): v for k, v in properties.items()}}
    GroupConfig.from_properties(merged)  # validate before storing
    GcsStore.for_cluster(client.name).put_json(CONFIG_KEY, merged)
    from kcoord.client.admin import Admin

    count = Admin(client).describe_cluster()["group_coordinators"]
    handles = [ray.get_actor(names.group_coordinator(client.name, i), namespace=client.namespace) for i in range(count)]
    results = ray.get([h.reconfigure.remote(merged) for h in handles], timeout=timeout_s)
    return results[0] if results else {}
