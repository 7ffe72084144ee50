"""Batches without records: what the log cleaner leaves of a producer's last batch
(records.empty_batch), in kcoord's format and Kafka's, and every reader of them."""

from __future__ import annotations

from collections import deque

import pytest
from aiokafka.record._crecords.default_records import DefaultRecordBatch

from kcoord import records as R
from kcoord.client.consumer.segments import decode_chunk
from kcoord.client.consumer.subscription_state import AssignedPartition
from kcoord.client.types import TopicPartition
from kcoord.kafka.batches import build_kafka_batch, set_offsets, to_kafka
from kcoord.log import LogConfig, MemoryLog
from kcoord.protocol.errors import ErrorCode, KafkaError


def original(kafka: bool, **producer) -> bytes:
    recs = [(b"k%d" % i, b"v%d" % i) for i in range(4)]
    if kafka:
        return set_offsets(build_kafka_batch([(k, v, [], 1000 + i) for i, (k, v) in enumerate(recs)], **producer), 10, 2)
    return R.stamp(R.build_batch(recs, timestamp_ms=1000, **producer), 10, 2)


@pytest.mark.parametrize("kafka", [False, True], ids=["kcoord", "kafka-v2"])
@pytest.mark.parametrize("skip", [0, 3])
def test_an_empty_batch_keeps_the_header_of_the_offsets_it_stands_for(kafka, skip):
    h = R.read_header(original(kafka, producer_id=5, producer_epoch=2, base_sequence=40))
    data = R.empty_batch(h, skip)
    e = R.validate_batch(data, check_crc=True)
    assert (e.base_offset, e.last_offset, e.record_count, e.magic, e.leader_epoch) == (10 + skip, 13, 0, h.magic, 2)
    assert (e.producer_id, e.producer_epoch, e.base_sequence, e.last_sequence) == (5, 2, 40 + skip, 43)
    assert len(data) == R.HEADER_SIZE and R.decode_batch(data).records() == []
    assert list(R.iter_records(data)) == [] and R.batches_info(data) == (10 + skip, 14, 1)
    with pytest.raises(ValueError):
        R.empty_batch(h, 4)


@pytest.mark.parametrize("kafka", [False, True], ids=["kcoord", "kafka-v2"])
def test_kafka_clients_read_an_empty_batch_as_kafka_writes_it(kafka):
    """A kcoord batch is converted, a Kafka one passed through; either way a Kafka client
    sees a v2 batch with no records whose last offset moves its position on."""
    data = R.empty_batch(R.read_header(original(kafka, producer_id=5, producer_epoch=2, base_sequence=40)))
    out = to_kafka(data)
    assert R.read_header(out).magic == R.KAFKA_FORMAT
    batch = DefaultRecordBatch(bytearray(out))
    assert batch.validate_crc() and list(batch) == []
    assert (batch.base_offset, batch.next_offset, batch.producer_id, batch.base_sequence) == (10, 14, 5, 40)


def test_the_consumer_skips_an_empty_batch():
    first = R.stamp(R.build_batch([(None, b"a")], timestamp_ms=1), 9, 0)
    data = first + R.empty_batch(R.read_header(original(False))) + R.stamp(R.build_batch([(None, b"z")], timestamp_ms=1), 14, 0)
    st = AssignedPartition(TopicPartition("t", 0), position=9, decode_from=9, pending=deque([data]))
    decode_chunk(st, True)
    assert [(s.base, s.values) for s in st.segments] == [(9, [b"a"]), (14, [b"z"])] and st.decode_from == 15


def test_a_producer_never_appends_an_empty_batch():
    log = MemoryLog(LogConfig())
    with pytest.raises(KafkaError) as err:
        log.append_as_leader(R.empty_batch(R.read_header(original(False))), leader_epoch=0)
    assert err.value.code == ErrorCode.INVALID_RECORD
    log.append_as_follower(R.stamp(R.empty_batch(R.read_header(original(False))), 0, 0))
    assert log.log_end_offset == 4  # a follower takes one from its leader
