"""What a leader writes into a producer's batch: base offset and leader epoch (outside the
CRC, so the rest is copied unchanged) and, for LogAppendTime topics, its own clock."""

from __future__ import annotations

import struct

from .crc import CRC_FUNCTIONS, crc32
from .header import CRC_START, HEADER_SIZE, KAFKA_FORMAT, PREFIX, STAMP, TIMESTAMP_TYPE_BIT, BatchHeader, read_header


def stamp(batch: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """Return ``batch`` with base offset and leader epoch set (the CRC stays valid)."""
    mv = memoryview(batch)
    return b"".join((STAMP.pack(base_offset, PREFIX.unpack_from(mv, 0)[1], leader_epoch), mv[16:]))


def stamp_prefix(batch: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """The first 16 bytes of ``batch`` as stamped; write these then ``batch[16:]`` to avoid
    copying a large batch."""
    return STAMP.pack(base_offset, PREFIX.unpack_from(batch, 0)[1], leader_epoch)


def set_log_append_time(batch: bytes, timestamp_ms: int) -> bytes:
    """For topics with message.timestamp.type=LogAppendTime: rewrite the batch timestamps
    and the timestamp-type bit, recomputing the CRC (header-only change).

    A Kafka-format batch gets what a Kafka broker does to it: the bit and ``max_timestamp``
    (readers then give every record that time); a kcoord batch gets both timestamps."""
    return with_log_append_time(batch, timestamp_ms)[0]


def with_log_append_time(batch: bytes, timestamp_ms: int, header: BatchHeader | None = None) -> tuple[bytes, BatchHeader]:
    """:func:`set_log_append_time`, given the batch's ``header`` if it is parsed already;
    returns the new batch and its header."""
    h = read_header(batch) if header is None else header
    head = bytearray(batch[:HEADER_SIZE])
    attributes = h.attributes | TIMESTAMP_TYPE_BIT
    struct.pack_into(">h", head, 21, attributes)
    if h.magic == KAFKA_FORMAT:
        struct.pack_into(">q", head, 35, timestamp_ms)
        first = h.first_timestamp
    else:
        struct.pack_into(">qq", head, 27, timestamp_ms, timestamp_ms)
        first = timestamp_ms
    out = bytearray(head)
    out += memoryview(batch)[HEADER_SIZE:]
    crc = CRC_FUNCTIONS.get(h.magic, crc32)(memoryview(out)[CRC_START:])
    struct.pack_into(">I", out, 17, crc)
    return bytes(out), h._replace(crc=crc, attributes=attributes, first_timestamp=first, max_timestamp=timestamp_ms)
