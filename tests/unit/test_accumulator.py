"""Producer batching without Ray: size estimates never undercount the packed batch, bulk
splitting is deterministic, batches hand out results to record futures."""

from __future__ import annotations

import os
import random
import threading

import pytest

from kcoord import records
from kcoord.client.producer import batch as acc
from kcoord.client.producer.futures import FutureRecordMetadata
from kcoord.protocol.errors import ErrorCode, KafkaError


def packed_size(values, keys=None, headers=None, timestamps=None) -> int:
    return len(records.build_batch_columns(values, keys, headers, timestamps, producer_id=1, producer_epoch=0, base_sequence=0))


def test_estimate_never_undercounts_the_packed_batch():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randrange(1, 60)
        values = [os.urandom(rng.choice([0, 1, 31, 32, 255, 256, 70_000])) if rng.random() > 0.1 else None for _ in range(n)]
        keys = [os.urandom(rng.randrange(0, 300)) if rng.random() > 0.5 else None for _ in range(n)]
        headers = [[("h\u00e9", os.urandom(rng.randrange(0, 40)))] * rng.randrange(0, 3) or None for _ in range(n)]
        stamps = [rng.randrange(0, 2**62) for _ in range(n)]
        estimate = acc.BATCH_OVERHEAD + sum(acc.record_sizes(values, keys, headers))
        assert estimate >= packed_size(values, keys, headers, stamps)
        assert estimate == acc.BATCH_OVERHEAD + sum(acc.record_size(v, k, h) for v, k, h in zip(values, keys, headers))


def test_split_batches_respects_the_limit_and_order():
    rng = random.Random(2)
    sizes = [rng.randrange(1, 500) for _ in range(5000)]
    limit = 4096
    ranges = acc.split_batches(sizes, limit)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(sizes)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), "contiguous, in input order"
    for s, e in ranges:
        assert acc.BATCH_OVERHEAD + sum(sizes[s:e]) <= limit
        if e < len(sizes):  # greedy: the next record would not have fitted
            assert acc.BATCH_OVERHEAD + sum(sizes[s : e + 1]) > limit


def test_split_is_deterministic():
    sizes = [random.Random(3).randrange(1, 900) for _ in range(2000)]
    assert acc.split_batches(sizes, 10_000) == acc.split_batches(list(sizes), 10_000)


def test_split_batches_array_equals_split_batches():
    import numpy as np

    rng = random.Random(4)
    for limit in (300, 4096, 100_000):
        sizes = [rng.choice([1, 20, 120, 999, 5000]) for _ in range(3000)]
        assert acc.split_batches_array(np.array(sizes), limit) == acc.split_batches(sizes, limit)
    assert acc.split_batches_array(np.array([], dtype=np.int64), 100) == []


def test_oversized_record_goes_alone():
    assert acc.split_batches([10, 5000, 10, 10], 1000) == [(0, 1), (1, 2), (2, 4)]
    assert acc.split_batches([], 1000) == []


@pytest.mark.parametrize("count,size,limit", [(1000, 120, 1 << 20), (1000, 120, 4096), (7, 5000, 1000), (0, 10, 100), (10, 1, 100)])
def test_split_uniform_equals_split_batches(count, size, limit):
    assert acc.split_uniform(count, size, limit) == acc.split_batches([size] * count, limit)


def test_sequence_wraps_at_int31():
    assert acc.sequence_after(0, 5) == 5
    assert acc.sequence_after(2**31 - 2, 5) == 3


def test_batch_columns_backfill_keys_and_headers():
    b = acc.ProducerBatch("t", 0, 0.0)
    b.append(b"a", None, None, 1, 10)
    b.append(b"b", b"k", None, 2, 10)
    b.append(b"c", None, [("h", b"v")], 3, 10)
    assert b.values == [b"a", b"b", b"c"]
    assert b.keys == [None, b"k", None]
    assert b.headers == [None, None, [("h", b"v")]]
    assert b.size == acc.BATCH_OVERHEAD + 30
    b.producer_id, b.producer_epoch, b.base_sequence = 7, 0, 0
    got = list(records.iter_records(b.build()))
    assert [(r.key, r.value, r.timestamp) for r in got] == [(None, b"a", 1), (b"k", b"b", 2), (None, b"c", 3)]
    assert got[2].headers == [("h", b"v")]
    h = records.read_header(b.build())
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.record_count) == (7, 0, 0, 3)


