"""The record batch header: its layout, parsing, and the errors a bad batch raises.

Layout (big-endian, 61-byte header, field order as in Kafka's v2 batch so Kafka engineers
recognise it)::

    0  base_offset        int64   stamped by the leader on append
    8  batch_length       int32   bytes after this field (total size = 12 + batch_length)
    12 leader_epoch       int32   stamped by the leader on append
    16 magic              int8    payload format: 1 kcoord columns, 2 Kafka v2 records
    17 crc                uint32  CRC of bytes [21, end): zlib CRC-32 (magic 1), CRC-32C (magic 2)
    21 attributes         int16   bits 0-2 compression codec, bit 3 timestamp type,
                                  bit 4 transactional, bit 5 control (a transaction marker)
    23 last_offset_delta  int32   record_count - 1
    27 first_timestamp    int64   ms
    35 max_timestamp      int64   ms
    43 producer_id        int64   -1 without idempotence
    51 producer_epoch     int16
    53 base_sequence      int32   -1 without idempotence
    57 record_count       int32
    61 payload            records, compressed per attributes

The CRC starts after the leader-stamped fields, so a replica stamps ``base_offset`` and
``leader_epoch`` and otherwise copies the producer's bytes; no replica ever decodes a record.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from ..protocol import errors as _errors
from ..protocol.errors import ErrorCode, KafkaError

FORMAT_VERSION = 1  # kcoord's own payload (msgpack columns), zlib CRC-32
KAFKA_FORMAT = 2  # Kafka's v2 record batch payload (varint records), CRC-32C
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LENGTH_PREFIX = 12  # base_offset + batch_length: what you read to learn a batch's size
PREFIX = struct.Struct(">qi")  # base_offset, batch_length
STAMP = struct.Struct(">qii")  # base_offset, batch_length, leader_epoch
HEAD = struct.Struct(">qiibI")  # bytes [0, 21): the part outside the CRC, plus the CRC
TAIL = struct.Struct(">hiqqqhii")  # bytes [21, 61): header fields covered by the CRC
MAGIC_AT = 16  # byte position of the magic
CRC_START = 21
assert HEADER_SIZE == 61

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10  # a batch of a transaction (both formats)
CONTROL_BIT = 0x20  # a transaction marker (control.py), always also transactional
CREATE_TIME = 0
LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


class CorruptRecordError(_errors.CorruptRecordError):  # type: ignore[name-defined]
    """A batch whose bytes do not check out (bad CRC, bad length, bad payload):
    ``CorruptRecordError(message)``, code CORRUPT_MESSAGE."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return LENGTH_PREFIX + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_BIT else CREATE_TIME

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos`` without touching the records (or the CRC)."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header at byte {pos}: {len(buf) - pos} bytes left")
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def batch_size_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """Total size of the batch at ``pos`` from its length prefix alone."""
    _, length = PREFIX.unpack_from(buf, pos)
    return LENGTH_PREFIX + length


def invalid_record(h: BatchHeader, message: str) -> KafkaError:
    """INVALID_RECORD (87) for the batch with header ``h``: well framed, but holding records
    a broker must refuse."""
    return KafkaError(ErrorCode.INVALID_RECORD, f"batch of {h.record_count} records: {message}")
