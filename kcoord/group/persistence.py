"""What the group coordinator writes to ``__consumer_offsets``, and how it reads it back.

* The writes it waits on (:class:`CommitWrite`, :class:`SyncWrite`...), each describing what
  to do when its AppendRecords action is acknowledged or fails, and Kafka's mapping of a failed
  append to the error a client should hear.
* :class:`Persistence`, the part of :class:`kcoord.group.coordinator.GroupCoordinatorState`
  that owns the writes in flight: it emits AppendRecords actions, releases their outcomes in
  emission order (the coordinator hands each to the part that waits on it), encodes a
  group's metadata record, and rebuilds groups from a replay of the partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from ..coordination.settling import InOrderWrites
from ..protocol.errors import ErrorCode
from .context import CoordinatorContext
from .metadata import EMPTY, STABLE, CommittedOffset, GroupMetadata, MemberMetadata, TxnOffset
from .records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    Record,
    TxnOffsetKey,
    TxnProducerKey,
    TxnProducerValue,
    decode_record,
    group_record,
)

E = ErrorCode

# -- mapping a failed append of __consumer_offsets to what the client should hear ----------

_APPEND_UNAVAILABLE = frozenset(
    {
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.REQUEST_TIMED_OUT,
        E.LEADER_NOT_AVAILABLE,
        # The coordinator's own sequence stream broke (it moves to a new producer epoch):
        # the client retries, it did nothing wrong.
        E.OUT_OF_ORDER_SEQUENCE_NUMBER,
        E.DUPLICATE_SEQUENCE_NUMBER,
    }
)
_APPEND_MOVED = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR, E.FENCED_LEADER_EPOCH})
_APPEND_TOO_LARGE = frozenset({E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE})


def commit_error_for_append(code: int) -> int:
    """Kafka's mapping for offset commits: retriable coordinator errors where the client
    should retry or rediscover the coordinator."""
    if code in _APPEND_UNAVAILABLE:
        return E.COORDINATOR_NOT_AVAILABLE
    if code in _APPEND_MOVED:
        return E.NOT_COORDINATOR
    if code in _APPEND_TOO_LARGE:
        return E.INVALID_COMMIT_OFFSET_SIZE
    return code


def group_error_for_append(code: int) -> int:
    """Kafka's mapping for group metadata writes (SyncGroup, static rejoin, DeleteGroups)."""
    if code in _APPEND_UNAVAILABLE:
        return E.COORDINATOR_NOT_AVAILABLE
    if code in _APPEND_MOVED:
        return E.NOT_COORDINATOR
    if code in _APPEND_TOO_LARGE:
        return E.UNKNOWN_SERVER_ERROR
    return code


# -- writes in flight ----------------------------------------------------------------------


@dataclass
class CommitWrite:
    token: Any
    group_id: str
    accepted: dict[tuple[str, int], CommittedOffset]
    codes: dict[str, dict[int, int]]


@dataclass
class SyncWrite:
    group_id: str
    generation_id: int
    assignments: dict[str, bytes]


@dataclass
class StaticJoinWrite:
    token: Any
    group_id: str
    member_id: str
    generation_id: int
    protocol_type: str | None
    protocol: str | None
    leader: str


@dataclass
class DeleteWrite:
    token: Any
    results: dict[str, int]
    group_ids: list[str]
    # When each group became Empty: restored if the tombstones fail to persist.
    empty_since: dict[str, int | None]


@dataclass
class BackgroundWrite:
    """Nobody waits on it (Empty-group record, retention tombstones)."""


@dataclass
class TxnCommitWrite:
    """A TxnOffsetCommit's pending offsets (and its producer's epoch, when newer)."""

    token: Any
    group_id: str
    producer_id: int
    producer: TxnProducerValue | None
    accepted: dict[tuple[str, int], CommittedOffset]
    codes: dict[str, dict[int, int]]


@dataclass
class MarkerWrite:
    """A TxnOffsetMarker: the committed offsets it materialises per group, the pending keys
    it tombstones per group, the producer's epochs after it; every marker waiting on it."""

    tokens: list[Any]
    producer_id: int
    commit: bool
    materialized: dict[str, dict[tuple[str, int], CommittedOffset]]
    resolved: dict[str, list[tuple[str, int]]]
    producer: TxnProducerValue


@dataclass
class TxnProducerExpiryWrite:
    """The tombstone of an idle transactional producer's ``[5, producer_id]`` record."""

    producer_id: int
    value: TxnProducerValue


PendingWrite = CommitWrite | SyncWrite | StaticJoinWrite | DeleteWrite | BackgroundWrite | TxnCommitWrite | MarkerWrite | TxnProducerExpiryWrite


