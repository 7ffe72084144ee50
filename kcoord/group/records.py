"""Records of the internal ``__consumer_offsets`` topic: what a coordinator writes and
replays.

Two kinds of record share the topic, told apart by the first element of the key (the key
version, as in Kafka: 1 = offset commit, 2 = group metadata):

* offset commit   key ``[1, group, topic, partition]`` -> :class:`OffsetValue`, or ``None``
  (a tombstone: the offset was expired or deleted);
* group metadata  key ``[2, group]`` -> :class:`GroupValue`, or ``None`` (group deleted);
* coordinator epoch key ``[3, partition]`` -> ``{"v": 1, "epoch": E}``: written by each
  coordinator incarnation when it takes over its partition (a fence, see
  ``kcoord.group.coordinator_driver``); carries no group state, so replay skips it like any key version
  it does not know.
* pending transactional offset key ``[4, group, topic, partition, producer_id]`` ->
  :class:`OffsetValue` (the committed offsets' format), or ``None`` once the transaction's
  TxnOffsetMarker resolved it (KIP-447; docs/transactions.md section 3);
* transactional producer key ``[5, producer_id]`` -> :class:`TxnProducerValue`: the newest
  producer epoch and transaction-coordinator epoch this coordinator accepted for it, so a
  zombie's commit or a stale coordinator's marker stays fenced after a failover.

Keys are msgpack arrays so that the same logical key always packs to the same bytes (log
compaction keeps the last value per key bytes). Values are msgpack maps with a ``"v"``
version and named fields so later versions can add fields without breaking old readers.
Readers skip keys of unknown versions (written by a newer kcoord) and raise
:class:`DecodeError` (CORRUPT_MESSAGE) on malformed ones.

This module is also the reader for anyone who scans the topic directly, e.g. Spark's
committed-offsets view: ``decode_record(key, value)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..coordination.records import COORDINATOR_KEY_VERSION, coordinator_epoch_record
from ..coordination.records import field_of as _field
from ..coordination.records import pack as _pack
from ..coordination.records import unpack as _unpack
from ..protocol import names
from ..protocol.errors import DecodeError, ErrorCode

OFFSETS_TOPIC = names.OFFSETS_TOPIC

# segment.bytes of __consumer_offsets: 16 MiB, not Kafka's 100 MiB. The cleaner never
# touches the active segment, so a coordinator's load replays the live keys plus up to about
# one segment of history; kcoord replays ~75k records/s per core (benchmarks/group_load.py),
# so 16 MiB (~160k commits of ~100 bytes) bounds that to ~2 s where 100 MiB would be ~13 s.
# The price is more files: the cleaner rewrites segments in place and never merges them, so
# each rolled segment stays a file (possibly empty).
OFFSETS_SEGMENT_BYTES = 16 * 2**20

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
TXN_OFFSET_KEY_VERSION = 4
TXN_PRODUCER_KEY_VERSION = 5
OFFSET_VALUE_VERSION = 1
GROUP_VALUE_VERSION = 1

Record = tuple[bytes, "bytes | None"]


@dataclass(frozen=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True)
class TxnOffsetKey:
    """A transactional offset of ``producer_id``'s open transaction, pending its marker."""

    group_id: str
    topic: str
    partition: int
    producer_id: int


@dataclass(frozen=True)
class TxnProducerKey:
    producer_id: int


@dataclass(frozen=True)
class TxnProducerValue:
    """The newest epochs accepted for a transactional producer id (-1: none seen), and when
    this record was written (``last_update_ms``; -1 in records written before kcoord kept
    it): the producer's last activity here, from which its record expires."""

    producer_epoch: int
    coordinator_epoch: int = -1
    last_update_ms: int = -1


@dataclass(frozen=True)
class OffsetValue:
    """A committed offset. ``expire_timestamp_ms`` is set only when the committer asked for
    an explicit retention; otherwise retention follows the group's state."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1
    commit_timestamp_ms: int = 0
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True)
class MemberValue:
    """A member as persisted: enough to resume its generation after a restart.
    ``subscription`` is its metadata for the group's selected protocol."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    """A group's generation as persisted at SyncGroup (Stable, with assignments) or when it
    became Empty (no members). ``state_timestamp_ms`` is when that state began; retention of
    an Empty group's offsets counts from it."""

    protocol_type: str | None
    generation_id: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: list[MemberValue] = field(default_factory=list)


# -- keys ------------------------------------------------------------------------------------


Key = OffsetKey | GroupKey | TxnOffsetKey | TxnProducerKey


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetKey):
        return _pack([OFFSET_KEY_VERSION, key.group_id, key.topic, key.partition])
    if isinstance(key, TxnOffsetKey):
        return _pack([TXN_OFFSET_KEY_VERSION, key.group_id, key.topic, key.partition, key.producer_id])
    if isinstance(key, TxnProducerKey):
        return _pack([TXN_PRODUCER_KEY_VERSION, key.producer_id])
    return _pack([GROUP_KEY_VERSION, key.group_id])


def decode_key(data: bytes) -> Key | None:
    """The key, or None for a key version this reader does not know."""
    obj = _unpack(data, "__consumer_offsets key")
    if not isinstance(obj, list) or not obj or not isinstance(obj[0], int):
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, "__consumer_offsets key: expected [version, ...]")
    version = obj[0]
    try:
        if version == OFFSET_KEY_VERSION:
            _, group, topic, partition = obj
            if isinstance(group, str) and isinstance(topic, str) and type(partition) is int:
                return OffsetKey(group, topic, partition)
        elif version == GROUP_KEY_VERSION:
            _, group = obj
            if isinstance(group, str):
                return GroupKey(group)
        elif version == TXN_OFFSET_KEY_VERSION:
            _, group, topic, partition, producer_id = obj
            if isinstance(group, str) and isinstance(topic, str) and type(partition) is int and type(producer_id) is int:
                return TxnOffsetKey(group, topic, partition, producer_id)
        elif version == TXN_PRODUCER_KEY_VERSION:
            _, producer_id = obj
            if type(producer_id) is int:
                return TxnProducerKey(producer_id)
        else:
            return None
    except ValueError:
        pass
    raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"__consumer_offsets key: malformed {obj!r}")


