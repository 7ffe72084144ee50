"""Value types of the client API, named as in kafka-python."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """What a producer future resolves to. ``offset`` is -1 when the broker reported a
    duplicate of an older batch whose offset it no longer remembers."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    topic_partition: TopicPartition | None = None


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list  # [(str, bytes)]
    leader_epoch: int = -1


class OffsetAndTimestamp(NamedTuple):
    """What :meth:`Consumer.offsets_for_times` finds: the first offset whose record
    timestamp is >= the one asked for, and that record's timestamp."""

    offset: int
    timestamp: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerGroupMetadata(NamedTuple):
    """A snapshot of a consumer's group membership (kafka-python 3's name and fields), what
    ``Producer.send_offsets_to_transaction`` sends so the group coordinator fences a stale
    consumer instance (KIP-447). Unjoined: generation -1 and member id ""; no group: group_id
    None."""

    group_id: str | None = None
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition: what one read task fetches (a batch read's
    task, a streaming micro-batch's input)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start
