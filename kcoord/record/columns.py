"""kcoord's own batch format (magic 1): the records as msgpack columns.

The payload is one msgpack array of columns ``[timestamp_deltas|None, keys|None, values,
headers|None]``, compressed per the attributes, under a zlib CRC-32. Columns pack and
unpack in C, which is what lets a Python producer and consumer move a million records a
second; a ``None`` column means "all default" (all keys null, all timestamps equal, no
headers).
"""

from __future__ import annotations

import time
import zlib
from typing import Iterable, Sequence

import msgpack

from ..protocol.errors import ErrorCode, KafkaError
from .compression import CODECS
from .decoded import DecodedBatch
from .header import (
    COMPRESSION_MASK,
    FORMAT_VERSION,
    HEAD,
    HEADER_SIZE,
    LENGTH_PREFIX,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TAIL,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptRecordError,
    invalid_record,
)

_NoneType = type(None)
_VALUE_TYPES = frozenset((bytes, _NoneType))


def now_ms() -> int:
    return int(time.time() * 1000)


def build_batch_columns(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes]]] | None = None,
    timestamps: Sequence[int] | None = None,
    *,
    timestamp_ms: int | None = None,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    base_offset: int = 0,
    leader_epoch: int = -1,
    transactional: bool = False,
) -> bytes:
    """Pack records given as columns into one batch. The fast path for bulk producers.

    ``keys``/``headers``/``timestamps`` may be None (all null / none / all ``timestamp_ms``).
    ``transactional``: a batch of the producer's ongoing transaction (bit 0x10).
    """
    n = len(values)
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    if keys is not None and len(keys) != n:
        raise ValueError(f"keys has {len(keys)} entries for {n} values")
    if headers is not None and len(headers) != n:
        raise ValueError(f"headers has {len(headers)} entries for {n} values")
    if timestamps is not None:
        if len(timestamps) != n:
            raise ValueError(f"timestamps has {len(timestamps)} entries for {n} values")
        first_ts = timestamps[0]
        max_ts = max(timestamps)
        deltas = [t - first_ts for t in timestamps]
        if not any(deltas):
            deltas = None
    else:
        first_ts = max_ts = now_ms() if timestamp_ms is None else timestamp_ms
        deltas = None
    if keys is not None and not any(k is not None for k in keys):
        keys = None
    if headers is not None and not any(headers):
        headers = None
    elif headers is not None:
        headers = [[list(h) for h in hs] if hs else None for hs in headers]
    try:
        payload = msgpack.packb([deltas, keys, values, headers], use_bin_type=True)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"record keys and values must be bytes or None, headers (str, bytes) pairs: {exc}") from None
    if compression:
        codec = CODECS.get(compression)
        if codec is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {compression} is not registered")
        payload = codec.compress(payload)
    tail = TAIL.pack(
        (compression & COMPRESSION_MASK) | (TRANSACTIONAL_BIT if transactional else 0),
        n - 1,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        n,
    )
    crc = zlib.crc32(payload, zlib.crc32(tail)) & 0xFFFFFFFF
    head = HEAD.pack(base_offset, HEADER_SIZE - LENGTH_PREFIX + len(payload), leader_epoch, FORMAT_VERSION, crc)
    return b"".join((head, tail, payload))


def build_batch(
    records: Iterable[tuple],
    *,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_ms: int | None = None,
    transactional: bool = False,
) -> bytes:
    """Pack ``(key, value[, headers[, timestamp_ms]])`` tuples into one batch."""
    keys: list = []
    values: list = []
    headers: list = []
    stamps: list = []
    default_ts = now_ms() if timestamp_ms is None else timestamp_ms
    for rec in records:
        n = len(rec)
        if n < 2 or n > 4:
            raise ValueError(f"a record is (key, value[, headers[, timestamp_ms]]), got {n} fields")
        keys.append(rec[0])
        values.append(rec[1])
        headers.append(rec[2] if n > 2 and rec[2] else None)
        stamps.append(rec[3] if n > 3 and rec[3] is not None else default_ts)
    return build_batch_columns(
        values,
        keys,
        headers,
        stamps,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
    )


