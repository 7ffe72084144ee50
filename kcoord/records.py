"""Record batches: a fixed binary header, then the records packed once by the producer.

Layout (big-endian, 61-byte header, field order as in Kafka's v2 batch so Kafka engineers
recognise it)::

    0  base_offset        int64   stamped by the leader on append
    8  batch_length       int32   bytes after this field (total size = 12 + batch_length)
    12 leader_epoch       int32   stamped by the leader on append
    16 magic              int8    payload format: 1 kcoord columns, 2 Kafka v2 records
    17 crc                uint32  CRC of bytes [21, end): zlib CRC-32 (magic 1), CRC-32C (magic 2)
    21 attributes         int16   bits 0-2 compression codec, bit 3 timestamp type
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

The payload is kcoord's own (not Kafka's varint records): one msgpack array of columns
``[timestamp_deltas|None, keys|None, values, headers|None]``. Columns pack and unpack in C,
which is what lets a Python producer and consumer move a million records a second; a
``None`` column means "all default" (all keys null, all timestamps equal, no headers).

``magic`` says which payload a batch carries. Batches produced by Kafka clients (through
:mod:`kcoord.kafka`) are stored as they came: magic 2, Kafka's v2 varint records with a
CRC-32C, the same header. The log, replication and idempotence read only the header, so
they treat both alike; :func:`decode_batch` decodes either into the same columns, and
:mod:`kcoord.kafka.batches` converts magic 1 to magic 2 for Kafka consumers.
"""

from __future__ import annotations

import struct
import time
import zlib
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

import msgpack

from .protocol.errors import ErrorCode, KafkaError
from .protocol import errors as _errors

FORMAT_VERSION = 1  # kcoord's own payload (msgpack columns), zlib CRC-32
KAFKA_FORMAT = 2  # Kafka's v2 record batch payload (varint records), CRC-32C
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LENGTH_PREFIX = 12  # base_offset + batch_length: what you read to learn a batch's size
_PREFIX = struct.Struct(">qi")
_STAMP = struct.Struct(">qii")  # base_offset, batch_length, leader_epoch
_HEAD = struct.Struct(">qiibI")  # bytes [0, 21): the part outside the CRC, plus the CRC
_TAIL = struct.Struct(">hiqqqhii")  # bytes [21, 61): header fields covered by the CRC
CRC_START = 21
assert HEADER_SIZE == 61

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10  # Kafka v2 only; kcoord has no transactions and refuses them
CONTROL_BIT = 0x20
CREATE_TIME = 0
LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


class CorruptRecordError(_errors.CorruptRecordError):  # type: ignore[name-defined]
    """A batch whose bytes do not check out (bad CRC, bad length, bad payload):
    ``CorruptRecordError(message)``, code CORRUPT_MESSAGE."""


# -- compression codecs -------------------------------------------------------------------


@dataclass(frozen=True)
class Codec:
    id: int
    name: str
    compress: Callable[[bytes], bytes]
    decompress: Callable[[bytes], bytes]


_CODECS: dict[int, Codec] = {}
_CODEC_IDS: dict[str, int] = {}


