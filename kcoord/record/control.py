"""Control batches: the COMMIT and ABORT markers that end a producer's transaction in a
partition.

A control batch has the control bit (0x20) and the transactional bit (0x10) set, no base
sequence, the producer id and epoch of the transaction it ends, and exactly one record with
Kafka's bytes: key ``>hh`` (version 0, type 0 ABORT / 1 COMMIT), value ``>hi`` (version 0,
the transaction coordinator's epoch). Both formats carry it: magic 2 is exactly Kafka's
control batch; magic 1 holds the same key and value in kcoord's columns, and
:func:`~kcoord.record.conversion.to_kafka` turns it into Kafka's. Readers never hand a
control record to an application (:func:`~kcoord.record.decoding.decode_batch` returns a
control batch without records); the log reads it with :func:`read_control`.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, NamedTuple

from .columns import build_batch_columns, decode_columns
from .crc import CRC_FUNCTIONS
from .header import (
    CONTROL_BIT,
    CRC_START,
    FORMAT_VERSION,
    KAFKA_FORMAT,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptRecordError,
    read_header,
)

CONTROL_KEY = struct.Struct(">hh")  # version, type
MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")


class ControlType(enum.IntEnum):
    """Kafka's ControlRecordType ids."""

    ABORT = 0
    COMMIT = 1


class ControlRecord(NamedTuple):
    """What a control batch says: which end, and the coordinator epoch that wrote it."""

    type: ControlType
    coordinator_epoch: int

    @property
    def commit(self) -> bool:
        return self.type == ControlType.COMMIT


def is_control(h: BatchHeader) -> bool:
    return bool(h.attributes & CONTROL_BIT)


def is_transactional(h: BatchHeader) -> bool:
    return bool(h.attributes & TRANSACTIONAL_BIT)


def marker_key(commit: bool) -> bytes:
    return CONTROL_KEY.pack(CONTROL_KEY_VERSION, ControlType.COMMIT if commit else ControlType.ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return MARKER_VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)


def build_control_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    magic: int = KAFKA_FORMAT,
    base_offset: int = 0,
    leader_epoch: int = -1,
) -> bytes:
    """A COMMIT (``commit``) or ABORT marker of ``producer_id`` at ``producer_epoch``, written
    by coordinator epoch ``coordinator_epoch``, in format ``magic`` (2: Kafka's bytes)."""
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(f"a control batch needs a producer id and epoch, got {producer_id}/{producer_epoch}")
    if not -(2**31) <= coordinator_epoch < 2**31:
        raise ValueError(f"coordinator epoch {coordinator_epoch} is not an int32")
    key, value = marker_key(commit), marker_value(coordinator_epoch)
    if magic == KAFKA_FORMAT:
        from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder

        from .kafka_v2 import HUGE

        builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, producer_epoch, NO_SEQUENCE, HUGE)
        builder.append(0, timestamp_ms, key, value, [])
        out = bytearray(builder.build())
    elif magic == FORMAT_VERSION:
        out = bytearray(
            build_batch_columns(
                [value],
                [key],
                timestamps=[timestamp_ms],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=NO_SEQUENCE,
            )
        )
    else:
        raise ValueError(f"unknown batch format {magic}")
    attributes = _ATTRIBUTES.unpack_from(out, 21)[0] | CONTROL_BIT | TRANSACTIONAL_BIT
    _ATTRIBUTES.pack_into(out, 21, attributes)
    struct.pack_into(">qii", out, 0, base_offset, len(out) - 12, leader_epoch)
    _CRC.pack_into(out, 17, CRC_FUNCTIONS[magic](memoryview(out)[CRC_START:]))
    return bytes(out)


def _control_key_value(buf: Any, pos: int, h: BatchHeader) -> tuple[Any, Any]:
    if h.record_count != 1:
        raise CorruptRecordError(f"control batch at offset {h.base_offset} has {h.record_count} records, not 1")
    if h.magic == KAFKA_FORMAT:
        from aiokafka.record._crecords.default_records import DefaultRecordBatch

        try:
            rec = next(iter(DefaultRecordBatch(bytes(memoryview(buf)[pos : pos + h.size]))))
        except Exception as exc:
            raise CorruptRecordError(f"control batch at offset {h.base_offset}: cannot decode its record ({exc})") from None
        return rec.key, rec.value
    d = decode_columns(buf, pos, h)
    return (d.keys[0] if d.keys else None), d.values[0]


def read_control(buf: Any, pos: int = 0, h: BatchHeader | None = None) -> ControlRecord:
    """The marker in the control batch at ``pos`` (CORRUPT_MESSAGE if it is not one)."""
    h = read_header(buf, pos) if h is None else h
    if not h.attributes & CONTROL_BIT:
        raise CorruptRecordError(f"batch at offset {h.base_offset} is not a control batch")
    key, value = _control_key_value(buf, pos, h)
    if not isinstance(key, (bytes, bytearray)) or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(f"control batch at offset {h.base_offset}: key {key!r} is not a control record key")
    version, kind = CONTROL_KEY.unpack_from(key)
    if version < 0 or kind not in (0, 1):
        raise CorruptRecordError(f"control batch at offset {h.base_offset}: control record version {version} type {kind}")
    if not isinstance(value, (bytes, bytearray)) or len(value) < MARKER_VALUE.size:
        raise CorruptRecordError(f"control batch at offset {h.base_offset}: value {value!r} is not a transaction marker")
    _, coordinator_epoch = MARKER_VALUE.unpack_from(value)
    return ControlRecord(ControlType(kind), coordinator_epoch)


def control_to_kafka(buf: Any, pos: int, h: BatchHeader) -> bytes:
    """The kcoord (magic 1) control batch at ``pos`` as Kafka's control batch, same offsets."""
    marker = read_control(buf, pos, h)
    return build_control_batch(
        commit=marker.commit,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        coordinator_epoch=marker.coordinator_epoch,
        timestamp_ms=h.max_timestamp,
        magic=KAFKA_FORMAT,
        base_offset=h.base_offset,
        leader_epoch=h.leader_epoch,
    )


class AbortedFilter:
    """Which batches belong to aborted transactions, walking batches in offset order.

    ``aborted``: ``(producer_id, first_offset)`` of the aborted transactions that may have
    batches in the walk (what a read_committed fetch answers, or the aborted-transaction
    index). A producer is *aborting* from its transaction's first offset until its ABORT
    marker; its transactional batches meanwhile are dropped (Kafka's consumer, and the log
    cleaner removing aborted data). One walk per fetched chunk or cleaner pass."""

    __slots__ = ("_queue", "_aborting")

    def __init__(self, aborted: Any) -> None:
        self._queue = sorted((first, pid) for pid, first in aborted)
        self._aborting: set[int] = set()

    def drops(self, buf: Any, pos: int, h: BatchHeader) -> bool:
        """Whether the batch with header ``h`` at ``pos`` of ``buf`` is an aborted
        transaction's, or a marker (which no reader returns); call for every batch in order."""
        queue = self._queue
        while queue and queue[0][0] <= h.last_offset:
            self._aborting.add(queue.pop(0)[1])
        if h.attributes & CONTROL_BIT:
            if h.producer_id in self._aborting and not read_control(buf, pos, h).commit:
                self._aborting.discard(h.producer_id)
            return True
        return bool(h.attributes & TRANSACTIONAL_BIT) and h.producer_id in self._aborting


__all__ = [
    "AbortedFilter",
    "ControlRecord",
    "ControlType",
    "build_control_batch",
    "control_to_kafka",
    "is_control",
    "is_transactional",
    "read_control",
]