def decode_columns(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> DecodedBatch:
    """The records of the kcoord batch at ``pos`` (header ``h``, framing checked already)."""
    payload = bytes(memoryview(buf)[pos + HEADER_SIZE : pos + h.size])
    if h.compression:
        codec = CODECS.get(h.compression)
        if codec is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"batch at offset {h.base_offset} uses unknown codec {h.compression}")
        try:
            payload = codec.decompress(payload)
        except Exception as exc:
            raise CorruptRecordError(f"batch at offset {h.base_offset}: cannot decompress ({exc})") from None
    try:
        deltas, keys, values, headers = msgpack.unpackb(payload, raw=False, use_list=True)
    except Exception as exc:
        raise CorruptRecordError(f"batch at offset {h.base_offset}: bad record payload ({exc})") from None
    if not isinstance(values, list) or len(values) != h.record_count:
        raise CorruptRecordError(f"batch at offset {h.base_offset}: {h.record_count} records in header, payload disagrees")
    # A short keys/timestamps/headers column would make records() silently drop records.
    for column in (deltas, keys, headers):
        if column is not None and (not isinstance(column, list) or len(column) != h.record_count):
            raise CorruptRecordError(f"batch at offset {h.base_offset}: payload columns have different lengths")
    timestamps = None
    if deltas is not None:
        first = h.first_timestamp
        timestamps = [first + d for d in deltas]
    if headers is not None:
        headers = [[(k, v) for k, v in hs] if hs else [] for hs in headers]
    return DecodedBatch(h, timestamps, keys, values, headers)


def validate_columns(buf: bytes | bytearray | memoryview, h: BatchHeader, require_keys: bool) -> None:
    """The deep checks of :func:`kcoord.record.validation.validate_produce_batch` for a kcoord
    batch: the payload decodes to the four columns of the header's record count, values and
    keys are bytes or null (keys everywhere with ``require_keys``), headers are lists, the
    timestamps reach the header's max. One decompression and one msgpack unpack (both in
    C) and a few C-level passes over the columns; no Python work per record."""
    attrs = h.attributes
    codec = attrs & COMPRESSION_MASK
    if codec and codec not in CODECS:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"batch uses compression codec {codec}, which this broker cannot read")
    payload = memoryview(buf)[HEADER_SIZE : h.size]
    if codec:
        try:
            payload = CODECS[codec].decompress(payload)
        except Exception as exc:
            raise CorruptRecordError(f"batch payload does not decompress with {CODECS[codec].name}: {exc}") from None
    try:
        columns = msgpack.unpackb(payload, raw=False, use_list=True)
    except Exception as exc:
        raise CorruptRecordError(f"batch payload is not a msgpack record array: {exc}") from None
    if type(columns) is not list or len(columns) != 4:
        raise CorruptRecordError("batch payload is not the 4 record columns [timestamps, keys, values, headers]")
    deltas, keys, values, headers = columns
    n = h.record_count
    if type(values) is not list or len(values) != n:
        raise CorruptRecordError(f"header says {n} records, the values column has {len(values) if type(values) is list else 'none'}")
    if not _VALUE_TYPES.issuperset(map(type, values)):
        raise invalid_record(h, "a record value is neither bytes nor null")
    if keys is not None:
        if type(keys) is not list or len(keys) != n:
            raise CorruptRecordError("the keys column does not have one entry per record")
        if not _VALUE_TYPES.issuperset(map(type, keys)):
            raise invalid_record(h, "a record key is neither bytes nor null")
        if require_keys and _NoneType in set(map(type, keys)):
            raise invalid_record(h, "a compacted topic takes only records with a key")
    elif require_keys:
        raise invalid_record(h, "a compacted topic takes only records with a key")
    if headers is not None:
        if type(headers) is not list or len(headers) != n:
            raise CorruptRecordError("the headers column does not have one entry per record")
        if not {list, _NoneType}.issuperset(map(type, headers)):
            raise invalid_record(h, "record headers must be lists of (key, value) pairs")
    if deltas is not None:
        if type(deltas) is not list or len(deltas) != n:
            raise CorruptRecordError("the timestamps column does not have one entry per record")
        if not {int}.issuperset(map(type, deltas)):
            raise invalid_record(h, "record timestamps must be integers")
        lo, hi = min(deltas), max(deltas)
        if h.first_timestamp + lo < 0:
            raise invalid_record(h, f"a record timestamp is negative ({h.first_timestamp + lo})")
        if not attrs & TIMESTAMP_TYPE_BIT and h.first_timestamp + hi != h.max_timestamp:
            raise invalid_record(h, f"max timestamp {h.max_timestamp} in the header, {h.first_timestamp + hi} in the records")
    elif not attrs & TIMESTAMP_TYPE_BIT and h.first_timestamp != h.max_timestamp:
        raise invalid_record(h, f"records share timestamp {h.first_timestamp}, but the header's max is {h.max_timestamp}")