def register_codec(codec_id: int, name: str, compress: Callable[[bytes], bytes], decompress: Callable[[bytes], bytes]) -> None:
    """Add a compression codec (ids 1-7; Kafka uses 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
    if not 0 < codec_id <= COMPRESSION_MASK:
        raise ValueError(f"codec id must be in 1..{COMPRESSION_MASK}, got {codec_id}")
    _CODECS[codec_id] = Codec(codec_id, name, compress, decompress)
    _CODEC_IDS[name] = codec_id


def codec_id(name: str | None) -> int:
    """Compression id for a ``compression_type`` name (None or "none" -> 0)."""
    if name is None or name == "none":
        return 0
    try:
        return _CODEC_IDS[name]
    except KeyError:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"compression_type {name!r} is not available; known: {sorted(['none', *_CODEC_IDS])}",
        ) from None


def available_codecs() -> list[str]:
    return ["none", *sorted(_CODEC_IDS)]


# gzip container via zlib (wbits=31): same format as Kafka's gzip codec, C speed.
register_codec(1, "gzip", lambda b: zlib.compress(b, 1, 31), lambda b: zlib.decompress(b, 47))
try:  # snappy, lz4 (frame format, as Kafka) and zstd from one library: cramjam
    import cramjam as _cj  # type: ignore

    register_codec(2, "snappy", lambda b: bytes(_cj.snappy.compress_raw(b)), lambda b: bytes(_cj.snappy.decompress_raw(b)))
    register_codec(3, "lz4", lambda b: bytes(_cj.lz4.compress(b)), lambda b: bytes(_cj.lz4.decompress(b)))
    register_codec(4, "zstd", lambda b: bytes(_cj.zstd.compress(b)), lambda b: bytes(_cj.zstd.decompress(b)))
except ImportError:  # pragma: no cover - cramjam is a pinned dependency
    pass


# -- header -------------------------------------------------------------------------------


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
    _, length = _PREFIX.unpack_from(buf, pos)
    return LENGTH_PREFIX + length


def _crc32(data: Any) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


try:
    from crc32c import crc32c as _crc32c  # hardware CRC-32C (SSE4.2/ARMv8), C fallback
except ImportError:  # pragma: no cover - crc32c is a pinned dependency
    _crc32c = None


def _crc32c_or_fail(data: Any) -> int:
    if _crc32c is None:
        raise CorruptRecordError("Kafka-format batch, but the crc32c package is not installed")
    return _crc32c(data)


# magic -> the CRC function of that payload format
CRC_FUNCTIONS: dict[int, Callable[[Any], int]] = {FORMAT_VERSION: _crc32, KAFKA_FORMAT: _crc32c_or_fail}


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """The CRC of the batch at ``pos``, with the function its magic byte names."""
    mv = memoryview(buf)
    fn = CRC_FUNCTIONS.get(mv[pos + 16] if len(mv) > pos + 16 else FORMAT_VERSION, _crc32)
    return fn(mv[pos + CRC_START : pos + size])


def validate_batch(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True) -> BatchHeader:
    """Check one batch's framing (and CRC): raises :class:`CorruptRecordError`."""
    h = read_header(buf, pos)
    if h.magic not in CRC_FUNCTIONS:
        raise CorruptRecordError(f"batch at byte {pos}: unknown format version {h.magic}")
    if h.batch_length < HEADER_SIZE - LENGTH_PREFIX or pos + h.size > len(buf):
        raise CorruptRecordError(f"batch at byte {pos}: length {h.batch_length} does not fit the {len(buf) - pos} bytes left")
    # record count 0: an emptied batch the log cleaner keeps for its producer (empty_batch)
    if h.record_count < 0 or h.last_offset_delta < 0 or (h.record_count and h.last_offset_delta != h.record_count - 1):
        raise CorruptRecordError(f"batch at byte {pos}: record count {h.record_count} and last offset delta {h.last_offset_delta} disagree")
    if check_crc and CRC_FUNCTIONS[h.magic](memoryview(buf)[pos + CRC_START : pos + h.size]) != h.crc:
        raise CorruptRecordError(f"batch at offset {h.base_offset} (byte {pos}): CRC mismatch")
    return h


