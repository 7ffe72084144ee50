"""Consumer on real Ray: reset policies, seek, pause/resume, the iterator, offsets,
long-poll wake-up, and reading through a leader failover."""

from __future__ import annotations

import threading
import time

import pytest
from consumer_support import drain
import ray

from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.errors import NoOffsetForPartitionError
from kcoord.client.producer import Producer
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError
from waiting import wait_until

pytestmark = pytest.mark.ray

PER_PARTITION = 1000


@pytest.fixture(scope="module")
def filled(kcluster):
    """A 2-partition topic with PER_PARTITION records each, in many small batches, shared
    by the read-only tests of this module."""
    import uuid

    name = f"consumer-filled-{uuid.uuid4().hex[:6]}"
    admin = Admin(kcluster)
    admin.create_topic(name, partitions=2, replication_factor=1)
    with Producer(kcluster, batch_size=4096) as p:
        for part in (0, 1):
            p.send_batch(name, values=[b"p%d-%04d" % (part, i) for i in range(PER_PARTITION)], keys=[b"k%d" % i for i in range(PER_PARTITION)], partition=part)
    yield name
    admin.delete_topic(name)


@pytest.fixture
def make_topic(kcluster, topic_name):
    admin = Admin(kcluster)
    made: list[str] = []

    def make(partitions: int = 1, rf: int = 1, suffix: str = "") -> str:
        name = topic_name + suffix
        admin.create_topic(name, partitions=partitions, replication_factor=rf, config={"min.insync.replicas": 2} if rf == 3 else {})
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            admin.delete_topic(name)
        except KafkaError:
            pass


def test_earliest_reads_everything_in_order(kcluster, filled):
    with Consumer(filled, cluster=kcluster, auto_offset_reset="earliest", max_poll_records=300) as c:
        assert c.assignment() == {TopicPartition(filled, 0), TopicPartition(filled, 1)}
        seen: dict[int, list] = {0: [], 1: []}
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < 2 * PER_PARTITION and time.monotonic() < deadline:
            batch = c.poll(timeout_ms=500)
            assert sum(map(len, batch.values())) <= 300
            for tp, recs in batch.items():
                assert all(r.topic == filled and r.partition == tp.partition for r in recs)
                seen[tp.partition] += recs
        for part in (0, 1):
            recs = seen[part]
            assert [r.offset for r in recs] == list(range(PER_PARTITION))
            assert [r.value for r in recs] == [b"p%d-%04d" % (part, i) for i in range(PER_PARTITION)]
            assert recs[7].key == b"k7" and recs[7].headers == () and recs[7].timestamp > 0 and recs[7].timestamp_type == 0
            assert c.position(TopicPartition(filled, part)) == PER_PARTITION
        assert c.poll(timeout_ms=200) == {}


def test_poll_columns_returns_the_same_records_as_columns(kcluster, filled):
    tp0, tp1 = TopicPartition(filled, 0), TopicPartition(filled, 1)
    c = Consumer(cluster=kcluster, auto_offset_reset="earliest")
    c.assign([tp0, tp1])
    c.seek(tp0, 5)  # mid-batch
    first = c.poll(timeout_ms=10_000, max_records=3)  # records, then columns: positions carry over
    tp = next(iter(first))
    assert [r.offset for r in first[tp]] == ([5, 6, 7] if tp == tp0 else [0, 1, 2])
    got: dict = {tp0: [], tp1: []}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < 2 * PER_PARTITION - 8 and time.monotonic() < deadline:
        for t, cols in c.poll_columns(timeout_ms=500, max_records=700).items():
            assert len(cols.offsets) == len(cols.values) == len(cols.keys) == len(cols.timestamps) == len(cols.timestamp_types)
            assert cols.headers is None and set(cols.timestamp_types) == {0}
            got[t] += list(zip(cols.offsets, cols.keys, cols.values))
    start0 = 8 if tp == tp0 else 5
    start1 = 3 if tp == tp1 else 0
    assert got[tp0] == [(i, b"k%d" % i, b"p0-%04d" % i) for i in range(start0, PER_PARTITION)]
    assert got[tp1] == [(i, b"k%d" % i, b"p1-%04d" % i) for i in range(start1, PER_PARTITION)]
    assert c.position(tp0) == c.position(tp1) == PER_PARTITION
    c.close()


