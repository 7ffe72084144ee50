"""The coordinators' internal topics, ``__consumer_offsets`` and ``__transaction_state``:
created at deploy with one partition per coordinator, compacted and replicated alike."""

from __future__ import annotations

import logging
from typing import Any

from kcoord.client.cluster import ClusterClient
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.replication.topic_plan import default_replication_factor

E = ErrorCode
logger = logging.getLogger("kcoord.cluster")


def internal_topic_config(brokers: int, segment_bytes: int) -> tuple[int, dict[str, Any]]:
    """Replication factor and config of a coordinator's topic for a cluster of ``brokers``.

    Compacted, as in Kafka: every record has a key (a group's metadata, a group's offset of
    one partition, a transactional id's state) and removals write tombstones, so the cleaner
    keeps only the live state and a coordinator's load stays bounded by it rather than by
    the history. Time/size retention stays off: deleting old segments would delete live
    state."""
    rf = default_replication_factor(brokers)
    return rf, {
        "cleanup.policy": "compact",
        "segment.bytes": segment_bytes,
        "min.insync.replicas": min(2, rf),
        "retention.ms": -1,
        "retention.bytes": -1,
    }


def _warn_if_not_compacted(client: ClusterClient, topic: str) -> None:
    """Clusters deployed before the topic was compacted keep their topic's config (a deploy
    does not rewrite it): say so, since their coordinators replay the whole history on every
    start until the topic's cleanup.policy is set to compact."""
    policy = str(client.topic(topic).config.get("cleanup.policy", "delete"))
    if "compact" not in policy:
        logger.warning(
            "%s of cluster %s has cleanup.policy=%s (created by an older kcoord): it is not compacted, "
            "so its coordinators replay its whole history on start; set cleanup.policy=compact on it",
            topic, client.name, policy,
        )


def ensure_internal_topic(client: ClusterClient, topic: str, count: int, segment_bytes: int, what: str, timeout_s: float) -> None:
    """Create ``topic`` with ``count`` partitions if missing; an existing one must have
    ``count`` (ids are placed by hashing over it) and gets its leaders waited for."""
    from kcoord.client.admin import Admin

    admin = Admin(client)
    rf, config = internal_topic_config(len(client.brokers), segment_bytes)
    try:
        admin.create_topic(topic, partitions=count, replication_factor=rf, config=config, timeout_ms=int(timeout_s * 1000))
        return
    except KafkaError as exc:
        if exc.code != E.TOPIC_ALREADY_EXISTS:
            raise
    existing = len(client.topic(topic, refresh=True).partitions)
    if existing != count:
        raise KafkaError(
            E.INVALID_PARTITIONS,
            f"{topic} has {existing} partitions but {count} {what} were requested; the count cannot change once ids are placed",
        )
    admin.wait_for_leaders(topic, timeout_ms=int(timeout_s * 1000))
    _warn_if_not_compacted(client, topic)
