"""kcoord/record: header layout, stamping, codecs, decoding, bad input."""

from __future__ import annotations

import struct
import zlib

import msgpack
import pytest

from kcoord import record as records
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.record import (
    CREATE_TIME,
    CRC_START,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    CorruptRecordError,
    available_codecs,
    batch_size_at,
    batches_info,
    build_batch,
    build_batch_columns,
    codec_id,
    decode_batch,
    iter_batches,
    iter_headers,
    iter_records,
    read_header,
    register_codec,
    set_log_append_time,
    stamp,
    stamp_prefix,
    validate_batch,
)


def sample(**kw) -> bytes:
    kw.setdefault("timestamps", [1000, 1005, 1002])
    return build_batch_columns([b"v0", None, b"v2"], [b"k0", b"k1", None], **kw)


def with_crc(buf: bytearray) -> bytes:
    struct.pack_into(">I", buf, 17, zlib.crc32(buf[CRC_START:]) & 0xFFFFFFFF)
    return bytes(buf)


def test_header_layout_byte_by_byte():
    data = sample(producer_id=77, producer_epoch=3, base_sequence=10, base_offset=500, leader_epoch=9)
    assert HEADER_SIZE == 61
    u = lambda fmt, pos: struct.unpack_from(fmt, data, pos)[0]  # noqa: E731
    assert u(">q", 0) == 500  # base offset
    assert u(">i", 8) == len(data) - 12  # batch length
    assert u(">i", 12) == 9  # leader epoch
    assert u(">b", 16) == records.FORMAT_VERSION
    assert u(">I", 17) == zlib.crc32(data[21:]) & 0xFFFFFFFF
    assert u(">h", 21) == 0  # attributes: no compression, create time
    assert u(">i", 23) == 2  # last offset delta
    assert u(">q", 27) == 1000 and u(">q", 35) == 1005  # first / max timestamp
    assert u(">q", 43) == 77 and u(">h", 51) == 3 and u(">i", 53) == 10
    assert u(">i", 57) == 3  # record count
    h = read_header(data)
    assert (h.base_offset, h.leader_epoch, h.record_count, h.first_timestamp, h.max_timestamp) == (500, 9, 3, 1000, 1005)
    assert (h.size, h.last_offset, h.next_offset) == (len(data), 502, 503)
    assert (h.compression, h.timestamp_type, h.last_sequence, h.has_producer_id) == (0, CREATE_TIME, 12, True)
    assert batch_size_at(data) == len(data)


def test_header_without_producer():
    h = read_header(sample())
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, h.has_producer_id) == (-1, -1, -1, -1, False)


