"""Cluster metadata owned by the controller: topics, replica assignment, leader, epochs, ISR.

These records are what the controller persists in the metadata store *before* it acts on
them, so that a restarted controller resumes from exactly what replicas may have been told.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

import msgpack

from ..protocol import names
from ..protocol.controller import PartitionMetadata, TopicMetadata
from ..protocol.errors import ErrorCode, KafkaError

NO_LEADER = -1
INTERNAL_OFFSETS_TOPIC = names.OFFSETS_TOPIC
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def validate_topic_name(name: Any) -> None:
    """Kafka's rules: [a-zA-Z0-9._-], 1..249 characters, not "." or ".."."""
    if not isinstance(name, str) or not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name must be a non-empty string, got {name!r}")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME}")
    if not _LEGAL_TOPIC.match(name):
        bad = sorted({c for c in name if not re.match(r"[a-zA-Z0-9._-]", c)})
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} has illegal characters {bad}; allowed are ASCII letters, digits, '.', '_' and '-'",
        )


@dataclass
class PartitionState:
    topic: str
    partition: int
    replicas: list[int]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    # Eligible leader replicas (topics without per-append fsync only, see election.py):
    # replicas that left the ISR while it fell below min.insync.replicas. No acks=all write
    # can succeed until the ISR is back there, so each holds every acknowledged record.
    elr: list[int] = field(default_factory=list)
    # The latest leader epoch that began with an unclean election (-1: none): from it on the
    # log may lack acknowledged records (KIP-704 keeps the same fact as the partition's
    # leader recovery state). Operators and the simulation's checker read it.
    last_unclean_epoch: int = -1

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER

    def to_metadata(self, offline_replicas: list[int] | None = None) -> PartitionMetadata:
        return PartitionMetadata(
            partition=self.partition,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            replicas=list(self.replicas),
            isr=list(self.isr),
            offline_replicas=list(offline_replicas or []),
            error_code=0 if self.online else ErrorCode.LEADER_NOT_AVAILABLE,
        )

    def encode(self, trust: Mapping[int, "ReplicaTrust"] | None = None) -> bytes:
        """The stored record: this state and what the controller knows of its replicas'
        processes (``trust``, broker -> record), one write, so that no reload finds one
        without the other."""
        record = asdict(self)
        record["trust"] = {str(b): asdict(t) for b, t in sorted((trust or {}).items())}
        return msgpack.packb(record, use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes) -> "PartitionState":
        record = msgpack.unpackb(data, raw=False)
        return cls(**{k: v for k, v in record.items() if k in _PARTITION_FIELDS})


def decode_trust(data: bytes) -> "dict[int, ReplicaTrust] | None":
    """The replicas' trust records a partition record carries; None for a record written
    before it carried them (they were then kept under :func:`replica_key`)."""
    trust = msgpack.unpackb(data, raw=False).get("trust")
    if trust is None:
        return None
    return {int(b): ReplicaTrust(**record) for b, record in trust.items()}


@dataclass
class TopicState:
    name: str
    num_partitions: int
    replication_factor: int
    config: dict[str, str] = field(default_factory=dict)
    internal: bool = False
    created_ms: int = 0
    # Bumped by every config change and stored with it; records written before versions
    # existed load as 0.
    config_version: int = 0

    def encode(self) -> bytes:
        return msgpack.packb(asdict(self), use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes) -> "TopicState":
        return cls(**msgpack.unpackb(data, raw=False))


@dataclass
class ClusterState:
    name: str
    brokers: list[int]
    controller_epoch: int = 0
    next_producer_id: int = 1000
    group_coordinators: int = 0

    def encode(self) -> bytes:
        return msgpack.packb(asdict(self), use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes) -> "ClusterState":
        return cls(**msgpack.unpackb(data, raw=False))


def topic_metadata(
    topic: TopicState,
    partitions: list[PartitionState],
    offline: dict[int, list[int]] | None = None,
    config: dict[str, str] | None = None,
) -> TopicMetadata:
    """``config``: the effective config to report (defaults to the topic's own)."""
    offline = offline or {}
    return TopicMetadata(
        name=topic.name,
        partitions=[p.to_metadata(offline.get(p.partition)) for p in partitions],
        config=dict(topic.config if config is None else config),
        internal=topic.internal,
    )


# Store keys
def cluster_key() -> str:
    return "cluster"


def topic_key(name: str) -> str:
    return f"topic/{name}"


def partition_key(topic: str, partition: int) -> str:
    return f"partition/{topic}/{partition}"


# Every key the controller writes starts with one of these (the metadata of a store written
# before the metadata log, kcoord.replication.fenced_store, is read from them).
CONTROLLER_KEY_PREFIXES = ("cluster", "topic/", "partition/", "replica/", "placement/", "security/", "producer/")


def is_controller_key(key: str) -> bool:
    return key.startswith(CONTROLLER_KEY_PREFIXES)


def replica_key(topic: str, partition: int, broker: int) -> str:
    """Where a replica's trust record was kept before the partition record carried it (read
    once, when a controller boots on such a store, and deleted)."""
    return f"replica/{topic}/{partition}/{broker}"


@dataclass
class ReplicaTrust:
    """What the controller knows about one replica's process, kept in the store (in its
    partition's record) so that a restarted controller still knows it: the incarnation it
    last saw, whether that replica restarted and may have lost its unflushed tail
    (suspect), and the incarnation it had when it became an eligible leader replica (empty
    if none)."""

    incarnation: str = ""
    suspect: bool = False
    elr_witness: str = ""
    # The storage lineage it last reported (HeartbeatResponse.storage): a restart that
    # keeps it lost nothing, so it does not make the replica suspect.
    storage: str = ""
    # The log directory id it last reported, and whether it came back with another one
    # (its disk was wiped or replaced) and has not caught up into the ISR since.
    directory: str = ""
    replaced: bool = False

    def encode(self) -> bytes:
        return msgpack.packb(asdict(self), use_bin_type=True)

    @classmethod
    def decode(cls, data: bytes) -> "ReplicaTrust":
        return cls(**msgpack.unpackb(data, raw=False))


_PARTITION_FIELDS = frozenset(f.name for f in fields(PartitionState))