def test_latest_starts_at_the_high_watermark_and_long_poll_wakes_up(kcluster, make_topic):
    topic = make_topic()
    tp = TopicPartition(topic, 0)
    with Producer(kcluster) as p:
        p.send_batch(topic, values=[b"old-%d" % i for i in range(10)])
        c = Consumer(topic, cluster=kcluster, fetch_max_wait_ms=5000)
        assert c.position(tp) == 10  # "latest" resolved now
        assert c.end_offsets([tp]) == {tp: 10} and c.beginning_offsets([tp]) == {tp: 0}
        result: dict = {}

        def poller() -> None:
            start = time.monotonic()
            result["records"] = c.poll(timeout_ms=20_000)
            result["took"] = time.monotonic() - start

        leader = kcluster.replica(topic, 0, kcluster.partition_metadata(topic, 0).leader, fresh=True)
        t = threading.Thread(target=poller)
        t.start()
        wait_until(lambda: ray.get(leader.describe.remote())["parked_fetches"]["consumers"] >= 1, timeout=20, what="the poll's fetch to park at the leader")
        p.send(topic, b"new").get(30)
        t.join(30)
    assert [r.value for r in result["records"][tp]] == [b"new"]
    assert result["took"] < 15, "the parked fetch returned when the record arrived, not at the poll timeout"
    assert c.position(tp) == 11 and c.highwater(tp) == 11
    c.close()


def test_reset_none_raises_and_out_of_range_resets(kcluster, filled):
    tp = TopicPartition(filled, 0)
    c = Consumer(filled, cluster=kcluster, auto_offset_reset="none")
    with pytest.raises(NoOffsetForPartitionError) as info:
        c.poll(timeout_ms=100)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and "auto_offset_reset='none'" in info.value.message
    c.assign([tp])
    c.seek(tp, 5000)
    with pytest.raises(KafkaError) as info:
        c.poll(timeout_ms=5000)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and "5000" in info.value.message
    c.seek(tp, 990)
    assert [r.offset for r in drain(c, 10)] == list(range(990, 1000))
    c.close()
    # with "earliest", an out-of-range position starts over from the log start
    c = Consumer(cluster=kcluster, auto_offset_reset="earliest")
    c.assign([tp])
    c.seek(tp, 5000)
    first = drain(c, 1)[0]
    assert first.offset == 0
    c.close()


def test_seek_position_and_seek_to_beginning_end(kcluster, filled):
    tp0, tp1 = TopicPartition(filled, 0), TopicPartition(filled, 1)
    c = Consumer(cluster=kcluster, auto_offset_reset="earliest")
    c.assign([tp0])
    assert c.assignment() == {tp0}
    c.seek(tp0, 123)  # inside a batch: the records before it in that batch are skipped
    assert c.position(tp0) == 123
    recs = c.poll(timeout_ms=10_000, max_records=5)[tp0]
    assert [r.offset for r in recs] == [123, 124, 125, 126, 127] and recs[0].value == b"p0-0123"
    assert c.position(tp0) == 128
    c.seek_to_end()
    assert c.position(tp0) == PER_PARTITION
    c.seek_to_beginning(tp0)
    assert c.position(tp0) == 0
    assert c.poll(timeout_ms=10_000, max_records=1)[tp0][0].offset == 0
    with pytest.raises(ValueError, match="not assigned"):
        c.seek(tp1, 0)
    with pytest.raises(ValueError, match="offset must be"):
        c.seek(tp0, -1)
    c.assign([tp0, tp1])  # tp0 keeps its position, tp1 starts per auto_offset_reset
    assert c.position(tp0) == 1 and c.position(tp1) == 0
    c.close()
    with pytest.raises(RuntimeError, match="closed"):
        c.poll()


