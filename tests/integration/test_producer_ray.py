"""Producer on real Ray: round trips, partitioners (murmur2 like Kafka), acks, compression,
bulk writes, idempotent retries, a leader killed mid-stream, delivery timeouts, bad input,
and producing from inside a Ray task."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
import ray

import kcoord
from kcoord import records
from kcoord.calls import TIMEOUT, ActorCalls, BlockingCalls, CallFailed, channel
from kcoord.calls.caller import _per_loop
from kcoord.calls.direct import DirectCalls
from kcoord.client.admin import Admin
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.client.producer.partitioner import partition_for_key
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.protocol.replication import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse
from waiting import wait_until

pytestmark = pytest.mark.ray


@pytest.fixture
def make_topic(kcluster, topic_name):
    """Create small topics for one test and delete them afterwards. Each replica is an actor
    (~0.6 s to start), so RF=1 unless the test is about replication."""
    admin = Admin(kcluster)
    made: list[str] = []

    def make(partitions: int = 1, rf: int = 1, suffix: str = "", **config) -> str:
        name = topic_name + suffix
        cfg = {"min.insync.replicas": 2} if rf == 3 else {}
        cfg.update({k.replace("_", "."): v for k, v in config.items()})
        admin.create_topic(name, partitions=partitions, replication_factor=rf, config=cfg)
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            admin.delete_topic(name)
        except KafkaError:
            pass


def read_all(cluster, topic: str, partition: int = 0, from_offset: int = 0) -> list[records.Record]:
    """Every record below the HW of one partition, straight from the leader."""
    out: list[records.Record] = []
    offset = from_offset
    while True:
        resp = cluster.call_leader(
            topic, partition, "fetch", lambda e: FetchRequest(topic, partition, offset, max_wait_ms=0, current_leader_epoch=e), FetchResponse
        )
        assert resp.error_code == 0, resp
        got = [r for r in records.iter_records(resp.records) if r.offset >= offset]
        if not got:
            return out
        out += got
        offset = got[-1].offset + 1


def test_send_round_trip_keys_headers_timestamps(kcluster, make_topic):
    topic = make_topic(partitions=3, rf=3)
    with Producer(kcluster, linger_ms=20) as p:
        assert p.enable_idempotence and p.producer_id >= 0
        sent = []
        for i in range(300):
            key = b"user-%d" % (i % 17)
            headers = [("trace", b"%d" % i)] if i % 3 == 0 else None
            ts = 1_700_000_000_000 + i if i % 5 == 0 else None
            value = None if i == 7 else b"value-%d" % i
            sent.append((key, value, headers, ts, p.send(topic, value=value, key=key, headers=headers, timestamp_ms=ts)))
        p.flush(timeout=60)
        by_partition: dict[int, list] = {}
        for key, value, headers, ts, fut in sent:
            md = fut.get(timeout=1)
            # keyed records land where Kafka's default partitioner would put them
            assert md.partition == partition_for_key(key, 3)
            assert md.topic == topic and md.offset >= 0
            if ts is not None:
                assert md.timestamp == ts
            by_partition.setdefault(md.partition, []).append((md.offset, key, value, headers, md.timestamp))
    for part, expected in by_partition.items():
        expected.sort()
        got = read_all(kcluster, topic, part)
        assert [(r.offset, r.key, r.value, r.headers or None, r.timestamp) for r in got] == expected
        # and in send order within the partition
        assert [e[0] for e in expected] == list(range(len(expected)))


def test_batches_queued_behind_a_request_go_out_merged(kcluster, make_topic):
    topic = make_topic()
    with Producer(kcluster, batch_size=300, max_request_size=8192, linger_ms=0) as p:
        futs = [p.send(topic, b"q-%05d" % i, headers=[("n", b"%d" % i)] if i % 7 == 0 else None) for i in range(2000)]
        p.flush(60)
        assert p.metrics()["merged_requests"] > 0
        assert [f.get().offset for f in futs] == list(range(2000))
    got = read_all(kcluster, topic)
    assert [r.value for r in got] == [b"q-%05d" % i for i in range(2000)]
    assert got[14].headers == [("n", b"14")] and got[15].headers == []
    # a tiny buffer_memory makes send() wait for acknowledgements instead of queueing
    with Producer(kcluster, batch_size=500, buffer_memory=2000) as p:
        futs = [p.send(topic, b"m-%05d" % i + b"." * 40) for i in range(300)]
        assert p._accumulator.buffered <= 2000 + 100
        p.flush(60)
        assert [f.get().offset for f in futs] == list(range(2000, 2300))


def test_callbacks_errbacks_and_future_state(kcluster, make_topic):
    topic = make_topic()
    p = Producer(kcluster, linger_ms=50)
    done = threading.Event()
    seen = []
    fut = p.send(topic, b"x").add_callback(lambda md: (seen.append(md.offset), done.set()))
    fut.add_errback(lambda exc: seen.append(exc))
    assert done.wait(30) and seen == [0]
    assert fut.is_done and fut.succeeded() and fut.value.offset == 0 and fut.exception is None
    errors = []
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.send(topic, b"late")
    assert errors == []


def test_acks_0_and_1_and_non_idempotent(kcluster, make_topic):
    topic = make_topic()
    with Producer(kcluster, acks=0) as p0:
        assert not p0.enable_idempotence
        futs = [p0.send(topic, b"a%d" % i) for i in range(50)]
        p0.flush(30)
        assert {f.get(1).offset for f in futs} == {-1}  # nobody waited for the leader
    with Producer(kcluster, acks=1, linger_ms=0) as p1:
        futs = [p1.send(topic, b"b%d" % i) for i in range(50)]
        offsets = [f.get(30).offset for f in futs]
    wait_until(lambda: len(read_all(kcluster, topic)) == 100, what="acks=0 and acks=1 records to be committed")
    got = read_all(kcluster, topic)
    assert [r.value for r in got] == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)], "in send order"
    assert offsets == list(range(50, 100))


def test_gzip_compression_round_trip(kcluster, make_topic):
    topic = make_topic()
    with Producer(kcluster, compression_type="gzip") as p:
        futs = [p.send(topic, b"compressible " * 20 + b"%d" % i) for i in range(200)]
        p.flush(30)
        assert [f.get().offset for f in futs] == list(range(200))
    raw = kcluster.call_leader(topic, 0, "fetch", lambda e: FetchRequest(topic, 0, 0, current_leader_epoch=e), FetchResponse).records
    assert all(h.compression == records.codec_id("gzip") for _, h in records.iter_headers(raw))
    assert [r.value for r in read_all(kcluster, topic)] == [b"compressible " * 20 + b"%d" % i for i in range(200)]


def test_partitioners_sticky_round_robin_explicit_and_callable(kcluster, make_topic):
    topic = make_topic(partitions=3)
    # sticky: null-key records stay on one partition while its batch fills
    with Producer(kcluster, linger_ms=10_000) as p:
        futs = [p.send(topic, b"s%d" % i) for i in range(20)]
        p.flush(30)
        assert len({f.get().partition for f in futs}) == 1
    # round robin: every partition in turn, keys ignored
    with Producer(kcluster, partitioner="round_robin") as p:
        parts = [p.send(topic, b"r", key=b"same").get(30).partition for _ in range(6)]
        assert sorted(parts) == [0, 0, 1, 1, 2, 2] and parts[:3] != parts[1:4]
    # explicit partition wins over the key
    with Producer(kcluster) as p:
        assert p.send(topic, b"e", key=b"k", partition=2).get(30).partition == 2
    # a user callable (kafka-python's signature)
    calls = []

    def last_available(key, all_partitions, available):
        calls.append((key, tuple(all_partitions), tuple(available)))
        return available[-1]

    with Producer(kcluster, partitioner=last_available) as p:
        assert p.send(topic, b"c", key=b"kk").get(30).partition == 2
    assert calls == [(b"kk", (0, 1, 2), (0, 1, 2))]
    with Producer(kcluster, partitioner=lambda k, a, v: 99) as p:
        with pytest.raises(ValueError, match="partitioner returned 99"):
            p.send(topic, b"x")


def test_bad_input_is_rejected_with_clear_errors(kcluster, make_topic):
    topic = make_topic(max_message_bytes=10_000)
    with pytest.raises(ValueError, match="acks"):
        Producer(kcluster, acks=2)
    with pytest.raises(ValueError, match="acks"):
        Producer(kcluster, acks="leader")
    with pytest.raises(ValueError, match="enable_idempotence needs acks='all'"):
        Producer(kcluster, acks=1, enable_idempotence=True)
    with pytest.raises(KafkaError) as info:
        Producer(kcluster, compression_type="brotli")
    assert info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(ValueError, match="batch_size"):
        Producer(kcluster, batch_size=0)
    with Producer(kcluster) as p:
        with pytest.raises(TypeError, match="bytes or None, got str"):
            p.send(topic, "text")
        with pytest.raises(TypeError, match="key must be bytes"):
            p.send(topic, b"v", key=42)
        with pytest.raises(TypeError, match="header"):
            p.send(topic, b"v", headers=[("h", "not-bytes")])
        with pytest.raises(TypeError, match="header key must be str"):
            p.send(topic, b"v", headers=[(b"h", b"v")])
        with pytest.raises(TypeError, match="timestamp_ms"):
            p.send(topic, b"v", timestamp_ms=-5)
        with pytest.raises(KafkaError) as info:
            p.send(topic, os.urandom(20_000))
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE and "max.message.bytes=10000" in info.value.message
        with pytest.raises(KafkaError) as info:
            p.send_batch(topic, values=[b"ok", os.urandom(20_000)])
        assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        with pytest.raises(KafkaError) as info:
            p.send("no-such-topic-" + topic, b"v")
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "does not exist" in str(info.value)
        with pytest.raises(KafkaError) as info:
            p.send(topic, b"v", partition=1)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "no partition 1" in info.value.message
        with pytest.raises(TypeError, match="bytes or None"):
            p.send_batch(topic, values=[b"a", "b"])
        with pytest.raises(ValueError, match="keys has 1 entries for 2 values"):
            p.send_batch(topic, values=[b"a", b"b"], keys=[b"k"])
        # a bytearray/memoryview value is accepted (copied to bytes); the records above never got in
        assert p.send(topic, bytearray(b"ok")).get(30).offset == 0
    assert [r.value for r in read_all(kcluster, topic)] == [b"ok"]
    # a batch that the leader would refuse (raw, bypassing the producer's checks)
    big = records.build_batch_columns([os.urandom(20_000)])
    resp = kcluster.call_leader(topic, 0, "produce", lambda e: ProduceRequest(topic, 0, big, current_leader_epoch=e), ProduceResponse)
    assert resp.error_code == ErrorCode.MESSAGE_TOO_LARGE
    resp = kcluster.call_leader(topic, 0, "produce", lambda e: ProduceRequest(topic, 0, records.build_batch_columns([b"x"]), acks=2, current_leader_epoch=e), ProduceResponse)
    assert resp.error_code == ErrorCode.INVALID_REQUIRED_ACKS


def test_send_batch_columns_and_tuples_group_by_partition(kcluster, make_topic):
    topic = make_topic(partitions=3, rf=3)
    n = 3000
    keys = [b"key-%d" % i for i in range(n)]
    values = [b"value-%d" % i for i in range(n)]
    with Producer(kcluster, batch_size=16_384) as p:
        result = p.send_batch(topic, values=values, keys=keys)
        assert sum(w.count for w in result.values()) == n
        assert all(w.batches > 1 for w in result.values()), "16 KiB batches"
        # tuples with headers and timestamps, and plain values (null keys, chunked round robin)
        tuples = [(b"t%d" % i, b"tv%d" % i, [("i", b"%d" % i)], 1_600_000_000_000 + i) for i in range(100)]
        r2 = p.send_batch(topic, tuples)
        r3 = p.send_batch(topic, [b"plain-%d" % i for i in range(500)])
        r4 = p.send_batch(topic, values=[b"to-one"] * 10, partition=1)
    assert r4[1].count == 10 and list(r4) == [1]
    assert sum(w.count for w in r3.values()) == 500
    got = {part: read_all(kcluster, topic, part) for part in range(3)}
    for part in range(3):
        keyed = [r for r in got[part] if r.key is not None and r.key.startswith(b"key-")]
        assert all(partition_for_key(r.key, 3) == part for r in keyed)
        # input order within the partition
        assert [int(r.key[4:]) for r in keyed] == sorted(int(r.key[4:]) for r in keyed)
        w = result[part]
        assert (w.first_offset, w.last_offset) == (0, w.count - 1)
    tv = {r.key: r for rs in got.values() for r in rs if r.key is not None and r.key.startswith(b"t")}
    assert tv[b"t5"].headers == [("i", b"5")] and tv[b"t5"].timestamp == 1_600_000_000_005 and tv[b"t5"].value == b"tv5"
    assert sum(1 for rs in got.values() for r in rs if r.key is not None and r.key.startswith(b"key-")) == n


def test_send_batch_is_deterministic_and_a_retried_write_is_deduplicated(kcluster, make_topic):
    """The Spark exactly-once path: a fresh producer with the same explicit identity
    re-sends the same input; every batch is recognised as a duplicate. Each partition gets
    more than five batches: leaders answer the older ones OUT_OF_ORDER_SEQUENCE_NUMBER
    (Kafka's dedup window), and the producer learns from DescribeProducers that they are
    committed."""
    topic = make_topic(partitions=2)
    values = [os.urandom(100) for _ in range(5000)]
    keys = [b"k%d" % (i % 50) if i % 4 else None for i in range(5000)]
    identity = dict(producer_id=9_000_001, producer_epoch=0)
    with Producer(kcluster, batch_size=32_768, **identity) as first:
        plan1 = first._plan_bulk(first._accumulator.topic(topic), values, keys, None, None, None)
        r1 = first.send_batch(topic, values=values, keys=keys)
    with Producer(kcluster, batch_size=32_768, **identity) as retry:
        plan2 = retry._plan_bulk(retry._accumulator.topic(topic), values, keys, None, None, None)
        r2 = retry.send_batch(topic, values=values, keys=keys)
    assert [(p, r) for p, r, _ in plan1] == [(p, r) for p, r, _ in plan2], "same partitions and batch boundaries"
    assert {p: w.count for p, w in r1.items()} == {p: w.count for p, w in r2.items()}
    assert all(w.duplicate_batches == w.batches for w in r2.values()), r2
    assert all(w.duplicate_batches == 0 for w in r1.values())
    assert all(w.batches > 5 for w in r1.values()), r1
    total = sum(len(read_all(kcluster, topic, p)) for p in range(2))
    assert total == 5000, "the retried write added nothing"
    # a new identity is a new writer: it appends again
    with Producer(kcluster, batch_size=32_768, producer_id=9_000_002) as other:
        other.send_batch(topic, values=values[:10])
    assert sum(len(read_all(kcluster, topic, p)) for p in range(2)) == 5010


def test_a_write_that_died_half_way_is_completed_by_its_retry(kcluster, make_topic):
    """The first attempt got only its first chunks in (then "crashed"); the retry with the
    same identity and input skips those and appends the rest, exactly once."""
    from kcoord.client.producer.batch import RECORD_OVERHEAD, split_uniform

    topic = make_topic(partitions=2)
    values = [b"%06d" % i + os.urandom(94) for i in range(3000)]
    chunks = split_uniform(len(values), RECORD_OVERHEAD + 100, 16_384)
    half = chunks[3][1]  # the first attempt wrote 4 chunks (batches)
    identity = dict(producer_id=9_000_003, batch_size=16_384)
    with Producer(kcluster, **identity) as first:
        r1 = first.send_batch(topic, values=values[:half])
    with Producer(kcluster, **identity) as retry:
        r2 = retry.send_batch(topic, values=values)
    assert sum(w.batches for w in r1.values()) == 4
    assert sum(w.duplicate_batches for w in r2.values()) == 4
    got = sorted(r.value for p in range(2) for r in read_all(kcluster, topic, p))
    assert got == sorted(values), "every record exactly once"


def test_idempotent_retry_after_a_lost_response_keeps_one_copy(kcluster, make_topic, monkeypatch):
    topic = make_topic()
    real_call = ActorCalls.call
    lose = [1]

    async def lossy(self, name, method, *args, **kwargs):
        answer = await real_call(self, name, method, *args, **kwargs)
        if method == "produce" and lose[0]:
            lose[0] -= 1
            raise CallFailed(TIMEOUT, "lost")  # the leader appended, but its answer is "lost"
        return answer

    with Producer(kcluster) as p:
        first = p.send(topic, b"before").get(30)
        # The batch is re-sent, whichever way it went (Ray or the direct-call channel).
        monkeypatch.setattr(ActorCalls, "call", lossy)
        futs = [p.send(topic, b"r%d" % i) for i in range(10)]
        p.flush(30)
        metas = [f.get() for f in futs]
        assert p.metrics()["duplicates"] == 1 and p.metrics()["retries"] >= 1
    assert first.offset == 0 and [m.offset for m in metas] == list(range(1, 11)), "offsets of the original append"
    assert [r.value for r in read_all(kcluster, topic)] == [b"before"] + [b"r%d" % i for i in range(10)]


def test_the_same_produce_request_twice_is_a_duplicate(kcluster, make_topic):
    topic = make_topic()
    batch = records.build_batch_columns([b"a", b"b"], producer_id=8_000_001, producer_epoch=0, base_sequence=0)
    md = kcluster.partition_metadata(topic, 0, refresh=True)
    leader = kcluster.replica(topic, 0, md.leader, fresh=True)
    req = ProduceRequest(topic, 0, batch, acks=-1).encode()
    r1 = ProduceResponse.decode(ray.get(leader.produce.remote(req), timeout=60))
    r2 = ProduceResponse.decode(ray.get(leader.produce.remote(req), timeout=60))
    assert (r1.error_code, r1.base_offset, r1.duplicate) == (0, 0, False)
    assert (r2.error_code, r2.base_offset, r2.duplicate) == (0, 0, True)
    gap = records.build_batch_columns([b"c"], producer_id=8_000_001, producer_epoch=0, base_sequence=5)
    r3 = ProduceResponse.decode(ray.get(leader.produce.remote(ProduceRequest(topic, 0, gap).encode()), timeout=60))
    assert r3.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert [r.value for r in read_all(kcluster, topic)] == [b"a", b"b"]


def test_leader_killed_during_sends_every_acked_record_once_in_order(kcluster, make_topic):
    topic = make_topic(partitions=2, rf=3)
    md0 = kcluster.partition_metadata(topic, 0, refresh=True)
    acked: list = []
    failed: list = []
    stop = threading.Event()
    p = Producer(kcluster, batch_size=4096, linger_ms=2, retry_backoff_ms=50)

    def writer() -> None:
        i = 0
        while not stop.is_set():
            fut = p.send(topic, b"m-%06d" % i, partition=i % 2)
            fut.add_callback(lambda md, i=i: acked.append((i, md)))
            fut.add_errback(lambda exc, i=i: failed.append((i, exc)))
            i += 1
            if i % 50 == 0:
                time.sleep(0.005)  # a steady stream, not a burst

    t = threading.Thread(target=writer)
    t.start()
    try:
        wait_until(lambda: len(acked) > 300, timeout=60, what="some records acknowledged")
        ray.kill(kcluster.replica(topic, 0, md0.leader, fresh=True), no_restart=False)
        # a new epoch with a leader (not "another broker": after a fast restart the
        # preferred-leader move may already have handed leadership back)
        wait_until(lambda: (m := kcluster.partition_metadata(topic, 0, refresh=True)).leader >= 0 and m.leader_epoch > md0.leader_epoch, timeout=60, what="a new leader")
        before = len(acked)
        wait_until(lambda: len(acked) > before + 300, timeout=60, what="records acknowledged by the new leader")
    finally:
        stop.set()
        t.join()
        p.flush(timeout=120)
        p.close()
    assert not failed, failed[:3]
    for part in (0, 1):
        log = read_all(kcluster, topic, part)
        values = [r.value for r in log]
        assert len(values) == len(set(values)), "no duplicates"
        assert values == sorted(values), "send order"
        by_value = {r.value: r.offset for r in log}
        mine = [(b"m-%06d" % i, md) for i, md in acked if md.partition == part]
        assert mine and all(by_value.get(v) == md.offset for v, md in mine), "every acked record at its acked offset"


def test_delivery_timeout_fails_the_batch_and_the_producer_recovers(kcluster, make_topic):
    topic = make_topic()
    md = kcluster.partition_metadata(topic, 0, refresh=True)
    pid = ray.get(kcluster.replica(topic, 0, md.leader, fresh=True).describe.remote(), timeout=30)["pid"]
    p = Producer(kcluster, delivery_timeout_ms=1000, request_timeout_ms=400, linger_ms=0)
    assert p.send(topic, b"first").get(30).offset == 0
    os.kill(pid, signal.SIGSTOP)
    try:
        fut = p.send(topic, b"expires")
        with pytest.raises(KafkaError) as info:
            fut.get(timeout=30)
        assert info.value.code == ErrorCode.REQUEST_TIMED_OUT and "delivery_timeout_ms=1000" in info.value.message
        epoch_before = p.producer_epoch
    finally:
        os.kill(pid, signal.SIGCONT)
    assert p.metrics()["epoch_bumps"] == 1 and epoch_before == 1
    # the sequence hole is behind us: the next record goes through at the new epoch
    p.delivery_timeout_ms = 120_000
    assert p.send(topic, b"after").get(timeout=60).offset >= 1
    p.close()
    values = [r.value for r in read_all(kcluster, topic)]
    assert values[0] == b"first" and values[-1] == b"after" and values.count(b"after") == 1
    assert set(values) <= {b"first", b"expires", b"after"}  # an expired batch may still have landed


def test_produce_and_replication_go_over_direct_channels_and_survive_a_leader_kill(kcluster, make_topic):
    """On one node, the producer's requests and the followers' fetches use the replicas'
    channels (kcoord.channel); a leader killed under them loses and duplicates nothing."""
    if not channel.enabled():
        pytest.skip("direct-call channels need Linux (abstract Unix sockets)")
    topic = make_topic(rf=3)
    md = kcluster.partition_metadata(topic, 0, refresh=True)
    with Producer(kcluster, linger_ms=0) as p:
        first = [p.send(topic, b"a-%03d" % i).get(30).offset for i in range(20)]
        assert first == list(range(20))
        assert p._sender.calls.direct is not None and p._sender.calls.direct.calls >= 20
        views = {b: ray.get(kcluster.replica(topic, 0, b).describe.remote(), timeout=30) for b in md.replicas}
        assert views[md.leader]["direct_calls_served"] >= 20
        followers = [v for b, v in views.items() if b != md.leader]
        assert all(v["direct_calls_made"] > 0 for v in followers), "followers fetch over the channel"
        ray.kill(kcluster.replica(topic, 0, md.leader, fresh=True), no_restart=False)
        after = [p.send(topic, b"b-%03d" % i) for i in range(20)]
        p.flush(120)
        assert all(f.get(0).offset >= 20 for f in after)
    values = [r.value for r in read_all(kcluster, topic)]
    assert values == [b"a-%03d" % i for i in range(20)] + [b"b-%03d" % i for i in range(20)]
    # The consumer's fetches too, once it has learned the (new) leader's endpoint.
    def direct_calls() -> int:  # made by this process's synchronous clients (the consumer)
        calls = _per_loop.get(BlockingCalls.shared().loop, {}).get(kcluster.namespace)
        return calls.direct.calls if calls is not None and calls.direct is not None else 0

    before = direct_calls()
    consumer = Consumer(cluster=kcluster, fetch_max_wait_ms=50)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    got: list[bytes] = []
    wait_until(lambda: got.extend(r.value for r in consumer.poll(timeout_ms=100).get(TopicPartition(topic, 0), [])) or len(got) >= 40, timeout=60, what="40 records consumed")
    for _ in range(5):
        consumer.poll(timeout_ms=60)  # long polls of an idle partition, over the channel now
    consumer.close()
    assert got == values and direct_calls() > before


@ray.remote(num_cpus=0, max_restarts=-1)
class SlowToRestart:
    """An actor whose restarted process takes a minute to start: Ray reports it RESTARTING
    all that time and holds every call made to it."""

    def __init__(self, marker: str) -> None:
        if os.path.exists(marker):
            threading.Event().wait(60)  # the fault modelled: a restart that takes long
        open(marker, "w").close()

    def channel(self) -> None:
        return None


def test_a_channel_lookup_of_a_restarting_actor_gives_up_within_a_probe(ray_session, tmp_path):
    """Right after a leader was killed, the producer looks its name up again. Ray answers a
    call to a restarting actor only after about a second (ActorUnavailableError), and the
    lookup used to wait for that answer, holding the producer's retry (a 2 s failover
    outlier in benchmarks/failover.py). It now asks the GCS every 0.1 s and gives up."""
    from kcoord.calls import actor_state

    actor = SlowToRestart.remote(str(tmp_path / "started"))
    assert ray.get(actor.channel.remote(), timeout=60) is None
    ray.kill(actor, no_restart=False)
    try:
        wait_until(lambda: actor_state(actor) == "RESTARTING", timeout=30, what="the actor restarting")
        started = time.monotonic()
        with pytest.raises(ray.exceptions.RayError):
            ray.get(actor.channel.remote(), timeout=30)
        ray_answer_s = time.monotonic() - started  # the baseline: Ray's own answer, same load
        direct = DirectCalls("this-node", lookup_timeout=30.0)

        async def look_up() -> tuple[object, float]:
            started = time.monotonic()
            ep = await direct.endpoint("slow", actor)
            return ep, time.monotonic() - started

        ep, took = asyncio.run(look_up())
        assert ep is None
        assert took < max(0.5, ray_answer_s / 2), f"lookup gave up after {took:.2f} s; Ray itself answered after {ray_answer_s:.2f} s"
        assert "slow" not in direct._endpoints, "not remembered: asked again once the actor is back"
    finally:
        ray.kill(actor, no_restart=True)


@ray.remote(num_cpus=0)
def produce_in_task(cluster, topic: str, n: int) -> list[int]:
    with Producer(cluster) as p:
        return [f.get(60).offset for f in [p.send(topic, b"task-%d" % i) for i in range(n)]]


def test_produce_from_a_ray_task_with_a_pickled_cluster_client(kcluster, make_topic):
    topic = make_topic()
    offsets = ray.get(produce_in_task.remote(kcluster, topic, 25), timeout=120)
    assert offsets == list(range(25))
    assert [r.value for r in read_all(kcluster, topic)] == [b"task-%d" % i for i in range(25)]


def test_top_level_names_resolve():
    assert kcoord.Producer is Producer
    assert kcoord.TopicPartition is TopicPartition
