"""Unchanged Kafka clients against kcoord through the Kafka listener: kcat, kafka-python,
confluent-kafka and aiokafka producing and consuming, groups that rebalance and commit,
records crossing between kcoord's format and Kafka's byte for byte."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid

import pytest

import kcoord
from kcoord.client.admin import Admin

from waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.kafka]


def new_topic(cluster, partitions: int = 3, rf: int = 3, config: dict | None = None) -> str:
    name = f"kw-{uuid.uuid4().hex[:8]}"
    Admin(cluster).create_topic(name, partitions=partitions, replication_factor=rf, config=config or {})
    return name


def run(cmd: list[str], stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)


def kcoord_records(cluster, topic: str, count: int, timeout: float = 30) -> list:
    consumer = kcoord.Consumer(topic, cluster=cluster, auto_offset_reset="earliest", enable_auto_commit=False)
    got: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            for _tp, recs in consumer.poll(timeout_ms=500).items():
                got += recs
    finally:
        consumer.close()
    return got


# -- kcat ----------------------------------------------------------------------------------


def test_kcat_lists_metadata_produces_and_consumes(kcluster, kafka_bootstrap, kcat):
    topic = new_topic(kcluster, partitions=2)
    meta = run([kcat, "-b", kafka_bootstrap, "-L"])
    assert meta.returncode == 0, meta.stderr
    assert "3 brokers" in meta.stdout and f'topic "{topic}" with 2 partitions' in meta.stdout
    produced = run([kcat, "-b", kafka_bootstrap, "-P", "-t", topic, "-K:"], stdin="a:1\nb:2\nc:3\nd:4\n")
    assert produced.returncode == 0, produced.stderr
    consumed = run([kcat, "-b", kafka_bootstrap, "-C", "-t", topic, "-e", "-f", "%k=%s\n"])
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.split()) == ["a=1", "b=2", "c=3", "d=4"]
    # kcoord's own consumer reads what kcat wrote
    assert sorted((r.key, r.value) for r in kcoord_records(kcluster, topic, 4)) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")]


# -- kafka-python --------------------------------------------------------------------------


def test_kafka_python_idempotent_producer_and_group_consumer(kcluster, kafka_bootstrap):
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(kcluster, partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True, compression_type="gzip")
    futures = [producer.send(topic, key=b"k%d" % (i % 7) if i % 3 else None, value=b"v%d" % i, headers=[("n", b"%d" % i)]) for i in range(200)]
    producer.flush()
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    assert len({(m.partition, m.offset) for m in metas}) == 200
    group = f"kp-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=8000)
    got = []
    for msg in consumer:
        got.append(msg)
        if len(got) == 200:
            break
    consumer.commit()
    consumer.close()
    assert sorted(int(m.value[1:]) for m in got) == list(range(200))
    assert all(m.headers == [("n", m.value[1:])] for m in got)
    assert all((m.key is None) == (int(m.value[1:]) % 3 == 0) for m in got)
    desc = Admin(kcluster).describe_group(group)
    committed = {p["partition"]: p["committed_offset"] for p in desc["offsets"]}
    ends = {p: max(m.offset for m in got if m.partition == p) + 1 for p in {m.partition for m in got}}
    assert committed == ends


# -- confluent-kafka -----------------------------------------------------------------------


def _confluent_consumer(bootstrap: str, group: str, topic: str):
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    c.subscribe([topic])
    return c


def test_confluent_group_rebalances_when_a_member_joins_and_commits(kcluster, kafka_bootstrap):
    from confluent_kafka import Producer

    topic = new_topic(kcluster, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True, "compression.type": "lz4", "linger.ms": 5})
    errors: list = []
    for i in range(200):
        producer.produce(topic, key=b"%d" % i, value=b"x" * 100, on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert producer.flush(60) == 0 and not errors
    group = f"cg-{uuid.uuid4().hex[:6]}"
    first = _confluent_consumer(kafka_bootstrap, group, topic)
    seen: dict = {}

    def drain(c, want_assigned: int | None = None):
        msg = c.poll(0.2)
        if msg is not None and not msg.error():
            seen[(msg.partition(), msg.offset())] = msg.key()
        return want_assigned is None or len(c.assignment()) == want_assigned

    wait_until(lambda: drain(first, 2) and len(seen) > 0, timeout=60, what="first member assigned both partitions")
    second = _confluent_consumer(kafka_bootstrap, group, topic)
    wait_until(lambda: drain(first) and drain(second) and len(first.assignment()) == 1 and len(second.assignment()) == 1, timeout=60, what="rebalance to 1 + 1 partitions")
    wait_until(lambda: drain(first) and drain(second) and len(seen) == 200, timeout=60, what="all 200 records consumed")
    first.commit(asynchronous=False)
    second.commit(asynchronous=False)
    desc = Admin(kcluster).describe_group(group)
    assert desc["state"] == "Stable" and len(desc["members"]) == 2
    assert sorted(p for m in desc["members"] for p in m["assignment"].get(topic, [])) == [0, 1]
    committed = {p["partition"]: p["committed_offset"] for p in desc["offsets"]}
    assert sum(committed.values()) == 200
    first.close()
    second.close()


# -- aiokafka ------------------------------------------------------------------------------


def test_aiokafka_producer_and_consumer(kcluster, kafka_bootstrap):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = new_topic(kcluster, partitions=1)

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, enable_idempotence=True, compression_type="zstd")
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait(topic, b"a%d" % i, key=b"k", headers=[("h", None)])
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id=f"ak-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < 50 and time.monotonic() < deadline:
                for recs in (await consumer.getmany(timeout_ms=1000)).values():
                    got += recs
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(main())
    assert [m.value for m in sorted(got, key=lambda m: m.offset)] == [b"a%d" % i for i in range(50)]
    assert all(list(m.headers) == [("h", None)] for m in got)


# -- formats cross -------------------------------------------------------------------------


def test_cross_format_byte_for_byte(kcluster, kafka_bootstrap):
    """kcoord's Producer -> kafka-python, kafka-python -> kcoord's Consumer: same keys,
    values, headers and timestamps, null keys and values included."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = new_topic(kcluster, partitions=1)
    rows = [(None if i % 4 == 1 else b"key-%d" % i, None if i % 4 == 3 else bytes([i % 256]) * (i % 50), [("h%d" % (i % 3), b"\x00\xff")] if i % 2 else [], 1_600_000_000_000 + i) for i in range(100)]
    producer = kcoord.Producer(kcluster, acks="all")
    for k, v, hs, ts in rows[:50]:
        producer.send(topic, value=v, key=k, headers=hs, partition=0, timestamp_ms=ts)
    producer.flush()
    producer.close()
    kp = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    for k, v, hs, ts in rows[50:]:
        kp.send(topic, value=v, key=k, headers=hs, partition=0, timestamp_ms=ts)
    kp.flush()
    kp.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    seen = [m for m, _ in zip(consumer, range(100))]
    consumer.close()
    assert [(m.key, m.value, list(m.headers), m.timestamp) for m in seen] == [(k, v, list(hs), ts) for k, v, hs, ts in rows]
    ours = sorted(kcoord_records(kcluster, topic, 100), key=lambda r: r.offset)
    assert [(r.key, r.value, list(r.headers), r.timestamp) for r in ours] == [(k, v, list(hs), ts) for k, v, hs, ts in rows]


