"""Topic creation rules: name and size validation, config keys, replica assignment."""

from __future__ import annotations

import zlib
from typing import Collection, Mapping

from ..protocol.controller import CreateTopicsRequest
from ..protocol.errors import ErrorCode, KafkaError
from .config import BROKER_KEYS, REPLICATION_KEYS, ReplicationConfig
from ..protocol import names
from .metadata import PartitionState, TopicState, validate_topic_name

# Topic config keys the controller accepts (Kafka names); the log's keys are checked by
# the log's own parser when replicas open.
LOG_KEYS = frozenset(
    {
        "segment.bytes",
        "segment.ms",
        "retention.bytes",
        "retention.ms",
        "index.interval.bytes",
        "flush.messages",
        "flush.ms",
        "max.message.bytes",
        "cleanup.policy",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
    }
)
# Broker keys (log.retention.check.interval.ms, ...) are cluster-wide: deploy's broker_config.
TOPIC_CONFIG_KEYS = (REPLICATION_KEYS - BROKER_KEYS) | LOG_KEYS

#: Replicas per partition when a topic is created without a replication factor, as far as
#: there are brokers (Kafka's default.replication.factor is 1; replicated by default here).
DEFAULT_REPLICATION_FACTOR = 3
#: The most partitions a topic may have (creation and create_partitions).
MAX_PARTITIONS = 10_000


def default_replication_factor(brokers: int, preferred: int = DEFAULT_REPLICATION_FACTOR) -> int:
    """``min(preferred, brokers)`` (at least 1): the replication factor of a topic created
    without one -- by ``Admin.create_topic``, ``kcoord topics create``, ``__consumer_offsets``
    and the Kafka listener's CreateTopics and auto-creation."""
    return max(1, min(preferred, brokers))


def plan_topic(
    req: CreateTopicsRequest,
    brokers: list[int],
    existing: Collection[str],
    default_config: Mapping[str, str],
    now_ms: int,
) -> tuple[TopicState, list[PartitionState]]:
    """Validate a CreateTopics request and lay the topic out: replicas spread over the
    brokers (or the explicit assignment), the first replica of each partition leading at
    epoch 0 with every replica in the ISR. Raises KafkaError naming the problem."""
    validate_topic_name(req.name)
    if req.name.startswith("__") and not names.is_internal_topic(req.name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic names starting with '__' are reserved for internal topics: {req.name!r}")
    if req.name in existing:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {req.name!r} already exists")
    if req.partitions < 1:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"a topic needs at least 1 partition, got {req.partitions}")
    if req.partitions > MAX_PARTITIONS:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"{req.partitions} partitions is more than the limit of {MAX_PARTITIONS}")
    if req.replication_factor < 1:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, f"replication factor must be >= 1, got {req.replication_factor}")
    if req.replication_factor > len(brokers):
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {req.replication_factor} is larger than the {len(brokers)} available brokers",
        )
    config = validate_topic_config(req.config or {}, default_config, req.replication_factor)
    if req.assignment:
        assignment = check_assignment(req, brokers)
    else:
        assignment = spread_replicas(req.name, brokers, req.replication_factor, range(req.partitions))
    topic = TopicState(req.name, req.partitions, req.replication_factor, config, names.is_internal_topic(req.name), now_ms)
    parts = [
        PartitionState(req.name, i, list(assignment[i]), leader=assignment[i][0], leader_epoch=0, partition_epoch=0, isr=list(assignment[i]))
        for i in range(req.partitions)
    ]
    return topic, parts


def validate_topic_config(config: Mapping[str, object], default_config: Mapping[str, str], replication_factor: int) -> dict[str, str]:
    """Check a topic's own config (creation, alter_configs) on top of the cluster's default
    topic config; return it with string values. Raises INVALID_CONFIG naming the key: an
    unknown key, a bad value, or min.insync.replicas above the replication factor."""
    config = {str(k): str(v) for k, v in config.items()}
    unknown = sorted(set(config) - TOPIC_CONFIG_KEYS)
    if unknown:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"unknown topic config {unknown}; known keys: {sorted(TOPIC_CONFIG_KEYS)}")
    merged = dict(default_config)
    merged.update(config)
    rcfg = ReplicationConfig.from_topic_config(merged)
    if rcfg.min_insync_replicas > replication_factor:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"min.insync.replicas={rcfg.min_insync_replicas} exceeds replication factor {replication_factor}: acks=all writes could never succeed",
        )
    from ..log import LogConfig  # parse to validate values (clear INVALID_CONFIG errors)

    LogConfig.from_topic_config({k: v for k, v in merged.items() if k in LOG_KEYS})
    return config


def spread_replicas(name: str, brokers: list[int], replication_factor: int, partitions: range) -> dict[int, list[int]]:
    """The default assignment: partition i's replicas are consecutive brokers starting at
    an offset fixed by the topic's name, so partitions added later (create_partitions)
    continue the same round-robin as those made at creation."""
    n = len(brokers)
    start = zlib.crc32(name.encode()) % n
    return {i: [brokers[(start + i + j) % n] for j in range(replication_factor)] for i in partitions}


def check_assignment(req: CreateTopicsRequest, brokers: list[int]) -> dict[int, list[int]]:
    assert req.assignment is not None
    if sorted(req.assignment) != list(range(req.partitions)):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"assignment must name partitions 0..{req.partitions - 1}")
    for part, reps in req.assignment.items():
        check_replicas(part, reps, req.replication_factor, brokers)
    return req.assignment


def check_replicas(partition: int, replicas: list[int], replication_factor: int, brokers: list[int]) -> None:
    """One partition of an explicit assignment (creation, create_partitions):
    ``replication_factor`` distinct brokers of the cluster, else INVALID_REPLICA_ASSIGNMENT."""
    if len(replicas) != replication_factor or len(set(replicas)) != len(replicas):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {partition}: {replicas} must be {replication_factor} distinct brokers")
    if any(b not in brokers for b in replicas):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {partition}: {replicas} names brokers outside {brokers}")
