"""What a leader refuses to store (record.validate_produce_batch through Log.append_as_leader)."""

from __future__ import annotations

import struct
import zlib

import msgpack
import pytest

from kcoord import records as R
from kcoord.kafka.batches import build_kafka_batch
from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol.errors import ErrorCode, KafkaError

T = 1_700_000_000_000


def forge(payload: bytes, *, n: int, attributes: int = 0, first_ts: int = T, max_ts: int = T, crc_ok: bool = True) -> bytes:
    """A magic-1 batch around an arbitrary payload, with a valid CRC."""
    tail = struct.pack(">hiqqqhii", attributes, n - 1, first_ts, max_ts, -1, -1, -1, n)
    crc = zlib.crc32(payload, zlib.crc32(tail)) & 0xFFFFFFFF
    if not crc_ok:
        crc ^= 1
    head = struct.pack(">qiibI", 0, R.HEADER_SIZE - R.LENGTH_PREFIX + len(payload), -1, 1, crc)
    return head + tail + payload


def columns(*cols) -> bytes:
    return msgpack.packb(list(cols), use_bin_type=True)


CASES = {
    "not msgpack": (forge(b"\xc1\xc1garbage", n=1), ErrorCode.CORRUPT_MESSAGE),
    "wrong column count": (forge(columns(None, None, [b"a"]), n=1), ErrorCode.CORRUPT_MESSAGE),
    "fewer values than the header says": (forge(columns(None, None, [b"a"], None), n=2), ErrorCode.CORRUPT_MESSAGE),
    "more values than the header says": (forge(columns(None, None, [b"a", b"b", b"c"], None), n=2), ErrorCode.CORRUPT_MESSAGE),
    "short keys column": (forge(columns(None, [b"k"], [b"a", b"b"], None), n=2), ErrorCode.CORRUPT_MESSAGE),
    "a value that is not bytes": (forge(columns(None, None, [b"a", 7], None), n=2), ErrorCode.INVALID_RECORD),
    "a key that is a string": (forge(columns(None, ["k"], [b"a"], None), n=1), ErrorCode.INVALID_RECORD),
    "headers not lists": (forge(columns(None, None, [b"a"], [5]), n=1), ErrorCode.INVALID_RECORD),
    "timestamps not ints": (forge(columns([0.5], None, [b"a"], None), n=1), ErrorCode.INVALID_RECORD),
    "max timestamp disagrees": (forge(columns([0, 10], None, [b"a", b"b"], None), n=2, max_ts=T + 5), ErrorCode.INVALID_RECORD),
    "negative record timestamp": (forge(columns([0, -T - 1], None, [b"a", b"b"], None), n=2), ErrorCode.INVALID_RECORD),
    "shared timestamp but max differs": (forge(columns(None, None, [b"a"], None), n=1, max_ts=T + 1), ErrorCode.INVALID_RECORD),
    "unknown codec": (forge(columns(None, None, [b"a"], None), n=1, attributes=6), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    "gzip flag, payload not gzip": (forge(columns(None, None, [b"a"], None), n=1, attributes=1), ErrorCode.CORRUPT_MESSAGE),
    "zstd flag, payload not zstd": (forge(columns(None, None, [b"a"], None), n=1, attributes=4), ErrorCode.CORRUPT_MESSAGE),
    "transactional without a producer id": (forge(columns(None, None, [b"a"], None), n=1, attributes=R.TRANSACTIONAL_BIT), ErrorCode.INVALID_RECORD),
    "a control batch from a producer": (forge(columns(None, None, [b"a"], None), n=1, attributes=R.CONTROL_BIT | R.TRANSACTIONAL_BIT), ErrorCode.INVALID_RECORD),
    "bad crc": (forge(columns(None, None, [b"a"], None), n=1, crc_ok=False), ErrorCode.CORRUPT_MESSAGE),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_bad_payload_is_refused_with_its_code_and_nothing_is_appended(name):
    data, code = CASES[name]
    log = MemoryLog(LogConfig(), now_ms=T)
    log.append_as_leader(R.build_batch([(b"k", b"ok")], timestamp_ms=T), leader_epoch=0, now_ms=T)
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(data, leader_epoch=0, now_ms=T)
    assert err.value.code == code, err.value
    assert log.log_end_offset == 1 and log.size_bytes == len(R.build_batch([(b"k", b"ok")], timestamp_ms=T))
    log.append_as_leader(R.build_batch([(b"k", b"fine")], timestamp_ms=T), leader_epoch=0, now_ms=T)  # still works
    assert log.log_end_offset == 2


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_is_readable_here_and_good_batches_pass(codec):
    assert codec in R.available_codecs()
    cid = R.codec_id(codec)
    good = R.build_batch([(b"k%d" % i, b"v" * i, [("h", b"1")], T + i) for i in range(50)], compression=cid)
    R.validate_produce_batch(good, R.validate_batch(good), require_keys=True)
    kafka = build_kafka_batch([(b"k%d" % i, b"v" * i, [("h", b"1")], T + i) for i in range(50)], compression=cid)
    R.validate_produce_batch(kafka, R.validate_batch(kafka), require_keys=True)


def test_kafka_batches_are_decoded_and_checked():
    good = build_kafka_batch([(None, b"v", [], T)])
    h = R.validate_batch(good)
    R.validate_produce_batch(good, h)
    with pytest.raises(KafkaError) as err:  # compacted topic: a key is required
        R.validate_produce_batch(good, h, require_keys=True)
    assert err.value.code == ErrorCode.INVALID_RECORD
    # the header claims 2 records, the payload has 1 (CRC made right again)
    bad = bytearray(good)
    struct.pack_into(">i", bad, 57, 2)
    struct.pack_into(">i", bad, 23, 1)
    struct.pack_into(">I", bad, 17, R.CRC_FUNCTIONS[2](memoryview(bad)[21:]))
    with pytest.raises(KafkaError) as err:
        R.validate_produce_batch(bytes(bad), R.validate_batch(bytes(bad)))
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    unknown = bytearray(good)
    struct.pack_into(">h", unknown, 21, 5)
    struct.pack_into(">I", unknown, 17, R.CRC_FUNCTIONS[2](memoryview(unknown)[21:]))
    with pytest.raises(KafkaError) as err:
        R.validate_produce_batch(bytes(unknown), R.validate_batch(bytes(unknown)))
    assert err.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


def _kafka_batch_with_deltas(deltas: list[int], stamps: list[int]) -> bytes:
    """A v2 batch whose records carry the given offset deltas (a client's bug or forgery;
    aiokafka's builder takes any), with a CRC that checks out."""
    from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for d, ts in zip(deltas, stamps):
        builder.append(d, ts, None, b"v", [])
    return bytes(builder.build())


def test_kafka_batch_records_must_have_offset_deltas_0_1_2_and_the_headers_max_timestamp():
    good = _kafka_batch_with_deltas([0, 1, 2], [T, T + 2, T + 1])
    R.validate_produce_batch(good, R.validate_batch(good))
    # the header's count and last delta agree (3 records, last delta 2), the middle record
    # repeats delta 0: consumers would see offset base twice and base + 1 never
    repeated = _kafka_batch_with_deltas([0, 0, 2], [T, T, T])
    with pytest.raises(KafkaError) as err:
        R.validate_produce_batch(repeated, R.validate_batch(repeated))
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE and "offset delta" in err.value.message
    # a max timestamp in the header that no record has
    wrong_max = bytearray(good)
    struct.pack_into(">q", wrong_max, 35, T + 7)
    struct.pack_into(">I", wrong_max, 17, R.CRC_FUNCTIONS[2](memoryview(wrong_max)[21:]))
    with pytest.raises(KafkaError) as err:
        R.validate_produce_batch(bytes(wrong_max), R.validate_batch(bytes(wrong_max)))
    assert err.value.code == ErrorCode.INVALID_RECORD and "max timestamp" in err.value.message


def test_checking_a_large_kafka_batch_does_not_set_off_the_garbage_collector():
    """Keeping every decoded record of a batch alive made Python's cyclic collector run
    every 700 of them, a leader's largest cost under a Kafka producer (issue 16)."""
    import gc

    batch = build_kafka_batch([(None, b"v" * 100, [], T + i) for i in range(20_000)])
    h = R.validate_batch(batch)
    R.validate_produce_batch(batch, h)  # imports, caches
    gc.collect()
    before = gc.get_stats()[0]["collections"]
    R.validate_produce_batch(batch, h)
    assert gc.get_stats()[0]["collections"] - before <= 1  # keeping them: about 28


def test_validation_can_be_switched_off_only_explicitly():
    log = MemoryLog(LogConfig(), now_ms=T)
    bad, _ = CASES["a value that is not bytes"]
    log.validate_records = False
    log.append_as_leader(bad, leader_epoch=0, now_ms=T)  # the header checks alone pass it
    assert log.log_end_offset == 2