def test_log_append_time_topic(kcluster, kafka_bootstrap):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = new_topic(kcluster, partitions=1, config={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(topic, value=b"x", timestamp=1_000)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "lat", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    msg = wait_until(lambda: c.poll(0.5), timeout=30, what="the record")
    c.close()
    kind, ts = msg.timestamp()
    assert kind == 2 and ts >= before  # TIMESTAMP_LOG_APPEND_TIME


def test_list_offsets_earliest_latest_and_by_time(kcluster, kafka_bootstrap):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = new_topic(kcluster, partitions=1)
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(10):
        p.produce(topic, value=b"%d" % i, timestamp=1_700_000_000_000 + i * 1000)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "lo"})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=20) == (0, 10)
    found = c.offsets_for_times([TopicPartition(topic, 0, 1_700_000_004_500)], timeout=20)
    c.close()
    assert found[0].offset == 5


def test_admin_create_describe_delete_topics(kcluster, kafka_bootstrap):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    name = f"kw-admin-{uuid.uuid4().hex[:6]}"
    futures = admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=3, config={"min.insync.replicas": "2"})])
    futures[name].result(60)
    meta = admin.list_topics(timeout=20)
    assert name in meta.topics and len(meta.topics[name].partitions) == 2
    assert meta.topics["__consumer_offsets"].error is None
    configs = admin.describe_configs([ConfigResource("topic", name)])
    values = {k: v.value for k, v in list(configs.values())[0].result(30).items()}
    assert values["min.insync.replicas"] == "2"
    dup = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        dup[name].result(30)
    admin.delete_topics([name])[name].result(60)
    wait_until(lambda: name not in admin.list_topics(timeout=10).topics, timeout=30, what="topic deleted")


