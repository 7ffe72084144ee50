"""Transactional and control batches in both formats (docs/transactions.md section 1,
"Batches"): Kafka's marker bytes, never a record for applications, converted to Kafka's
control batch for Kafka clients."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record._crecords.default_records import DefaultRecordBatch

from kcoord import records as R
from kcoord.kafka.batches import build_kafka_batch, to_kafka
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.record.control import ControlType, build_control_batch, read_control

T = 1_700_000_000_000


@pytest.mark.parametrize("magic", [1, 2])
@pytest.mark.parametrize("commit", [True, False])
def test_a_control_batch_holds_kafkas_marker_bytes_and_reads_back(magic, commit):
    data = build_control_batch(commit=commit, producer_id=7, producer_epoch=3, coordinator_epoch=11, timestamp_ms=T, magic=magic, base_offset=40, leader_epoch=2)
    h = R.validate_batch(data)  # framing and CRC check out
    assert h.magic == magic and h.base_offset == 40 and h.leader_epoch == 2
    assert h.attributes & R.CONTROL_BIT and h.attributes & R.TRANSACTIONAL_BIT
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (7, 3, -1, 1)
    marker = read_control(data)
    assert marker.type == (ControlType.COMMIT if commit else ControlType.ABORT) and marker.coordinator_epoch == 11


def test_the_kafka_control_batch_is_byte_for_byte_what_kafka_writes_in_its_record():
    data = build_control_batch(commit=False, producer_id=7, producer_epoch=3, coordinator_epoch=-5, timestamp_ms=T)
    (rec,) = list(DefaultRecordBatch(data))
    assert rec.key == struct.pack(">hh", 0, 0) and rec.value == struct.pack(">hi", 0, -5)
    assert DefaultRecordBatch(data).is_control_batch and DefaultRecordBatch(data).is_transactional


@pytest.mark.parametrize("magic", [1, 2])
def test_readers_never_hand_a_control_record_to_applications(magic):
    data = R.build_batch([(b"k", b"v")], timestamp_ms=T) if magic == 1 else build_kafka_batch([(b"k", b"v", [], T)])
    marker = build_control_batch(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T, magic=magic, base_offset=1)
    buf = data + marker
    assert [b.header.record_count for b in R.iter_batches(buf)] == [1, 1]
    assert len(R.decode_batch(buf, len(data))) == 0
    assert [(r.offset, r.value) for r in R.iter_records(buf)] == [(0, b"v")]


def test_a_magic_1_marker_becomes_kafkas_control_batch_for_kafka_clients():
    marker = build_control_batch(commit=True, producer_id=9, producer_epoch=4, coordinator_epoch=6, timestamp_ms=T, magic=1, base_offset=12, leader_epoch=3)
    out = to_kafka(marker)
    h = R.validate_batch(out)
    assert h.magic == 2 and (h.base_offset, h.leader_epoch, h.producer_id, h.producer_epoch) == (12, 3, 9, 4)
    assert h.attributes & R.CONTROL_BIT and h.attributes & R.TRANSACTIONAL_BIT
    assert out == build_control_batch(commit=True, producer_id=9, producer_epoch=4, coordinator_epoch=6, timestamp_ms=T, magic=2, base_offset=12, leader_epoch=3)
    assert read_control(out).commit


def test_a_control_batch_with_a_bad_record_is_corrupt_not_a_guess():
    data = bytearray(build_control_batch(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T, magic=1))
    plain = R.build_batch([(b"xx", b"v")], timestamp_ms=T)
    with pytest.raises(KafkaError) as err:
        read_control(plain)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    # a control batch whose key is too short to be a control record key
    forged = bytearray(R.build_batch([(b"x", b"v")], timestamp_ms=T))
    struct.pack_into(">h", forged, 21, R.CONTROL_BIT | R.TRANSACTIONAL_BIT)
    struct.pack_into(">I", forged, 17, R.crc32(memoryview(forged)[21:]))
    with pytest.raises(KafkaError) as err:
        read_control(bytes(forged))
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE
    assert read_control(bytes(data)).coordinator_epoch == 0


def test_building_a_marker_without_a_producer_is_refused():
    with pytest.raises(ValueError):
        build_control_batch(commit=True, producer_id=-1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T)


def test_a_transactional_data_batch_of_an_idempotent_producer_is_accepted_by_the_checks():
    b = bytearray(R.build_batch([(b"k", b"v")], producer_id=3, producer_epoch=0, base_sequence=0, timestamp_ms=T))
    struct.pack_into(">h", b, 21, R.TRANSACTIONAL_BIT)
    struct.pack_into(">I", b, 17, R.crc32(memoryview(b)[21:]))
    h = R.validate_batch(bytes(b))
    R.validate_produce_batch(bytes(b), h)
    assert [r.value for r in R.iter_records(bytes(b))] == [b"v"]


def test_the_spark_and_ray_data_reader_skips_markers():
    from kcoord.spark.tasks import records_to_arrow

    data = (
        R.stamp(R.build_batch([(b"k", b"v")], timestamp_ms=T), 0, 0)
        + build_control_batch(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T, magic=1, base_offset=1)
        + R.stamp(R.build_batch([(b"k", b"w")], timestamp_ms=T), 2, 0)
    )
    batch = records_to_arrow("t", 0, data, 0, 3)
    assert batch.column("offset").to_pylist() == [0, 2] and batch.column("value").to_pylist() == [b"v", b"w"]