def test_last_sequence_wraps_at_int32():
    h = read_header(build_batch_columns([b"a"] * 3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert h.last_sequence == 0


def test_stamping_keeps_the_crc_valid():
    data = sample()
    stamped = stamp(data, 123456789, 42)
    h = validate_batch(stamped)
    assert (h.base_offset, h.leader_epoch) == (123456789, 42)
    assert stamped[16:] == data[16:]
    assert stamp_prefix(data, 123456789, 42) + data[16:] == stamped
    assert len(stamp_prefix(data, 1, 2)) == 16
    assert [r.offset for r in decode_batch(stamped).records()] == [123456789, 123456790, 123456791]


def test_records_round_trip():
    data = build_batch(
        [(b"k", b"v", [("h1", b"x"), ("h2", b"")], 10), (None, b"w"), (b"", None, None, 7)],
        timestamp_ms=99,
    )
    recs = decode_batch(stamp(data, 40, 0)).records()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in recs] == [
        (40, 10, b"k", b"v", [("h1", b"x"), ("h2", b"")]),
        (41, 99, None, b"w", []),
        (42, 7, b"", None, []),
    ]
    h = read_header(data)
    assert (h.first_timestamp, h.max_timestamp) == (10, 99)


def test_all_default_columns_are_omitted_and_restored():
    data = build_batch_columns([b"a", b"b"], timestamp_ms=5)
    batch = decode_batch(data)
    assert batch.keys is None and batch.timestamps is None and batch.headers is None
    assert [(r.key, r.timestamp, tuple(r.headers)) for r in batch.records()] == [(None, 5, ()), (None, 5, ())]
    assert len(batch) == 2


def test_gzip_round_trip():
    gz = codec_id("gzip")
    values = [b"compress me please " * 20] * 50
    plain = build_batch_columns(values, timestamp_ms=1)
    packed = build_batch_columns(values, timestamp_ms=1, compression=gz)
    assert read_header(packed).compression == gz
    assert len(packed) < len(plain) / 5
    assert [r.value for r in decode_batch(packed).records()] == values
    assert packed[HEADER_SIZE : HEADER_SIZE + 2] == b"\x1f\x8b"  # a real gzip stream


def test_register_codec(monkeypatch):
    monkeypatch.setitem(records.CODECS, 7, None)  # undone: the codec is unregistered again
    monkeypatch.setitem(records.CODEC_IDS, "reverse", 7)
    register_codec(7, "reverse", lambda b: b[::-1], lambda b: b[::-1])
    assert codec_id("reverse") == 7 and "reverse" in available_codecs()
    data = build_batch_columns([b"abc", b"def"], compression=7, timestamp_ms=0)
    assert read_header(data).compression == 7
    assert [r.value for r in decode_batch(data).records()] == [b"abc", b"def"]
    for bad in (0, 8, -1):
        with pytest.raises(ValueError):
            register_codec(bad, "x", bytes, bytes)


def test_codec_names():
    assert codec_id(None) == 0 and codec_id("none") == 0 and codec_id("gzip") == 1
    assert available_codecs()[0] == "none" and "gzip" in available_codecs()
    with pytest.raises(KafkaError) as err:
        codec_id("brotli")
    assert err.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE and "gzip" in str(err.value)


def test_unknown_codec_in_a_batch(monkeypatch):
    data = bytearray(sample())
    struct.pack_into(">h", data, 21, 6)
    with pytest.raises(KafkaError) as err:
        decode_batch(with_crc(data))
    assert err.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(KafkaError) as err:
        build_batch_columns([b"a"], compression=6)
    assert err.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def test_set_log_append_time():
    data = stamp(sample(), 10, 1)
    out = set_log_append_time(data, 777)
    h = validate_batch(out)
    assert (h.timestamp_type, h.first_timestamp, h.max_timestamp, h.base_offset) == (LOG_APPEND_TIME, 777, 777, 10)
    assert out[HEADER_SIZE:] == data[HEADER_SIZE:]


def test_iteration_helpers():
    batches = [stamp(sample(), off, 0) for off in (0, 3, 6)]
    buf = b"".join(batches)
    assert [p for p, _ in iter_headers(buf)] == [0, len(batches[0]), 2 * len(batches[0])]
    assert [len(b) for b in iter_batches(buf)] == [3, 3, 3]
    assert [r.offset for r in iter_records(buf, from_offset=4)] == [4, 5, 6, 7, 8]
    assert batches_info(buf) == (0, 9, 3)
    assert batches_info(b"") == (-1, -1, 0)


# -- bad input -----------------------------------------------------------------------------


def test_build_rejects_bad_input():
    with pytest.raises(ValueError):
        build_batch_columns([])
    with pytest.raises(ValueError):
        build_batch_columns([b"a"], keys=[b"k", b"k"])
    with pytest.raises(ValueError):
        build_batch_columns([b"a"], headers=[[], []])
    with pytest.raises(ValueError):
        build_batch_columns([b"a"], timestamps=[1, 2])
    with pytest.raises(TypeError):
        build_batch_columns([object()])
    with pytest.raises(ValueError):
        build_batch([(b"only one field",)])
    with pytest.raises(ValueError):
        build_batch([(b"k", b"v", None, 1, "extra")])


def test_validate_rejects_bad_batches():
    data = sample()
    with pytest.raises(CorruptRecordError, match="truncated batch header"):
        validate_batch(data[:30])
    with pytest.raises(CorruptRecordError, match="does not fit"):
        validate_batch(data[:-1])
    bad = bytearray(data)
    bad[16] = 99
    with pytest.raises(CorruptRecordError, match="format version"):
        validate_batch(bytes(bad))
    bad = bytearray(data)
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(CorruptRecordError):
        validate_batch(bytes(bad))
    bad = bytearray(data)
    struct.pack_into(">i", bad, 57, 5)  # record count disagrees with last offset delta
    with pytest.raises(CorruptRecordError, match="record count"):
        validate_batch(with_crc(bad))
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC") as err:
        validate_batch(bytes(bad))
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    validate_batch(bytes(bad), check_crc=False)  # framing alone is fine
    with pytest.raises(CorruptRecordError):
        list(iter_headers(data + b"\x00" * 20))


def _with_payload(payload: bytes, count: int) -> bytes:
    head = bytearray(sample()[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, HEADER_SIZE - 12 + len(payload))
    struct.pack_into(">i", head, 23, count - 1)
    struct.pack_into(">i", head, 57, count)
    return with_crc(bytearray(bytes(head) + payload))


def test_decode_rejects_payloads_that_disagree_with_the_header():
    with pytest.raises(CorruptRecordError, match="bad record payload"):
        decode_batch(_with_payload(b"\xc1garbage", 1))
    with pytest.raises(CorruptRecordError, match="payload disagrees"):
        decode_batch(_with_payload(msgpack.packb([None, None, [b"a"], None]), 2))
    # a keys column shorter than the values would silently drop records
    with pytest.raises(CorruptRecordError, match="columns"):
        decode_batch(_with_payload(msgpack.packb([None, [b"k"], [b"a", b"b"], None]), 2))
    with pytest.raises(CorruptRecordError, match="columns"):
        decode_batch(_with_payload(msgpack.packb([[0], None, [b"a", b"b"], None]), 2))
    gz = bytearray(build_batch_columns([b"a"], compression=1, timestamp_ms=0))
    gz[HEADER_SIZE + 12] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="decompress"):
        decode_batch(with_crc(gz))


def test_the_old_import_paths_reach_the_same_objects():
    """kcoord.records and kcoord.kafka.batches stay importable for code and processes that
    use those names: they are the record package's objects, not copies."""
    import kcoord.records as old
    from kcoord.kafka import batches as old_kafka
    from kcoord.record import conversion, kafka_v2

    for name in records.__all__:
        assert getattr(old, name) is getattr(records, name), name
    assert old._CODECS is records.CODECS and old._TAIL is records.TAIL and old.ErrorCode is ErrorCode
    assert old_kafka.to_kafka is conversion.to_kafka and old_kafka.build_kafka_batch is kafka_v2.build_kafka_batch
    assert old_kafka.decode_kafka_batch is kafka_v2.decode_kafka_batch and old_kafka.set_offsets is kafka_v2.set_offsets


def test_log_append_time_with_a_parsed_header_gives_the_header_of_the_new_bytes():
    for batch in (sample(), _kafka_sample()):
        h = read_header(batch)
        out, new = records.with_log_append_time(batch, 5_000, h)
        assert out == set_log_append_time(batch, 5_000)
        assert new == read_header(out) and new.timestamp_type == LOG_APPEND_TIME
        validate_batch(out)  # the CRC was recomputed


def _kafka_sample() -> bytes:
    from kcoord.record.kafka_v2 import build_kafka_batch

    return build_kafka_batch([(b"k", b"v", [], 1000), (None, b"w", [], 1007)])


def test_validate_batch_with_a_parsed_header_checks_the_same():
    data = sample()
    assert validate_batch(data, header=read_header(data)) == read_header(data)
    bad = bytearray(data)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validate_batch(bytes(bad), header=read_header(bytes(bad)))