# -- values ----------------------------------------------------------------------------------


def encode_offset_value(value: OffsetValue) -> bytes:
    return _pack(
        {
            "v": OFFSET_VALUE_VERSION,
            "offset": value.offset,
            "metadata": value.metadata,
            "leader_epoch": value.leader_epoch,
            "commit_ts": value.commit_timestamp_ms,
            "expire_ts": value.expire_timestamp_ms,
        }
    )


def encode_txn_producer_value(value: TxnProducerValue) -> bytes:
    return _pack(
        {
            "v": 1,
            "producer_epoch": value.producer_epoch,
            "coordinator_epoch": value.coordinator_epoch,
            "last_update": value.last_update_ms,
        }
    )


def decode_txn_producer_value(data: bytes) -> TxnProducerValue:
    what = "transactional producer value"
    obj = _map(data, what)
    last_update = obj.get("last_update", -1)  # added later: older records have none
    if type(last_update) is not int:
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: last_update must be an int, got {type(last_update).__name__}")
    return TxnProducerValue(
        producer_epoch=_field(obj, "producer_epoch", (int,), what),
        coordinator_epoch=_field(obj, "coordinator_epoch", (int,), what),
        last_update_ms=last_update,
    )


def _member_obj(m: MemberValue) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "rebalance_timeout_ms": m.rebalance_timeout_ms,
        "session_timeout_ms": m.session_timeout_ms,
        "subscription": m.subscription,
        "assignment": m.assignment,
    }


def encode_group_value(value: GroupValue) -> bytes:
    return _pack(
        {
            "v": GROUP_VALUE_VERSION,
            "protocol_type": value.protocol_type,
            "generation": value.generation_id,
            "protocol": value.protocol,
            "leader": value.leader,
            "state_ts": value.state_timestamp_ms,
            "members": [_member_obj(m) for m in value.members],
        }
    )


def _map(data: bytes, what: str) -> dict:
    obj = _unpack(data, what)
    if not isinstance(obj, dict) or type(obj.get("v")) is not int:
        raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: expected a versioned map")
    return obj


def decode_offset_value(data: bytes) -> OffsetValue:
    what = "offset commit value"
    obj = _map(data, what)
    return OffsetValue(
        offset=_field(obj, "offset", (int,), what),
        metadata=_field(obj, "metadata", (str,), what),
        leader_epoch=_field(obj, "leader_epoch", (int,), what),
        commit_timestamp_ms=_field(obj, "commit_ts", (int,), what),
        expire_timestamp_ms=_field(obj, "expire_ts", (int, type(None)), what),
    )


def decode_group_value(data: bytes) -> GroupValue:
    what = "group metadata value"
    obj = _map(data, what)
    members = []
    for m in _field(obj, "members", (list,), what):
        if not isinstance(m, dict):
            raise DecodeError(ErrorCode.CORRUPT_MESSAGE, f"{what}: member is not a map")
        members.append(
            MemberValue(
                member_id=_field(m, "member_id", (str,), what),
                group_instance_id=_field(m, "instance_id", (str, type(None)), what),
                client_id=_field(m, "client_id", (str,), what),
                client_host=_field(m, "client_host", (str,), what),
                rebalance_timeout_ms=_field(m, "rebalance_timeout_ms", (int,), what),
                session_timeout_ms=_field(m, "session_timeout_ms", (int,), what),
                subscription=_field(m, "subscription", (bytes,), what),
                assignment=_field(m, "assignment", (bytes,), what),
            )
        )
    return GroupValue(
        protocol_type=_field(obj, "protocol_type", (str, type(None)), what),
        generation_id=_field(obj, "generation", (int,), what),
        protocol=_field(obj, "protocol", (str, type(None)), what),
        leader=_field(obj, "leader", (str, type(None)), what),
        state_timestamp_ms=_field(obj, "state_ts", (int,), what),
        members=members,
    )


# -- whole records ---------------------------------------------------------------------------


def offset_record(key: OffsetKey, value: OffsetValue | None) -> Record:
    return encode_key(key), None if value is None else encode_offset_value(value)


def group_record(key: GroupKey, value: GroupValue | None) -> Record:
    return encode_key(key), None if value is None else encode_group_value(value)


def txn_offset_record(key: TxnOffsetKey, value: OffsetValue | None) -> Record:
    return encode_key(key), None if value is None else encode_offset_value(value)


def txn_producer_record(key: TxnProducerKey, value: TxnProducerValue | None) -> Record:
    return encode_key(key), None if value is None else encode_txn_producer_value(value)


def decode_record(
    key: bytes, value: bytes | None
) -> (
    tuple[OffsetKey | TxnOffsetKey, OffsetValue | None]
    | tuple[GroupKey, GroupValue | None]
    | tuple[TxnProducerKey, TxnProducerValue | None]
    | None
):
    """Decode one record of the topic; None when its key version is unknown (skip it)."""
    k = decode_key(key)
    if k is None:
        return None
    if isinstance(k, (OffsetKey, TxnOffsetKey)):
        return k, None if value is None else decode_offset_value(value)
    if isinstance(k, TxnProducerKey):
        return k, None if value is None else decode_txn_producer_value(value)
    return k, None if value is None else decode_group_value(value)