def iter_headers(buf: bytes | bytearray | memoryview, *, check_crc: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch in a buffer of concatenated batches.

    Raises :class:`CorruptRecordError` at the first batch that does not check out.
    """
    pos, end = 0, len(buf)
    while pos < end:
        h = validate_batch(buf, pos, check_crc=check_crc)
        yield pos, h
        pos += h.size


def stamp(batch: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """Return ``batch`` with base offset and leader epoch set (the CRC stays valid)."""
    mv = memoryview(batch)
    return b"".join((_STAMP.pack(base_offset, _PREFIX.unpack_from(mv, 0)[1], leader_epoch), mv[16:]))


def stamp_prefix(batch: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """The first 16 bytes of ``batch`` as stamped; write these then ``batch[16:]`` to avoid
    copying a large batch."""
    return _STAMP.pack(base_offset, _PREFIX.unpack_from(batch, 0)[1], leader_epoch)


def set_log_append_time(batch: bytes, timestamp_ms: int) -> bytes:
    """For topics with message.timestamp.type=LogAppendTime: rewrite the batch timestamps
    and the timestamp-type bit, recomputing the CRC (header-only change).

    A Kafka-format batch gets what a Kafka broker does to it: the bit and ``max_timestamp``
    (readers then give every record that time); a kcoord batch gets both timestamps."""
    h = read_header(batch)
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">h", head, 21, h.attributes | TIMESTAMP_TYPE_BIT)
    if h.magic == KAFKA_FORMAT:
        struct.pack_into(">q", head, 35, timestamp_ms)
    else:
        struct.pack_into(">qq", head, 27, timestamp_ms, timestamp_ms)
    out = bytearray(head)
    out += memoryview(batch)[HEADER_SIZE:]
    struct.pack_into(">I", out, 17, CRC_FUNCTIONS.get(h.magic, _crc32)(memoryview(out)[CRC_START:]))
    return bytes(out)


# -- building -----------------------------------------------------------------------------


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
) -> bytes:
    """Pack records given as columns into one batch. The fast path for bulk producers.

    ``keys``/``headers``/``timestamps`` may be None (all null / none / all ``timestamp_ms``).
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
        codec = _CODECS.get(compression)
        if codec is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {compression} is not registered")
        payload = codec.compress(payload)
    tail = _TAIL.pack(
        compression & COMPRESSION_MASK,
        n - 1,
        first_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        n,
    )
    crc = zlib.crc32(payload, zlib.crc32(tail)) & 0xFFFFFFFF
    head = _HEAD.pack(base_offset, HEADER_SIZE - LENGTH_PREFIX + len(payload), leader_epoch, FORMAT_VERSION, crc)
    return b"".join((head, tail, payload))


def build_batch(
    records: Iterable[tuple],
    *,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    timestamp_ms: int | None = None,
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
    )


# -- reading ------------------------------------------------------------------------------


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


@dataclass(frozen=True)
class DecodedBatch:
    """One batch's header and its records as columns (cheap to turn into rows)."""

    header: BatchHeader
    timestamps: list[int] | None  # None: all records carry header.first_timestamp
    keys: list[bytes | None] | None
    values: list[bytes | None]
    headers: list[Any] | None

    def __len__(self) -> int:
        return len(self.values)

    def records(self) -> list[Record]:
        h = self.header
        n = len(self.values)
        offsets = range(h.base_offset, h.base_offset + n)
        ts = self.timestamps if self.timestamps is not None else repeat(h.first_timestamp)
        keys = self.keys if self.keys is not None else repeat(None)
        hdrs = self.headers if self.headers is not None else repeat(_NO_HEADERS)
        # tuple.__new__ through partial/zip/map builds the named tuples without running
        # any Python bytecode per record: ~3x faster than calling Record(...).
        return list(map(_new_record, zip(offsets, ts, keys, self.values, hdrs)))


_NO_HEADERS: tuple = ()  # shared, so immutable
_new_record = partial(tuple.__new__, Record)


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0, *, check_crc: bool = True) -> DecodedBatch:
    """Decode the records of the batch at ``pos`` (consumer side only)."""
    h = validate_batch(buf, pos, check_crc=check_crc)
    if not h.record_count:
        return DecodedBatch(h, None, None, [], None)  # an emptied batch (empty_batch)
    if h.magic == KAFKA_FORMAT:
        from .kafka.batches import decode_kafka_batch  # compiled v2 record codec

        return decode_kafka_batch(buf, pos, h)
    payload = bytes(memoryview(buf)[pos + HEADER_SIZE : pos + h.size])
    if h.compression:
        codec = _CODECS.get(h.compression)
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


def iter_batches(buf: bytes | bytearray | memoryview, *, check_crc: bool = True) -> Iterator[DecodedBatch]:
    for pos, _ in iter_headers(buf, check_crc=False):
        yield decode_batch(buf, pos, check_crc=check_crc)


def iter_records(buf: bytes | bytearray | memoryview, *, from_offset: int = 0, check_crc: bool = True) -> Iterator[Record]:
    """Every record in a buffer of batches, skipping offsets below ``from_offset``."""
    for batch in iter_batches(buf, check_crc=check_crc):
        if batch.header.next_offset <= from_offset:
            continue
        for rec in batch.records():
            if rec.offset >= from_offset:
                yield rec