def produce_raw(kafka_bootstrap: str, topic: str, partition: int, batch: bytes):
    """One Produce v8 request over a plain socket (what any Kafka client sends, without
    a client's own checks); returns the partition's response."""
    import socket
    import struct

    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    T = ProduceRequest.TopicProduceData
    req = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[T(name=topic, partition_data=[T.PartitionProduceData(index=partition, records=bytes(batch))])])
    req.with_header(correlation_id=5, client_id="raw-test")
    host, port = kafka_bootstrap.split(",")[0].rsplit(":", 1)

    def recv_exact(s, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            assert chunk, f"listener closed the connection after {len(out)} of {n} bytes"
            out += chunk
        return out

    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(req.encode(version=8, header=True, framed=True))
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        body = recv_exact(s, size)
    return ProduceResponse.decode(body[4:], version=8).responses[0].partition_responses[0]


def test_batch_with_a_wrong_crc32c_is_refused_and_the_cluster_carries_on(kcluster, kafka_bootstrap):
    from kcoord.kafka.batches import build_kafka_batch

    topic = new_topic(kcluster, partitions=1)
    batch = bytearray(build_kafka_batch([(b"k", b"v", [], int(time.time() * 1000))]))
    batch[-1] ^= 0xFF
    part = produce_raw(kafka_bootstrap, topic, 0, bytes(batch))
    assert part.error_code == 2 and "CRC" in (part.error_message or "")  # CORRUPT_MESSAGE
    # the listener and the partition still work
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    p.produce(topic, value=b"fine")
    assert p.flush(30) == 0
    assert [r.value for r in kcoord_records(kcluster, topic, 1)] == [b"fine"]


def test_a_kafka_client_cannot_write_the_offsets_topic(kcluster, kafka_bootstrap):
    """Issue 32, finding 9: the listener's Produce to an internal topic is refused per
    partition with INVALID_TOPIC_EXCEPTION (17), as Kafka refuses it; nothing is written.
    (kafka-python will not even try: its partitioner assigns no partition of an internal
    topic; the request is sent as any client could.)"""
    from kcoord.client.admin import Admin
    from kcoord.kafka.batches import build_kafka_batch

    admin = Admin(kcluster)
    end = admin.list_offsets("__consumer_offsets", "latest", [0])[0]
    part = produce_raw(kafka_bootstrap, "__consumer_offsets", 0, build_kafka_batch([(b"k", b"not a record", [], int(time.time() * 1000))]))
    assert part.error_code == 17, part
    assert admin.list_offsets("__consumer_offsets", "latest", [0])[0] == end


def test_ray_data_write_kafka_and_read_kafka_round_trip(kcluster, kafka_bootstrap):
    import ray

    if not hasattr(ray.data, "read_kafka") or not hasattr(ray.data.Dataset, "write_kafka"):
        pytest.skip(f"Ray {ray.__version__} has no ray.data read_kafka/write_kafka (Ray Data's own Kafka connector)")

    topic = new_topic(kcluster, partitions=1)
    rows = [{"id": i, "name": f"n{i}"} for i in range(100)]
    ray.data.from_items(rows).write_kafka(topic, kafka_bootstrap, key_field="name", producer_config={"acks": "all"})
    ds = ray.data.read_kafka(topic, bootstrap_servers=kafka_bootstrap, start_offset="earliest", end_offset="latest")
    got = ds.take_all()
    assert len(got) == 100
    import json

    values = sorted(json.loads(r["value"])["id"] for r in got)
    assert values == list(range(100))
    assert {r["key"] if isinstance(r["key"], str) else r["key"].decode() for r in got} == {f"n{i}" for i in range(100)}
    # kcoord's reader sees the records a Kafka client wrote
    import kcoord.ray_data as krd

    ours = krd.read(kcluster, topic, starting_offsets="earliest").take_all()
    assert sorted(json.loads(r["value"])["id"] for r in ours) == list(range(100))
