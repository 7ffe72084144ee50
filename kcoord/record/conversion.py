"""A fetched buffer of batches as Kafka clients read it: every batch in Kafka's v2 format.

Magic-2 batches are passed through; kcoord (magic 1) batches are re-encoded as v2 batches
with the same offsets, leader epoch, producer id/epoch/sequence, timestamps (and timestamp
type), headers and compression codec (:func:`kcoord_to_kafka`); a magic-1 control batch
becomes Kafka's control batch (same marker, transactional and control bits).
"""

from __future__ import annotations

from typing import Any

from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder

from .decoding import decode_batch
from .header import CONTROL_BIT, FORMAT_VERSION, HEADER_SIZE, KAFKA_FORMAT, TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, BatchHeader, read_header
from .kafka_v2 import HUGE, stamp_into
from .rebuild import empty_batch


def kcoord_to_kafka(buf: Any, pos: int, h: BatchHeader) -> bytes:
    """Re-encode the kcoord (magic 1) batch at ``pos`` as a Kafka v2 batch, same offsets."""
    if h.attributes & CONTROL_BIT:  # a transaction marker: Kafka's control batch
        from .control import control_to_kafka

        return control_to_kafka(buf, pos, h)
    if not h.record_count:  # emptied by the cleaner: the same header is a Kafka empty batch
        return empty_batch(h._replace(magic=KAFKA_FORMAT, attributes=h.attributes & TIMESTAMP_TYPE_BIT))
    d = decode_batch(buf, pos, check_crc=False)
    compression = h.compression if h.compression in (1, 2, 3, 4) else 0
    builder = DefaultRecordBatchBuilder(2, compression, int(bool(h.attributes & TRANSACTIONAL_BIT)), h.producer_id, h.producer_epoch, h.base_sequence, HUGE)
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
    # LogAppendTime: the bit and the max timestamp, new CRC
    stamp_into(out, h.base_offset, h.leader_epoch, h.max_timestamp if h.attributes & TIMESTAMP_TYPE_BIT else None)
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
    while pos + HEADER_SIZE <= end:
        h = read_header(mv, pos)
        if pos + h.size > end:
            break
        if h.magic == FORMAT_VERSION:
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
