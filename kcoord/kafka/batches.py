"""Kafka v2 record batches <-> kcoord batches, with aiokafka's compiled (Cython) record codec.

A Kafka client's batch is stored as it came (magic 2, see :mod:`kcoord.records`), so a Kafka
consumer's fetch of it is a copy; only where the formats differ is a batch converted:

- :func:`decode_kafka_batch`: a magic-2 batch into kcoord's columns (:class:`DecodedBatch`),
  for kcoord's Consumer, Spark and Ray Data readers (``records.decode_batch`` calls it).
- :func:`to_kafka`: a fetched buffer of batches as Kafka clients read it; magic-2 batches
  are passed through, magic-1 batches are re-encoded as v2 batches with the same offsets,
  leader epoch, producer id/epoch/sequence, timestamps (and timestamp type), headers and
  compression codec.

Both run the per-record work in aiokafka's Cython ``DefaultRecordBatch`` /
``DefaultRecordBatchBuilder`` (varints, CRC-32C, compression through cramjam).
"""

from __future__ import annotations

import struct
from typing import Any

from aiokafka.record._crecords.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from .. import records as R

_EPOCH = struct.Struct(">qii")  # base_offset, batch_length, partition_leader_epoch
_ATTR = struct.Struct(">h")
_TS = struct.Struct(">q")
_CRC = struct.Struct(">I")
_HUGE = 1 << 31


def decode_kafka_batch(buf: Any, pos: int, h: R.BatchHeader) -> R.DecodedBatch:
    """The records of the Kafka v2 batch at ``pos`` (header ``h``, already validated)."""
    data = bytes(memoryview(buf)[pos : pos + h.size])
    if h.attributes & R.CONTROL_BIT:
        # a transaction marker: no user records (kcoord never writes them; be safe)
        return R.DecodedBatch(h, None, None, [], None)
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
    except R.CorruptRecordError:
        raise
    except Exception as exc:  # bad varints, bad compression, ...
        raise R.CorruptRecordError(f"Kafka batch at offset {h.base_offset}: cannot decode records ({type(exc).__name__}: {exc})") from None
    n = len(values)
    if n != h.record_count:
        raise R.CorruptRecordError(f"Kafka batch at offset {h.base_offset}: {h.record_count} records in header, {n} in payload")
    if offsets and (offsets[0] != h.base_offset or offsets[-1] != h.base_offset + n - 1):
        raise R.CorruptRecordError(f"Kafka batch at offset {h.base_offset}: record offsets are not contiguous")
    if h.attributes & R.TIMESTAMP_TYPE_BIT:
        timestamps = None  # LogAppendTime: every record has the batch's max timestamp
        h = h._replace(first_timestamp=h.max_timestamp)
    else:
        timestamps = stamps
    if not any(k is not None for k in keys):
        keys = None  # type: ignore[assignment]
    hdrs = [hs or [] for hs in headers] if any(headers) else None
    return R.DecodedBatch(h, timestamps, keys, values, hdrs)


def kcoord_to_kafka(buf: Any, pos: int, h: R.BatchHeader) -> bytes:
    """Re-encode the kcoord (magic 1) batch at ``pos`` as a Kafka v2 batch, same offsets."""
    if not h.record_count:  # emptied by the cleaner: the same header is a Kafka empty batch
        return R.empty_batch(h._replace(magic=R.KAFKA_FORMAT, attributes=h.attributes & R.TIMESTAMP_TYPE_BIT))
    d = R.decode_batch(buf, pos, check_crc=False)
    compression = h.compression if h.compression in (1, 2, 3, 4) else 0
    builder = DefaultRecordBatchBuilder(2, compression, 0, h.producer_id, h.producer_epoch, h.base_sequence, _HUGE)
    append = builder.append
    n = len(d.values)
    ts = d.timestamps if d.timestamps is not None else [h.first_timestamp] * n
    keys = d.keys if d.keys is not None else [None] * n
    hdrs = d.headers if d.headers is not None else [[]] * n
    values = d.values
    for i in range(n):
        hs = hdrs[i]
        append(i, ts[i], keys[i], values[i], hs if isinstance(hs, list) else list(hs))
    out = builder.build()
    _EPOCH.pack_into(out, 0, h.base_offset, len(out) - R.LENGTH_PREFIX, h.leader_epoch)
    if h.attributes & R.TIMESTAMP_TYPE_BIT:  # LogAppendTime: bit + max timestamp, new CRC
        attrs = _ATTR.unpack_from(out, 21)[0] | R.TIMESTAMP_TYPE_BIT
        _ATTR.pack_into(out, 21, attrs)
        _TS.pack_into(out, 35, h.max_timestamp)
        _CRC.pack_into(out, 17, R.CRC_FUNCTIONS[R.KAFKA_FORMAT](memoryview(out)[R.CRC_START :]))
    return bytes(out)


def to_kafka(data: bytes) -> bytes:
    """A buffer of concatenated batches as a Kafka client reads it: every batch magic 2.

    A trailing partial batch (a fetch cut at max bytes) is passed on as is, as Kafka does;
    clients skip it."""
    if not data:
        return data
    mv = memoryview(data)
    end = len(data)
    pos = 0
    parts: list = []
    plain_from = 0  # start of the current run of batches copied as they are
    converted = False
    while pos + R.HEADER_SIZE <= end:
        h = R.read_header(mv, pos)
        if pos + h.size > end:
            break
        if h.magic == R.FORMAT_VERSION:
            if plain_from < pos:
                parts.append(mv[plain_from:pos])
            parts.append(kcoord_to_kafka(mv, pos, h))
            converted = True
            plain_from = pos + h.size
        pos += h.size
    if not converted:
        return data
    if plain_from < end:
        parts.append(mv[plain_from:end])
    return b"".join(parts)


def build_kafka_batch(
    records: list[tuple[bytes | None, bytes | None, list, int]],
    *,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A Kafka v2 batch of ``(key, value, headers, timestamp_ms)`` records (tests, tools)."""
    builder = DefaultRecordBatchBuilder(2, compression, 0, producer_id, producer_epoch, base_sequence, _HUGE)
    for i, (k, v, hs, ts) in enumerate(records):
        builder.append(i, ts, k, v, list(hs))
    return bytes(builder.build())


def set_offsets(batch: bytes, base_offset: int, leader_epoch: int, *, log_append_time: int | None = None) -> bytes:
    """``batch`` (a v2 batch) with its base offset and leader epoch set, as a replica stamps
    them; with ``log_append_time`` also the LogAppendTime bit and max timestamp (new CRC)."""
    out = bytearray(batch)
    _EPOCH.pack_into(out, 0, base_offset, len(out) - R.LENGTH_PREFIX, leader_epoch)
    if log_append_time is not None:
        _ATTR.pack_into(out, 21, _ATTR.unpack_from(out, 21)[0] | R.TIMESTAMP_TYPE_BIT)
        _TS.pack_into(out, 35, log_append_time)
        _CRC.pack_into(out, 17, R.CRC_FUNCTIONS[R.KAFKA_FORMAT](memoryview(out)[R.CRC_START :]))
    return bytes(out)