def batches_info(buf: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(first base offset, next offset after the last batch, batch count) of a buffer."""
    first = -1
    nxt = -1
    count = 0
    for _, h in iter_headers(buf):
        if first < 0:
            first = h.base_offset
        nxt = h.next_offset
        count += 1
    return first, nxt, count


# -- validation of what a leader stores -----------------------------------------------------

_NoneType = type(None)
_VALUE_TYPES = frozenset((bytes, _NoneType))
KAFKA_CODECS = (0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd: what every node can read


def _invalid(h: BatchHeader, message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_RECORD, f"batch of {h.record_count} records: {message}")


def validate_produce_batch(
    buf: bytes | bytearray | memoryview,
    h: BatchHeader,
    *,
    require_keys: bool = False,
) -> None:
    """Deep checks of a producer's batch before the leader appends it (framing and CRC are
    checked already, by :func:`validate_batch`): the payload decodes to the columns and
    record count the header claims, the codec is one every node reads, the timestamps lie
    where the header says, and (for a compacted topic, ``require_keys``) every record has
    a key. Raises CORRUPT_MESSAGE (2), UNSUPPORTED_COMPRESSION_TYPE (76) or INVALID_RECORD
    (87); nothing is changed.

    Kept cheap: one decompression and one msgpack unpack (both in C) and a few C-level
    passes over the columns; no Python work per record.
    """
    attrs = h.attributes
    if attrs & (TRANSACTIONAL_BIT | CONTROL_BIT):
        raise _invalid(h, "transactional and control batches are not supported")
    if h.first_timestamp < -1 or h.max_timestamp < -1:
        raise _invalid(h, f"negative timestamps ({h.first_timestamp}, {h.max_timestamp})")
    codec = attrs & COMPRESSION_MASK
    if h.magic == KAFKA_FORMAT:
        if codec not in KAFKA_CODECS:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"Kafka batch uses unknown compression codec {codec}")
        _validate_kafka_payload(buf, h, require_keys)
        return
    if codec and codec not in _CODECS:
        raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"batch uses compression codec {codec}, which this broker cannot read")
    payload = memoryview(buf)[HEADER_SIZE : h.size]
    if codec:
        try:
            payload = _CODECS[codec].decompress(payload)
        except Exception as exc:
            raise CorruptRecordError(f"batch payload does not decompress with {_CODECS[codec].name}: {exc}") from None
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
        raise _invalid(h, "a record value is neither bytes nor null")
    if keys is not None:
        if type(keys) is not list or len(keys) != n:
            raise CorruptRecordError("the keys column does not have one entry per record")
        if not _VALUE_TYPES.issuperset(map(type, keys)):
            raise _invalid(h, "a record key is neither bytes nor null")
        if require_keys and _NoneType in set(map(type, keys)):
            raise _invalid(h, "a compacted topic takes only records with a key")
    elif require_keys:
        raise _invalid(h, "a compacted topic takes only records with a key")
    if headers is not None:
        if type(headers) is not list or len(headers) != n:
            raise CorruptRecordError("the headers column does not have one entry per record")
        if not {list, _NoneType}.issuperset(map(type, headers)):
            raise _invalid(h, "record headers must be lists of (key, value) pairs")
    if deltas is not None:
        if type(deltas) is not list or len(deltas) != n:
            raise CorruptRecordError("the timestamps column does not have one entry per record")
        if not {int}.issuperset(map(type, deltas)):
            raise _invalid(h, "record timestamps must be integers")
        lo, hi = min(deltas), max(deltas)
        if h.first_timestamp + lo < 0:
            raise _invalid(h, f"a record timestamp is negative ({h.first_timestamp + lo})")
        if not attrs & TIMESTAMP_TYPE_BIT and h.first_timestamp + hi != h.max_timestamp:
            raise _invalid(h, f"max timestamp {h.max_timestamp} in the header, {h.first_timestamp + hi} in the records")
    elif not attrs & TIMESTAMP_TYPE_BIT and h.first_timestamp != h.max_timestamp:
        raise _invalid(h, f"records share timestamp {h.first_timestamp}, but the header's max is {h.max_timestamp}")


def warm_up_codecs() -> None:
    """Import the Kafka v2 record codecs that are otherwise imported on first use (clients
    that never see a Kafka batch skip their cost). Servers call this at start: a lazy
    import inside the first request runs on the event loop that also answers heartbeats."""
    from aiokafka.record._crecords.default_records import DefaultRecordBatch  # noqa: F401

    from .kafka.batches import build_kafka_batch, decode_kafka_batch  # noqa: F401


def _validate_kafka_payload(buf: bytes | bytearray | memoryview, h: BatchHeader, require_keys: bool) -> None:
    """The v2 records decode (aiokafka's Cython codec) to the header's count, offset deltas
    0, 1, 2, ..., timestamps that reach the header's max, keys where required.

    One streaming pass: each decoded record is dropped before the next is made. Keeping
    them all (a list of a batch's thousands of records) set off Python's cyclic garbage
    collector every 700 of them, which cost more than the decoding itself: a leader spent
    most of its time here (issue 16, confluent-kafka produce at 0.5x of kcoord's Producer).
    """
    from aiokafka.record._crecords.default_records import DefaultRecordBatch

    create_time = not h.attributes & TIMESTAMP_TYPE_BIT
    expected = h.base_offset
    lo = hi = None
    try:
        for r in DefaultRecordBatch(bytes(buf[: h.size]) if type(buf) is not bytes or len(buf) != h.size else buf):
            if r.offset != expected:
                raise CorruptRecordError(f"Kafka batch: record {expected - h.base_offset} has offset delta {r.offset - h.base_offset}; deltas must be 0, 1, 2, ...")
            expected += 1
            if require_keys and r.key is None:
                raise _invalid(h, "a compacted topic takes only records with a key")
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
            raise _invalid(h, "a record timestamp is negative")
        if hi != h.max_timestamp:
            raise _invalid(h, f"max timestamp {h.max_timestamp} in the header, {hi} in the records")


# -- rewriting batches (the log cleaner) ------------------------------------------------------


def empty_batch(h: BatchHeader, skip: int = 0) -> bytes:
    """A batch without records standing for offsets ``[h.base_offset + skip, h.last_offset]``
    of the batch with header ``h``: same format, leader epoch, timestamps, timestamp type and
    producer id/epoch, base sequence that of offset ``h.base_offset + skip``. What the log
    cleaner leaves where a producer's last batch loses its records, so that the producer's
    epoch and last sequence survive (Kafka's empty batches, DefaultRecordBatch.writeEmptyHeader;
    a Kafka v2 batch of this form is exactly Kafka's)."""
    if not 0 <= skip <= h.last_offset_delta:
        raise ValueError(f"skip {skip} outside the batch's {h.last_offset_delta + 1} offsets")
    seq = h.base_sequence if h.base_sequence < 0 else (h.base_sequence + skip) & 0x7FFFFFFF
    tail = _TAIL.pack(
        h.attributes & ~COMPRESSION_MASK,
        h.last_offset_delta - skip,
        h.first_timestamp,
        h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        seq,
        0,
    )
    crc = CRC_FUNCTIONS[h.magic](tail) & 0xFFFFFFFF
    return _HEAD.pack(h.base_offset + skip, HEADER_SIZE - LENGTH_PREFIX, h.leader_epoch, h.magic, crc) + tail


def rebuild_batch(d: DecodedBatch, keep: Sequence[int]) -> bytes:
    """A batch of the records of ``d`` at positions ``keep`` (ascending and consecutive):
    same payload format, codec, leader epoch, producer id/epoch and timestamp type; base
    offset, first/max timestamps and base sequence those of the kept records. Offsets never
    change: the new batch's base offset is the first kept record's."""
    h = d.header
    lo, hi = keep[0], keep[-1] + 1
    if hi - lo != len(keep):
        raise ValueError("rebuild_batch keeps one consecutive run of records")
    n = len(d.values)
    stamps = d.timestamps if d.timestamps is not None else [h.first_timestamp] * n
    keys = d.keys if d.keys is not None else [None] * n
    hdrs = d.headers if d.headers is not None else [[]] * n
    seq = h.base_sequence if h.base_sequence < 0 else (h.base_sequence + lo) & 0x7FFFFFFF
    log_append = bool(h.attributes & TIMESTAMP_TYPE_BIT)
    if h.magic == KAFKA_FORMAT:
        from .kafka.batches import build_kafka_batch, set_offsets

        recs = [(keys[i], d.values[i], list(hdrs[i] or []), stamps[i]) for i in range(lo, hi)]
        out = build_kafka_batch(
            recs,
            compression=h.compression if h.compression in KAFKA_CODECS else 0,
            producer_id=h.producer_id,
            producer_epoch=h.producer_epoch,
            base_sequence=seq,
        )
        return set_offsets(out, h.base_offset + lo, h.leader_epoch, log_append_time=h.max_timestamp if log_append else None)
    out = build_batch_columns(
        d.values[lo:hi],
        keys[lo:hi],
        [list(x) if x else None for x in hdrs[lo:hi]],
        stamps[lo:hi],
        compression=h.compression if h.compression in _CODECS else 0,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=seq,
        base_offset=h.base_offset + lo,
        leader_epoch=h.leader_epoch,
    )
    if log_append:
        out = set_log_append_time(out, h.max_timestamp)
    return out
