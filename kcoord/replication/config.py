"""Replication settings, parsed from Kafka-named topic configs.

Defaults differ from Kafka's where Ray's costs differ: an actor call costs ~1 ms here, so a
follower backs off for 50 ms (not 1 s) after an error to keep failover short.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from ..protocol.errors import ErrorCode, KafkaError

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


def _parse_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={value!r} is not a boolean (true/false)")


def _parse_int(key: str, value: Any, minimum: int | None = None) -> int:
    try:
        number = int(value)
        if isinstance(value, float) and number != value:
            raise ValueError
    except (TypeError, ValueError):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={number} must be >= {minimum}")
    return number


@dataclass(frozen=True)
class ReplicationConfig:
    min_insync_replicas: int = 1  # min.insync.replicas
    unclean_leader_election: bool = False  # unclean.leader.election.enable
    replica_lag_time_max_ms: int = 10_000  # replica.lag.time.max.ms
    replica_fetch_max_bytes: int = 16 << 20  # replica.fetch.max.bytes
    # replica.fetch.wait.max.ms. Kafka's 500 ms suits one fetch per broker pair for all
    # partitions; here every follower is its own process, so each idle partition pays for
    # its followers' wake-ups. An append answers a parked fetch at once whatever the wait;
    # only a follower's copy of the HW after the last write of a burst is older.
    replica_fetch_wait_max_ms: int = 2000
    replica_fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    replica_fetch_backoff_ms: int = 50  # replica.fetch.backoff.ms
    hw_checkpoint_interval_ms: int = 1000  # replica.high.watermark.checkpoint.interval.ms
    alter_partition_backoff_ms: int = 100
    # How long an idempotent batch that arrived ahead of its predecessors waits for them
    # (Ray may deliver a producer's pipelined requests out of order) before it is refused
    # with OUT_OF_ORDER_SEQUENCE_NUMBER.
    out_of_order_wait_ms: int = 200
    message_timestamp_type: str = CREATE_TIME  # message.timestamp.type
    # Storage upkeep on every replica (Kafka's broker configs of the same names; kcoord
    # takes them as cluster-wide broker_config, delivered with the default topic config).
    log_retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    log_cleaner_enable: bool = True  # log.cleaner.enable
    log_cleaner_backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    # transaction.partition.verification.enable (Kafka's broker config, KIP-890): a
    # transactional batch that would start a transaction is appended only after the
    # transaction coordinator confirmed the partition is in it (an implicit add is made even
    # when off: it is the producer's only add). Off only for a cluster
    # whose transactional writers have no coordinator (tools, tests of the log alone).
    transaction_partition_verification: bool = True

    # Kafka config name -> (field, parser)
    _KEYS = {
        "min.insync.replicas": ("min_insync_replicas", lambda k, v: _parse_int(k, v, 1)),
        "unclean.leader.election.enable": ("unclean_leader_election", _parse_bool),
        "replica.lag.time.max.ms": ("replica_lag_time_max_ms", lambda k, v: _parse_int(k, v, 1)),
        "replica.fetch.max.bytes": ("replica_fetch_max_bytes", lambda k, v: _parse_int(k, v, 1024)),
        "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", lambda k, v: _parse_int(k, v, 0)),
        "replica.fetch.min.bytes": ("replica_fetch_min_bytes", lambda k, v: _parse_int(k, v, 1)),
        "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", lambda k, v: _parse_int(k, v, 0)),
        "replica.high.watermark.checkpoint.interval.ms": ("hw_checkpoint_interval_ms", lambda k, v: _parse_int(k, v, 1)),
        "message.timestamp.type": ("message_timestamp_type", lambda k, v: _parse_timestamp_type(k, v)),
        "log.retention.check.interval.ms": ("log_retention_check_interval_ms", lambda k, v: _parse_int(k, v, 1)),
        "log.cleaner.enable": ("log_cleaner_enable", _parse_bool),
        "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", lambda k, v: _parse_int(k, v, 1)),
        "transaction.partition.verification.enable": ("transaction_partition_verification", _parse_bool),
    }

    @classmethod
    def from_topic_config(cls, config: Mapping[str, Any] | None) -> "ReplicationConfig":
        """Parse the replication keys of a topic config; other keys are ignored here."""
        values: dict[str, Any] = {}
        for key, value in (config or {}).items():
            entry = cls._KEYS.get(key)
            if entry is not None:
                name, parse = entry
                values[name] = parse(key, value)
        return replace(cls(), **values)



def _parse_timestamp_type(key: str, value: Any) -> str:
    if value in (CREATE_TIME, LOG_APPEND_TIME):
        return value
    raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}={value!r} must be {CREATE_TIME} or {LOG_APPEND_TIME}")


REPLICATION_KEYS = frozenset(ReplicationConfig._KEYS)
# Cluster-wide settings (Kafka broker configs): given as ``broker_config`` at deploy time,
# never as a topic's config.
BROKER_KEYS = frozenset({"log.retention.check.interval.ms", "log.cleaner.enable", "log.cleaner.backoff.ms", "transaction.partition.verification.enable"})


def validate_broker_config(config: Mapping[str, Any] | None) -> dict[str, str]:
    """Check a deploy-time ``broker_config`` (Kafka broker config names, see BROKER_KEYS) and
    return it with string values; ValueError names an unknown key or a bad value."""
    out = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (config or {}).items()}
    unknown = sorted(set(out) - BROKER_KEYS)
    if unknown:
        raise ValueError(f"unknown broker config {', '.join(map(repr, unknown))}; known keys: {', '.join(sorted(BROKER_KEYS))}")
    try:
        ReplicationConfig.from_topic_config(out)
    except KafkaError as exc:
        raise ValueError(f"invalid broker config: {exc}") from None
    return out
assert {f.name for f in fields(ReplicationConfig)} >= {v[0] for v in ReplicationConfig._KEYS.values()}
