"""Changing a topic after creation: its config (describe, incremental alter) and its
partition count. Pure rules for the controller core, which persists and announces.

* **Describe** reports every topic config key with its effective value and Kafka's
  ``source``: set on the topic (DYNAMIC_TOPIC_CONFIG), from the cluster's default topic
  config given at deploy (STATIC_BROKER_CONFIG) or kcoord's built-in default
  (DEFAULT_CONFIG).
* **Alter** is Kafka's IncrementalAlterConfigs: per key SET or DELETE (back to the default),
  keys not named keep their value. The result is checked exactly as a topic's creation
  config is (``topic_plan.validate_topic_config``), so no change can produce a config a
  replica could not open with.
* **Create partitions** only grows a topic; new partitions continue the creation's
  round-robin placement (``topic_plan.spread_replicas``).

``__consumer_offsets`` refuses what would lose group state: retention changes and any
cleanup.policy but ``compact`` (its records are the committed offsets; a cluster deployed
before it was compacted may switch to compact) and new partitions (groups hash to
partitions).
"""

from __future__ import annotations

from dataclasses import fields
from enum import IntEnum
from typing import Iterable, Mapping

from ..protocol import names
from ..protocol.controller import AlterConfigOp, ConfigEntry
from ..protocol.errors import ErrorCode, KafkaError
from .config import ReplicationConfig
from .metadata import PartitionState, TopicState
from .topic_plan import MAX_PARTITIONS, TOPIC_CONFIG_KEYS, check_replicas, spread_replicas, validate_topic_config


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigs ``config_source`` numbers (the ones kcoord reports)."""

    DYNAMIC_TOPIC_CONFIG = 1
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class AlterOp(IntEnum):
    """Kafka's IncrementalAlterConfigs op types."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# Keys of the internal offsets topic that decide what of it is kept: changing them could
# delete committed offsets and group metadata. cleanup.policy may only be set to compact.
PROTECTED_INTERNAL_KEYS = frozenset({"retention.ms", "retention.bytes", "cleanup.policy"})
INTERNAL_CLEANUP_POLICY = "compact"


def builtin_defaults() -> dict[str, str]:
    """Every topic config key's value when neither the topic nor the cluster sets it."""
    from ..log import LogConfig

    out = {k: v for k, v in LogConfig().to_topic_config().items() if k in TOPIC_CONFIG_KEYS}
    repl = ReplicationConfig()
    by_field = {f.name: getattr(repl, f.name) for f in fields(repl)}
    for key, (name, _parse) in ReplicationConfig._KEYS.items():
        if key in TOPIC_CONFIG_KEYS:
            value = by_field[name]
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def describe_config(topic: TopicState, cluster_defaults: Mapping[str, str], keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    """The effective value and source of each of ``keys`` (every topic config key when
    None), sorted by name. An unknown key is INVALID_CONFIG naming it."""
    wanted = sorted(TOPIC_CONFIG_KEYS) if keys is None else sorted(set(keys))
    unknown = [k for k in wanted if k not in TOPIC_CONFIG_KEYS]
    if unknown:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"unknown topic config {unknown}; known keys: {sorted(TOPIC_CONFIG_KEYS)}")
    defaults = builtin_defaults()
    out = []
    for key in wanted:
        if key in topic.config:
            value, source = topic.config[key], ConfigSource.DYNAMIC_TOPIC_CONFIG
        elif key in cluster_defaults:
            value, source = cluster_defaults[key], ConfigSource.STATIC_BROKER_CONFIG
        else:
            value, source = defaults.get(key, ""), ConfigSource.DEFAULT_CONFIG
        read_only = topic.internal and key in PROTECTED_INTERNAL_KEYS
        out.append(ConfigEntry(name=key, value=value, source=int(source), read_only=read_only))
    return out


def apply_alter_ops(topic: TopicState, ops: list[AlterConfigOp], cluster_defaults: Mapping[str, str]) -> dict[str, str]:
    """The topic's own config after ``ops`` (nothing is changed here). Raises KafkaError:
    INVALID_REQUEST for no ops, a key named twice or an unsupported op; INVALID_CONFIG for
    an unknown key or a bad value (naming the key); POLICY_VIOLATION for a protected key of
    an internal topic."""
    if not ops:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"no config change given for topic {topic.name!r}")
    seen: set[str] = set()
    config = dict(topic.config)
    for op in ops:
        if op.name in seen:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"config {op.name!r} is named more than once")
        seen.add(op.name)
        if op.name not in TOPIC_CONFIG_KEYS:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"unknown topic config {op.name!r}; known keys: {sorted(TOPIC_CONFIG_KEYS)}")
        compacting = op.name == "cleanup.policy" and op.op == AlterOp.SET and str(op.value).strip().lower() == INTERNAL_CLEANUP_POLICY
        if topic.internal and op.name in PROTECTED_INTERNAL_KEYS and not compacting:
            raise KafkaError(
                ErrorCode.POLICY_VIOLATION,
                f"{op.name!r} of internal topic {topic.name!r} cannot be changed (except cleanup.policy=compact): its records are the groups' committed offsets",
            )
        if op.op == AlterOp.SET:
            if op.value is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{op.name}: SET needs a value")
            config[op.name] = str(op.value)
        elif op.op == AlterOp.DELETE:
            config.pop(op.name, None)
        elif op.op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{op.name}: {AlterOp(op.op).name} is not supported; SET the whole value")
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{op.name}: unknown config op {op.op} (0 SET, 1 DELETE)")
    return validate_topic_config(config, cluster_defaults, topic.replication_factor)


def plan_new_partitions(
    topic: TopicState, count: int, brokers: list[int], assignment: list[list[int]] | None = None
) -> list[PartitionState]:
    """The partitions ``topic.num_partitions .. count-1``, each led by its first replica at
    epoch 0 with every replica in the ISR (as at creation). Raises INVALID_PARTITIONS unless
    ``count`` grows the topic (within the limit), INVALID_REPLICA_ASSIGNMENT for a bad
    explicit assignment, POLICY_VIOLATION for an internal topic and the other topics whose
    records are found by their key's partition (``names.FIXED_PARTITION_TOPICS``)."""
    old = topic.num_partitions
    if topic.internal:
        raise KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"internal topic {topic.name!r} cannot get partitions: its partition count is the number of its coordinators",
        )
    if topic.name in names.FIXED_PARTITION_TOPICS:
        raise KafkaError(
            ErrorCode.POLICY_VIOLATION,
            f"topic {topic.name!r} cannot get partitions: its records are found by their key's partition, and more partitions would hide them",
        )
    if not isinstance(count, int) or isinstance(count, bool):
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"partition count must be an integer, got {count!r}")
    if count <= old:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"topic {topic.name!r} has {old} partitions; the count can only grow, got {count}",
        )
    if count > MAX_PARTITIONS:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"{count} partitions is more than the limit of {MAX_PARTITIONS}")
    new = range(old, count)
    if assignment is None:
        if topic.replication_factor > len(brokers):
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {topic.replication_factor} is larger than the {len(brokers)} brokers",
            )
        placed = spread_replicas(topic.name, brokers, topic.replication_factor, new)
    else:
        if len(assignment) != len(new):
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"{len(new)} new partitions need {len(new)} replica lists, got {len(assignment)}",
            )
        placed = {}
        for i, reps in zip(new, assignment):
            check_replicas(i, list(reps), topic.replication_factor, brokers)
            placed[i] = list(reps)
    return [
        PartitionState(topic.name, i, list(placed[i]), leader=placed[i][0], leader_epoch=0, partition_epoch=0, isr=list(placed[i]))
        for i in new
    ]