def committed(v: OffsetValue) -> CommittedOffset:
    return CommittedOffset(v.offset, v.metadata, v.leader_epoch, v.commit_timestamp_ms, v.expire_timestamp_ms)


@dataclass
class Replayed:
    """What a replay of the partition rebuilds: per group its last group record, its live
    offsets and its pending transactional offsets (producer id -> partition -> offset); per
    transactional producer id its newest epochs."""

    group_values: dict[str, GroupValue | None]
    offsets: dict[str, dict[tuple[str, int], OffsetValue]]
    txn_offsets: dict[str, dict[int, dict[tuple[str, int], TxnOffset]]]
    producers: dict[int, TxnProducerValue]


def replay(records: Iterable[tuple[bytes, bytes | None]]) -> Replayed:
    """Rebuild a partition's state from its records in log order (tombstones remove). It
    depends only on the last record of each key and the order of those, which is what
    compaction keeps. Raises DecodeError on a malformed record."""
    out = Replayed({}, {}, {}, {})
    for key, value in records:
        decoded = decode_record(key, value)
        if decoded is None:
            continue
        k, v = decoded
        if isinstance(k, OffsetKey):
            tp = (k.topic, k.partition)
            per_group = out.offsets.setdefault(k.group_id, {})
            if v is None:
                per_group.pop(tp, None)
            else:
                assert isinstance(v, OffsetValue)
                per_group[tp] = v
                # A plain commit after a pending transactional one wins (Kafka keeps the newer).
                for pending in out.txn_offsets.get(k.group_id, {}).values():
                    if tp in pending:
                        pending[tp].superseded = True
        elif isinstance(k, TxnOffsetKey):
            tp = (k.topic, k.partition)
            by_producer = out.txn_offsets.setdefault(k.group_id, {})
            if v is None:
                pending = by_producer.get(k.producer_id, {})
                pending.pop(tp, None)
                if not pending:
                    by_producer.pop(k.producer_id, None)
                if not by_producer:
                    del out.txn_offsets[k.group_id]
            else:
                assert isinstance(v, OffsetValue)
                by_producer.setdefault(k.producer_id, {})[tp] = TxnOffset(committed(v))
        elif isinstance(k, TxnProducerKey):
            if v is None:
                out.producers.pop(k.producer_id, None)
            else:
                assert isinstance(v, TxnProducerValue)
                out.producers[k.producer_id] = v
        else:
            assert v is None or isinstance(v, GroupValue)
            out.group_values[k.group_id] = v
    return out


class Persistence(InOrderWrites[PendingWrite]):
    """The AppendRecords in flight, in emission order (:class:`InOrderWrites`), and the group
    record format."""

    def __init__(self, ctx: CoordinatorContext) -> None:
        super().__init__(ctx.emit)
        self.ctx = ctx

    def persist(self, records: list[Record], pending: PendingWrite, reason: str) -> int:
        return self._append(records, pending, reason)

    def group_record(self, group: GroupMetadata, assignments: dict[str, bytes], now_ms: int) -> Record:
        group.has_persisted_metadata = True
        members = [
            MemberValue(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(group.protocol),
                assignments.get(m.member_id, b""),
            )
            for m in group.members.values()
        ]
        value = GroupValue(
            group.protocol_type,
            group.generation_id,
            group.protocol,
            group.leader,
            group.state_timestamp_ms if group.state == EMPTY and group.state_timestamp_ms is not None else now_ms,
            members,
        )
        return group_record(GroupKey(group.group_id), value)

    def restore_group(self, group: GroupMetadata, gv: GroupValue, now_ms: int) -> None:
        group.generation_id = gv.generation_id
        group.protocol_type = gv.protocol_type
        group.has_persisted_metadata = True
        group.state_timestamp_ms = gv.state_timestamp_ms
        if not gv.members:
            group.state = EMPTY
            return
        group.state = STABLE
        group.protocol = gv.protocol
        for mv in gv.members:
            member = MemberMetadata(
                member_id=mv.member_id,
                group_instance_id=mv.group_instance_id,
                client_id=mv.client_id,
                client_host=mv.client_host,
                session_timeout_ms=mv.session_timeout_ms,
                rebalance_timeout_ms=mv.rebalance_timeout_ms,
                protocol_type=gv.protocol_type or "",
                protocols=[(gv.protocol or "", mv.subscription)],
                assignment=mv.assignment,
            )
            group.add(member)
            self.ctx.touch(group, member, now_ms)
        group.protocol_type = gv.protocol_type
        group.leader = gv.leader if gv.leader in group.members else next(iter(group.members))
