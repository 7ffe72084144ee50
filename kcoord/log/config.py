"""Log configuration, named after the Kafka topic configs it mirrors.

A topic's config arrives as a string map (``{"segment.bytes": "1048576"}``) from the admin
API; :meth:`LogConfig.from_topic_config` turns it into typed fields and names the offending
key when a value is bad, so the error can go straight back to the user.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

from ..protocol.errors import ErrorCode, KafkaError

INT32_MAX = 2**31 - 1

# field name -> Kafka topic config key
TOPIC_KEYS: dict[str, str] = {
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "retention_bytes": "retention.bytes",
    "retention_ms": "retention.ms",
    "index_interval_bytes": "index.interval.bytes",
    "flush_messages": "flush.messages",
    "flush_ms": "flush.ms",
    "max_batch_bytes": "max.message.bytes",
    "cleanup_policy": "cleanup.policy",
    "delete_retention_ms": "delete.retention.ms",
    "min_cleanable_dirty_ratio": "min.cleanable.dirty.ratio",
    "min_compaction_lag_ms": "min.compaction.lag.ms",
}
CLEANUP_POLICIES = {"delete": "delete", "compact": "compact", "compact,delete": "compact,delete", "delete,compact": "compact,delete"}
_NON_INT = {"cleanup_policy", "min_cleanable_dirty_ratio"}

# Kafka's "never" for flush.messages / flush.ms is Long.MAX_VALUE; treat anything this
# large as "no count/time based flush" so configs copied from Kafka keep their meaning.
_NEVER = 2**62

_OPTIONAL = {"flush_messages", "flush_ms"}
_MINIMUM = {
    "segment_bytes": 1,
    "segment_ms": 1,
    "retention_bytes": -1,
    "retention_ms": -1,
    "index_interval_bytes": 0,
    "flush_messages": 1,
    "flush_ms": 0,
    "max_batch_bytes": 1,
    "delete_retention_ms": 0,
    "min_compaction_lag_ms": 0,
}
# Positions in a segment and its sparse index are int32, so a segment must stay below 2 GiB.
_MAXIMUM = {"segment_bytes": INT32_MAX, "max_batch_bytes": INT32_MAX}


@dataclass
class LogConfig:
    """How one partition's log rolls, retains and flushes."""

    segment_bytes: int = 256 * 2**20  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    retention_bytes: int = -1  # retention.bytes (-1 = unlimited)
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1 = forever)
    index_interval_bytes: int = 4096  # index.interval.bytes
    flush_messages: int | None = None  # flush.messages (None = not by count; 1 = every append)
    flush_ms: int | None = None  # flush.ms (None = not by time)
    max_batch_bytes: int = 8 * 2**20  # max.message.bytes
    cleanup_policy: str = "delete"  # cleanup.policy: delete | compact | compact,delete
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms: how long tombstones stay
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            key = TOPIC_KEYS[f.name]
            if f.name == "cleanup_policy":
                if value not in CLEANUP_POLICIES:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: expected one of delete, compact, compact,delete; got {value!r}")
                self.cleanup_policy = CLEANUP_POLICIES[value]
                continue
            if f.name == "min_cleanable_dirty_ratio":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: expected a number in [0, 1], got {value!r}")
                continue
            if value is None and f.name in _OPTIONAL:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: expected an integer, got {value!r}")
            if value < _MINIMUM[f.name]:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: must be >= {_MINIMUM[f.name]}, got {value}")
            if f.name in _MAXIMUM and value > _MAXIMUM[f.name]:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: must be <= {_MAXIMUM[f.name]}, got {value}")

    @property
    def compact(self) -> bool:
        """cleanup.policy includes compact: the cleaner keeps the last record per key."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """cleanup.policy includes delete: retention.ms / retention.bytes delete segments."""
        return "delete" in self.cleanup_policy

    @classmethod
    def from_topic_config(cls, config: Mapping[str, str | int]) -> "LogConfig":
        """Build from Kafka-named topic configs; keys this log does not use are ignored."""
        kwargs: dict[str, object] = {}
        for name, key in TOPIC_KEYS.items():
            if key not in config:
                continue
            raw = config[key]
            if name == "cleanup_policy":
                kwargs[name] = str(raw).strip().replace(" ", "").lower()
            elif name == "min_cleanable_dirty_ratio":
                try:
                    kwargs[name] = float(raw)
                except (TypeError, ValueError):
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: expected a number in [0, 1], got {raw!r}") from None
            else:
                kwargs[name] = _parse(key, raw, optional=name in _OPTIONAL)
        return cls(**kwargs)  # type: ignore[arg-type]  # __post_init__ checks the ranges

    def to_topic_config(self) -> dict[str, str]:
        """The inverse of :meth:`from_topic_config` (for describe)."""
        out: dict[str, str] = {}
        for name, key in TOPIC_KEYS.items():
            value = getattr(self, name)
            out[key] = "" if value is None else str(value)
        return out


def _parse(key: str, raw: object, *, optional: bool) -> int | None:
    if isinstance(raw, bool):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: expected an integer, got {raw!r}")
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none", "null")):
        if optional:
            return None
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: a value is required")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str):
        try:
            value = int(raw.strip(), 10)
        except ValueError:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: expected an integer, got {raw!r}") from None
    else:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"{key}: expected an integer, got {type(raw).__name__}")
    if optional and value >= _NEVER:
        return None
    return value