def test_record_futures_share_the_batch_outcome():
    b = acc.ProducerBatch("t", 2, 0.0)
    futs = [FutureRecordMetadata(b, b.append(b"v%d" % i, None, None, 100 + i, 5)) for i in range(3)]
    seen = []
    futs[1].add_callback(lambda md: seen.append(("ok", md.offset)))
    futs[1].add_errback(lambda exc: seen.append(("err", exc)))
    assert not futs[0].is_done
    with pytest.raises(KafkaError) as info:
        futs[0].get(timeout=0.01)
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
    t = threading.Thread(target=lambda: b.complete(base_offset=40))
    t.start()
    assert futs[2].get(timeout=5).offset == 42
    t.join()
    assert b.callbacks is None and seen == []  # complete() hands callbacks to its caller (the sender) to run
    assert [f.get().offset for f in futs] == [40, 41, 42]
    assert futs[0].get().timestamp == 100 and futs[0].get().topic_partition == ("t", 2)
    late = []
    futs[0].add_callback(lambda md: late.append(md.offset))  # already done: runs at once
    assert late == [40]


def test_failed_batch_raises_its_error_and_runs_errbacks():
    b = acc.ProducerBatch("t", 0, 0.0)
    f = FutureRecordMetadata(b, b.append(b"v", None, None, 1, 5))
    errors = []
    f.add_errback(errors.append)
    for fn in b.complete(error=KafkaError(ErrorCode.MESSAGE_TOO_LARGE, "too big")):
        fn(b)
    assert f.failed() and not f.succeeded()
    assert errors and errors[0].code == ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(KafkaError, match="too big"):
        f.get()


def test_single_record_limit_leaves_room_for_the_header():
    limit = acc.single_record_limit(10_000)
    value = os.urandom(limit - acc.RECORD_OVERHEAD)
    assert acc.record_size(value) == limit
    assert packed_size([value]) <= 10_000


def test_merged_batch_covers_its_parts_in_order():
    a = acc.ProducerBatch("t", 1, 5.0)
    b = acc.ProducerBatch("t", 1, 3.0)
    c = acc.ProducerBatch("t", 1, 7.0)
    a.append(b"a0", None, None, 10, 12)
    a.append(b"a1", None, None, 11, 12)
    b.append(b"b0", b"kb", None, 12, 14)
    c.append(b"c0", None, [("h", b"v")], 13, 20)
    m = acc.merge_batches([a, b, c])
    assert m.values == [b"a0", b"a1", b"b0", b"c0"] and m.timestamps == [10, 11, 12, 13]
    assert m.keys == [None, None, b"kb", None] and m.headers == [None, None, None, [("h", b"v")]]
    assert m.size == acc.BATCH_OVERHEAD + 12 + 12 + 14 + 20 and m.created == 3.0 and m.parts == [a, b, c]
    m.producer_id, m.producer_epoch, m.base_sequence = 3, 0, 10
    h = records.read_header(m.build())
    assert (h.base_sequence, h.record_count, h.last_sequence) == (10, 4, 13)


def test_fresh_metadata_gives_partitions_added_since_their_own_queues():
    """create_partitions: a producer that knew the topic with 1 partition learns of 3."""
    from kcoord.client.producer.accumulator import RecordAccumulator
    from kcoord.protocol.controller import PartitionMetadata, TopicMetadata

    class Metadata:  # the one ClusterClient call the accumulator makes for this
        count = 1

        def topic(self, name, refresh=False):
            return TopicMetadata(name, partitions=[PartitionMetadata(i, leader=0) for i in range(self.count)])

    cluster = Metadata()
    ra = RecordAccumulator(cluster, batch_size=1024, max_request_size=4096, buffer_memory=1 << 20, max_block_ms=10,
                           partitioner="default", wake=lambda: None, metrics={})
    t = ra.topic("t")
    assert (t.num_partitions, t.all_partitions) == (1, [0])
    cluster.count = 3
    assert ra.refresh_topic("t") is t
    assert (t.num_partitions, t.all_partitions, t.available) == (3, [0, 1, 2], [0, 1, 2])
    assert [q.partition for q in t.partitions] == [0, 1, 2]
    cluster.count = 2  # a topic never shrinks; stale metadata changes nothing
    ra.refresh_topic("t")
    assert t.num_partitions == 3
