"""Actor names: the one contract between clients, actors and deployment.

All actors of a cluster live in one Ray namespace (``kcoord`` by default) under names
``"{cluster}/{kind}/{...}"``, so any driver, Ray task or Spark executor can find them with
``ray.get_actor(name, namespace=...)``.
"""

from __future__ import annotations

DEFAULT_NAMESPACE = "kcoord"

# Internal topics: written only by their coordinators, through InternalProduceRequest (a
# replica method the client API and the Kafka listener never call); a client's Produce to
# one is refused with INVALID_TOPIC_EXCEPTION, as Kafka refuses it.
OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


# Where transactional writes' drivers record their decisions (kcoord.txn_write).
TXN_WRITE_DECISIONS_TOPIC = "_kcoord-txn-writes"
# Topics whose records are found by hashing a key over the partition count (a group, a
# transactional id, a write's prefix): more partitions would hide what they hold, so they
# cannot grow.
FIXED_PARTITION_TOPICS = INTERNAL_TOPICS | {TXN_WRITE_DECISIONS_TOPIC}


def is_internal_topic(topic: str) -> bool:
    return topic in INTERNAL_TOPICS


def controller(cluster: str) -> str:
    return f"{cluster}/controller"


def replica(cluster: str, topic: str, partition: int, broker: int) -> str:
    return f"{cluster}/replica/{topic}/{partition}/{broker}"


def group_coordinator(cluster: str, index: int) -> str:
    return f"{cluster}/group/{index}"


def transaction_coordinator(cluster: str, index: int) -> str:
    """Transaction coordinator ``index``: the owner of partition ``index`` of
    ``__transaction_state`` (docs/transactions.md)."""
    return f"{cluster}/txn/{index}"


def prefix(cluster: str) -> str:
    return f"{cluster}/"
