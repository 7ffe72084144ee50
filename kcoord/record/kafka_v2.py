"""Kafka's v2 batch format (magic 2): varint records under a CRC-32C, with aiokafka's compiled
(Cython) record codec.

A Kafka client's batch is stored as it came, so a Kafka consumer's fetch of it is a copy.
This module decodes such a batch into kcoord's columns (:func:`decode_kafka_batch`, for
kcoord's Consumer, Spark and Ray Data readers), checks one a producer sent
(:func:`validate_kafka_records`) and builds one (:func:`build_kafka_batch`,
:func:`set_offsets`: the log cleaner's rebuilds, conversion, tests and tools). The
per-record work runs in aiokafka's Cython ``DefaultRecordBatch`` /
``DefaultRecordBatchBuilder`` (varints, CRC-32C, compression through cramjam).

Importing it costs ~0.1 s (aiokafka), so the modules that dispatch on the magic import it
on first use; servers import it at start (:func:`kcoord.record.decoding.warm_up_codecs`).
"""

from __future__ import annotations

import struct
from typing import Any

from aiokafka.record._crecords.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from ..protocol.errors import KafkaError
from .crc import CRC_FUNCTIONS
from .decoded import DecodedBatch
from .header import (
    CONTROL_BIT,
    CRC_START,
    KAFKA_FORMAT,
    LENGTH_PREFIX,
    STAMP,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    CorruptRecordError,
    invalid_record,
)

_ATTRIBUTES = struct.Struct(">h")
_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
HUGE = 1 << 31  # the builder's size limit: none


def decode_kafka_batch(buf: Any, pos: int, h: BatchHeader) -> DecodedBatch:
    """The records of the Kafka v2 batch at ``pos`` (header ``h``, already validated)."""
    data = bytes(memoryview(buf)[pos : pos + h.size])
    if h.attributes & CONTROL_BIT:
        # a transaction marker: no user records (kcoord never writes them; be safe)
        return DecodedBatch(h, None, None, [], None)
    try:
        batch = DefaultRecordBatch(data)
        keys: list = []
        values: list = []
        stamps: list = []
        headers: list = []
        offsets: list = []
        ka, va, ta, ha, oa = keys.append, values.append, stamps.append, headers.append, offsets.append
        for rec in batch:
            oa(rec.offset)
            ka(rec.key)
            va(rec.value)
            ta(rec.timestamp)
            # None for no headers: an empty list per record kept thousands of objects
            # alive that Python's cyclic collector then walked every 700 records
            ha(rec.headers or None)
    except CorruptRecordError:
        raise
    except Exception as exc:  # bad varints, bad compression, ...
        raise CorruptRecordError(f"Kafka batch at offset {h.base_offset}: cannot decode records ({type(exc).__name__}: {exc})") from None
    n = len(values)
    if n != h.record_count:
        raise CorruptRecordError(f"Kafka batch at offset {h.base_offset}: {h.record_count} records in header, {n} in payload")
    if offsets and (offsets[0] != h.base_offset or offsets[-1] != h.base_offset + n - 1):
        raise CorruptRecordError(f"Kafka batch at offset {h.base_offset}: record offsets are not contiguous")
    if h.attributes & TIMESTAMP_TYPE_BIT:
        timestamps = None  # LogAppendTime: every record has the batch's max timestamp
        h = h._replace(first_timestamp=h.max_timestamp)
    else:
        timestamps = stamps
    if not any(k is not None for k in keys):
        keys = None  # type: ignore[assignment]
    hdrs = [hs or [] for hs in headers] if any(headers) else None
    return DecodedBatch(h, timestamps, keys, values, hdrs)


def validate_kafka_records(buf: bytes | bytearray | memoryview, h: BatchHeader, require_keys: bool) -> None:
    """The v2 records decode (aiokafka's Cython codec) to the header's count, offset deltas
    0, 1, 2, ..., timestamps that reach the header's max, keys where required.

    One streaming pass: each decoded record is dropped before the next is made. Keeping
    them all (a list of a batch's thousands of records) set off Python's cyclic garbage
    collector every 700 of them, which cost more than the decoding itself: a leader spent
    most of its time here (issue 16, confluent-kafka produce at 0.5x of kcoord's Producer).
    """
    create_time = not h.attributes & TIMESTAMP_TYPE_BIT
    expected = h.base_offset
    lo = hi = None
    try:
        for r in DefaultRecordBatch(bytes(buf[: h.size]) if type(buf) is not bytes or len(buf) != h.size else buf):
            if r.offset != expected:
                raise CorruptRecordError(f"Kafka batch: record {expected - h.base_offset} has offset delta {r.offset - h.base_offset}; deltas must be 0, 1, 2, ...")
            expected += 1
            if require_keys and r.key is None:
                raise invalid_record(h, "a compacted topic takes only records with a key")
            if create_time:
                t = r.timestamp
                if lo is None:
                    lo = hi = t
                elif t < lo:
                    lo = t
                elif t > hi:
                    hi = t
    except KafkaError:  # ours, from the checks above
        raise
    except Exception as exc:  # bad varints, bad compression, ...
        raise CorruptRecordError(f"Kafka batch: cannot decode its records ({type(exc).__name__}: {exc})") from None
    n = expected - h.base_offset
    if n != h.record_count:
        raise CorruptRecordError(f"Kafka batch: {h.record_count} records in the header, {n} in the payload")
    if create_time and n:
        if lo < 0:
            raise invalid_record(h, "a record timestamp is negative")
        if hi != h.max_timestamp:
            raise invalid_record(h, f"max timestamp {h.max_timestamp} in the header, {hi} in the records")


def build_kafka_batch(
    records: list[tuple[bytes | None, bytes | None, list, int]],
    *,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """A Kafka v2 batch of ``(key, value, headers, timestamp_ms)`` records (tests, tools)."""
    builder = DefaultRecordBatchBuilder(2, compression, int(transactional), producer_id, producer_epoch, base_sequence, HUGE)
    for i, (k, v, hs, ts) in enumerate(records):
        builder.append(i, ts, k, v, list(hs))
    return bytes(builder.build())


def set_offsets(batch: bytes, base_offset: int, leader_epoch: int, *, log_append_time: int | None = None) -> bytes:
    """``batch`` (a v2 batch) with its base offset and leader epoch set, as a replica stamps
    them; with ``log_append_time`` also the LogAppendTime bit and max timestamp (new CRC)."""
    out = bytearray(batch)
    stamp_into(out, base_offset, leader_epoch, log_append_time)
    return bytes(out)


def stamp_into(out: bytearray, base_offset: int, leader_epoch: int, log_append_time: int | None) -> None:
    """:func:`set_offsets` in place, on a v2 batch being built."""
    STAMP.pack_into(out, 0, base_offset, len(out) - LENGTH_PREFIX, leader_epoch)
    if log_append_time is not None:
        _ATTRIBUTES.pack_into(out, 21, _ATTRIBUTES.unpack_from(out, 21)[0] | TIMESTAMP_TYPE_BIT)
        _TIMESTAMP.pack_into(out, 35, log_append_time)
        _CRC.pack_into(out, 17, CRC_FUNCTIONS[KAFKA_FORMAT](memoryview(out)[CRC_START :]))