def test_pause_and_resume(kcluster, filled):
    tp0, tp1 = TopicPartition(filled, 0), TopicPartition(filled, 1)
    c = Consumer(filled, cluster=kcluster, auto_offset_reset="earliest")
    c.pause(tp0)
    assert c.paused() == {tp0}
    got = drain(c, PER_PARTITION)
    assert {r.partition for r in got} == {1} and len(got) == PER_PARTITION
    assert c.poll(timeout_ms=300) == {}, "paused partition returns nothing"
    assert c.position(tp0) == 0
    c.resume(tp0)
    assert c.paused() == set()
    got = drain(c, PER_PARTITION)
    assert {r.partition for r in got} == {0} and [r.offset for r in got] == list(range(PER_PARTITION))
    c.close()


def test_iterator_stops_after_consumer_timeout_ms(kcluster, filled):
    c = Consumer(filled, cluster=kcluster, auto_offset_reset="earliest", consumer_timeout_ms=1500)
    start = time.monotonic()
    recs = list(c)
    took = time.monotonic() - start
    assert len(recs) == 2 * PER_PARTITION and took < 60
    per = {p: [r.offset for r in recs if r.partition == p] for p in (0, 1)}
    assert per[0] == list(range(PER_PARTITION)) and per[1] == list(range(PER_PARTITION))
    assert c.position(TopicPartition(filled, 0)) == PER_PARTITION
    # positions advance per yielded record: stop half-way, then poll() continues from there
    c.seek_to_beginning()
    it = iter(c)
    first = [next(it) for _ in range(3)]
    tp = TopicPartition(first[0].topic, first[0].partition)
    assert c.position(tp) == first[-1].offset + 1
    rest = wait_until(lambda: c.poll(timeout_ms=1000).get(tp), timeout=30, what=f"records of {tp}")
    assert rest[0].offset == first[-1].offset + 1, "poll() after the iterator skips nothing"
    c.close()


def test_commit_needs_a_group_and_bad_arguments(kcluster, filled):
    c = Consumer(cluster=kcluster)
    with pytest.raises(KafkaError) as info:
        c.commit()
    assert info.value.code == ErrorCode.INVALID_GROUP_ID and "group_id" in info.value.message
    with pytest.raises(KafkaError):
        c.committed(TopicPartition(filled, 0))
    with pytest.raises(ValueError, match="auto_offset_reset"):
        Consumer(cluster=kcluster, auto_offset_reset="middle")
    with pytest.raises(ValueError, match="max_poll_records"):
        Consumer(cluster=kcluster, max_poll_records=0)
    with pytest.raises(KafkaError) as info:
        c.assign([TopicPartition("no-such-topic-zz", 0)])
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(KafkaError) as info:
        c.assign([TopicPartition(filled, 7)])
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "no partition 7" in info.value.message
    with pytest.raises(TypeError):
        c.assign([("t", "0")])
    c.close()


def test_reads_through_a_leader_failover(kcluster, make_topic):
    topic = make_topic(rf=3)
    tp = TopicPartition(topic, 0)
    p = Producer(kcluster, batch_size=2048)
    p.send_batch(topic, values=[b"a-%04d" % i for i in range(500)])
    c = Consumer(topic, cluster=kcluster, auto_offset_reset="earliest", fetch_max_wait_ms=200)
    got = [r.value for r in drain(c, 200)]
    md = kcluster.partition_metadata(topic, 0, refresh=True)
    handle = kcluster.replica(topic, 0, md.leader, fresh=True)
    before = ray.get(handle.describe.remote())["incarnation"]
    ray.kill(handle, no_restart=False)
    # ray.kill returns before the process is gone: wait until it was (Ray restarts it as a
    # new process), or the next writes could all reach the old leader first
    wait_until(lambda: ray.get(handle.describe.remote(), timeout=30)["incarnation"] != before, timeout=60, what="the leader to be killed and restarted")
    p.send_batch(topic, values=[b"b-%04d" % i for i in range(500)])  # retries until the new leader takes them
    got += [r.value for r in drain(c, 1000 - len(got), timeout=120)]
    assert got == [b"a-%04d" % i for i in range(500)] + [b"b-%04d" % i for i in range(500)]
    assert c.position(tp) == 1000
    # a new election happened (the restarted replica may since have become the preferred
    # leader again, so compare epochs, not brokers)
    assert kcluster.partition_metadata(topic, 0, refresh=True).leader_epoch > md.leader_epoch
    p.close()
    c.close()
