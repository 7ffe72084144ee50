"""The kafka-python-shaped client API on real Ray: serializers, metrics(),
offsets_for_times, pattern subscriptions, and KafkaAdminClient-style Admin calls.

All tests share the session's 3-broker cluster (``kcluster``) and small topics with
replication factor 1 where replication is not the point (fewer actors: quicker)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from consumer_support import drain

import kcoord
from kcoord import Admin, Consumer, Producer, TopicPartition
from kcoord.protocol.errors import KafkaError

pytestmark = pytest.mark.ray


def test_serializers_deserializers_and_metrics(kcluster, topic_name):
    Admin(kcluster).create_topic(topic_name, partitions=1, replication_factor=1)
    with Producer(kcluster, key_serializer=str.encode, value_serializer=lambda v: json.dumps(v).encode()) as p:
        p.send(topic_name, {"n": 1}, key="a").get(timeout=10)
        p.send(topic_name, None, key=None).get(timeout=10)  # None stays None: a tombstone
        p.send_batch(topic_name, [("b", {"n": 2}), ("c", [3])])
        with pytest.raises(kcoord.SerializationError, match=f"value_serializer failed for a record to topic '{topic_name}' partition 0"):
            p.send(topic_name, {1, 2}, partition=0)  # a set is not JSON
        m = p.metrics()
        assert m["records_sent"] == 4 and m["batches_sent"] >= 2 and set(m) >= {"requests", "retries", "duplicates"}
        m["records_sent"] = -1
        assert p.metrics()["records_sent"] == 4  # a new dict each time
    c = Consumer(topic_name, cluster=kcluster, auto_offset_reset="earliest",
                 key_deserializer=bytes.decode, value_deserializer=json.loads)
    recs = drain(c, 4)
    assert [(r.key, r.value) for r in recs] == [("a", {"n": 1}), (None, None), ("b", {"n": 2}), ("c", [3])]
    assert c.metrics()["records_consumed"] == 4 and c.metrics()["assigned_partitions"] == 1
    c.close()

    # a failing deserializer names topic, partition and offset, and keeps raising there
    def fussy(v: bytes):
        if v == b'{"n": 2}':
            raise ValueError("no twos")
        return v

    c = Consumer(topic_name, cluster=kcluster, auto_offset_reset="earliest", value_deserializer=fussy, max_poll_records=1)
    tp = TopicPartition(topic_name, 0)
    assert [r.offset for r in drain(c, 2)] == [0, 1]
    for _ in range(2):
        with pytest.raises(kcoord.SerializationError, match=f"offset 2 of topic '{topic_name}' partition 0: ValueError: no twos"):
            drain(c, 1)
    assert c.position(tp) == 2
    c.seek(tp, 3)
    assert [r.value for r in drain(c, 1)] == [b"[3]"]
    c.close()


def test_metrics_latency_and_errors(kcluster, topic_name):
    """metrics() carries request latency and failures by error: figures that add up to what
    the test did (records sent and consumed, each failure counted once, under its name)."""
    admin = Admin(kcluster)
    admin.create_topic(topic_name, partitions=2, replication_factor=1, config={"max.message.bytes": 10_000})
    n = 300
    with Producer(kcluster, linger_ms=0) as p:
        assert p.metrics()["request_latency_avg"] is None  # nothing sent yet
        for i in range(n):
            p.send(topic_name, b"v%d" % i, key=b"k%d" % (i % 7))
        p.flush()
        # failures before a record is queued: send() raises and the record counts as failed
        with pytest.raises(kcoord.MessageSizeTooLargeError):
            p.send(topic_name, b"x" * 20_000)
        with pytest.raises(kcoord.UnknownTopicOrPartitionError):
            p.send(f"missing-{topic_name}", b"v")
        with pytest.raises(kcoord.UnknownTopicOrPartitionError):
            p.send_batch(f"missing-{topic_name}", [b"a", b"b"])
        m = p.metrics()
    assert m["records_sent"] == n and m["requests"] >= 2
    avg, mx, p50, p99 = (m[f"request_latency_{k}"] for k in ("avg", "max", "p50", "p99"))
    assert 0 < p50 <= p99 <= mx < 30_000 and 0 < avg <= mx, m
    assert m["record_error_total"] == 4
    assert m["record_errors"] == {"MESSAGE_TOO_LARGE": 1, "UNKNOWN_TOPIC_OR_PARTITION": 3}
    assert m["request_error_total"] == 0 and m["request_errors"] == {}

    # failures after a record is queued: the topic is deleted under a producer that knows
    # it, so the queued records' futures fail (after delivery_timeout_ms at the latest)
    doomed = f"{topic_name}-doomed"
    admin.create_topic(doomed, partitions=1, replication_factor=1)
    with Producer(kcluster, delivery_timeout_ms=2000, retry_backoff_ms=50) as p:
        p.send(doomed, b"first").get(timeout=30)
        admin.delete_topic(doomed)
        futures = [p.send(doomed, b"v") for _ in range(3)]  # metadata cached: queued
        for f in futures:
            with pytest.raises(kcoord.KafkaError):
                f.get(timeout=30)
        m = p.metrics()
    assert m["records_sent"] == 1 and m["record_error_total"] == 3, m
    assert sum(m["record_errors"].values()) == 3, m["record_errors"]
    assert m["request_error_total"] == sum(m["request_errors"].values())

    # consumer: every record counted once, fetch latency measured, a failing
    # deserializer counted as a record error
    c = Consumer(topic_name, cluster=kcluster, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    assert len(drain(c, n)) == n
    m = c.metrics()
    c.close()
    assert m["records_consumed"] == n and m["fetch_error_total"] == 0 and m["record_error_total"] == 0
    assert 0 < m["fetch_latency_p50"] <= m["fetch_latency_p99"] <= m["fetch_latency_max"] < 30_000
    assert 0 < m["fetch_latency_avg"] <= m["fetch_latency_max"]

    def refuse(v: bytes):
        raise ValueError("no")

    c = Consumer(topic_name, cluster=kcluster, auto_offset_reset="earliest", value_deserializer=refuse)
    with pytest.raises(kcoord.SerializationError):
        drain(c, 1)
    m = c.metrics()
    c.close()
    assert m["records_consumed"] == 0 and m["record_errors"] == {"SerializationError": 1}


def test_offsets_for_times(kcluster, topic_name):
    Admin(kcluster).create_topic(topic_name, partitions=2, replication_factor=1)
    with Producer(kcluster) as p:
        for ts in (1_000, 2_000, 3_000):
            p.send(topic_name, b"v", partition=0, timestamp_ms=ts)
        p.flush()
    c = Consumer(cluster=kcluster)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    found = c.offsets_for_times({tp0: 1_500, tp1: 0})
    assert found == {tp0: kcoord.OffsetAndTimestamp(1, 2_000), tp1: None}
    assert c.offsets_for_times({tp0: 0})[tp0] == (0, 1_000)
    assert c.offsets_for_times({tp0: 3_001}) == {tp0: None}
    with pytest.raises(ValueError):
        c.offsets_for_times({tp0: -5})
    c.close()


def test_subscribe_pattern_follows_new_topics(kcluster):
    admin = Admin(kcluster)
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    admin.create_topic(f"{prefix}-a", partitions=1, replication_factor=1)
    admin.create_topic(f"other-{prefix}", partitions=1, replication_factor=1)
    c = Consumer(cluster=kcluster, group_id=f"g-{prefix}", metadata_max_age_ms=300, auto_offset_reset="earliest")
    try:
        c.subscribe(pattern=f"{prefix}-.*")
        assert c.subscription() == {f"{prefix}-a"}
        c.poll(timeout_ms=500)
        assert c.assignment() == {TopicPartition(f"{prefix}-a", 0)}
        admin.create_topic(f"{prefix}-b", partitions=1, replication_factor=1)
        deadline = time.monotonic() + 20
        while TopicPartition(f"{prefix}-b", 0) not in c.assignment() and time.monotonic() < deadline:
            c.poll(timeout_ms=200)
        assert c.assignment() == {TopicPartition(f"{prefix}-a", 0), TopicPartition(f"{prefix}-b", 0)}
        with pytest.raises(ValueError):
            c.subscribe([f"{prefix}-a"], pattern="x")
        # internal topics never match
        c.subscribe(pattern="__consumer.*")
        c.poll(timeout_ms=100)
        assert c.subscription() == set() and c.assignment() == set()
    finally:
        c.close()
        for t in (f"{prefix}-a", f"{prefix}-b", f"other-{prefix}"):
            try:
                admin.delete_topic(t)
            except KafkaError:
                pass


def test_admin_like_kafka_admin_client(kcluster):
    from kcoord import NewTopic, OffsetAndMetadata

    suffix = uuid.uuid4().hex[:6]
    t1, t2, t3 = f"adm1-{suffix}", f"adm2-{suffix}", f"adm3-{suffix}"
    with Admin(kcluster) as admin:
        assert admin.default_replication_factor() == 3  # min(3, brokers), as the CLI's
        # validate_only: checked as the controller checks, nothing created
        assert admin.create_topics([NewTopic(t3, 2, 1)], validate_only=True) == {t3: {"num_partitions": 2, "replication_factor": 1}}
        with pytest.raises(kcoord.InvalidReplicationFactorError):
            admin.create_topics([NewTopic(t3, 1, 5)], validate_only=True)
        with pytest.raises(kcoord.InvalidConfigurationError):
            admin.create_topics([NewTopic(t3, 1, 1, topic_configs={"no.such.key": 1})], validate_only=True)
        assert t3 not in admin.list_topics()

        created = admin.create_topics([NewTopic(t1, 2, 1), NewTopic(t2, 1, -1, topic_configs={"retention.ms": 60_000})])
        assert len(created[t1]["partitions"]) == 2 and len(created[t1]["partitions"][0]["replicas"]) == 1
        assert len(created[t2]["partitions"][0]["replicas"]) == 3 and created[t2]["config"]["retention.ms"] == "60000"
        with pytest.raises(kcoord.TopicAlreadyExistsError):
            admin.create_topics([NewTopic(t1, 1, 1)], validate_only=True)
        with pytest.raises(kcoord.TopicAlreadyExistsError) as info:
            admin.create_topics([NewTopic(t1, 1, 1)])
        assert info.value.code == kcoord.ErrorCode.TOPIC_ALREADY_EXISTS and not info.value.retriable

        with Producer(kcluster) as p:
            p.send_batch(t1, values=[b"x"] * 5, partition=0)
            p.send_batch(t1, values=[b"x"] * 3, partition=1)
            p.send_batch(t2, values=[b"y"] * 4, partition=0)
        group = f"g-adm-{suffix}"
        tp10, tp11, tp20 = TopicPartition(t1, 0), TopicPartition(t1, 1), TopicPartition(t2, 0)
        assert admin.list_consumer_group_offsets(group) == {}
        done = admin.alter_consumer_group_offsets(group, {tp10: 2, tp11: 3, tp20: OffsetAndMetadata(1, "batch-7")})
        assert done[tp20] == OffsetAndMetadata(1, "batch-7")
        listed = admin.list_consumer_group_offsets(group)
        assert {tp: om.offset for tp, om in listed.items()} == {tp10: 2, tp11: 3, tp20: 1}
        assert listed[tp20].metadata == "batch-7"
        assert set(admin.list_consumer_group_offsets(group, [tp20])) == {tp20}
        with pytest.raises(kcoord.OffsetOutOfRangeError, match=r"outside \[0, 5\]"):
            admin.alter_consumer_group_offsets(group, {tp10: 6})
        with pytest.raises(kcoord.UnknownTopicOrPartitionError):
            admin.alter_consumer_group_offsets(group, {TopicPartition(t1, 7): 0})
        # reset_offsets and the Spark commit go through the same commit
        assert admin.reset_offsets(group, t1, "latest") == {0: 5, 1: 3}
        from kcoord.spark.groups import commit as spark_commit

        assert spark_commit(kcluster, group, {t2: {0: 4}}) == {t2: {0: 4}}
        assert {tp: om.offset for tp, om in admin.list_consumer_group_offsets(group).items()} == {tp10: 5, tp11: 3, tp20: 4}
        # a consumer of the group starts where the Admin put it
        c = Consumer(cluster=kcluster, group_id=group, enable_auto_commit=False)
        c.assign([tp10])
        assert c.committed(tp10) == 5
        c.close()

        admin.delete_topics([t1, t2])
        assert not {t1, t2} & set(admin.list_topics())
        with pytest.raises(kcoord.UnknownTopicOrPartitionError):
            admin.delete_topics([t1])
    with pytest.raises(RuntimeError, match="closed"):
        admin.list_topics()


def test_asyncio_producer_and_consumer(kcluster, topic_name):
    import asyncio

    Admin(kcluster).create_topic(topic_name, partitions=2, replication_factor=1)

    async def main() -> None:
        ticks = 0

        async def ticker() -> None:  # the loop keeps running while the clients wait
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        tick = asyncio.create_task(ticker())
        async with kcoord.AIOProducer(kcluster, value_serializer=str.encode) as p:
            md = await p.send_and_wait(topic_name, "first", partition=0)
            assert (md.topic, md.partition, md.offset) == (topic_name, 0, 0)
            futures = [await p.send(topic_name, f"v{i}", partition=i % 2) for i in range(10)]
            offsets = [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
            assert sorted(offsets) == sorted([(0, i) for i in range(1, 6)] + [(1, i) for i in range(5)])
            with pytest.raises(kcoord.UnknownTopicOrPartitionError):
                await p.send(topic_name, "x", partition=9)
            assert p.metrics()["records_sent"] == 11
        group = f"g-{topic_name}"
        async with kcoord.AIOConsumer(topic_name, cluster=kcluster, group_id=group, auto_offset_reset="earliest",
                                      enable_auto_commit=False, consumer_timeout_ms=20_000, value_deserializer=bytes.decode) as c:
            seen = []
            async for record in c:
                seen.append(record.value)
                if len(seen) == 6:
                    break
            await c.commit()  # the positions after the 6 records handed out, not the whole poll
            committed = sum([await c.committed(TopicPartition(topic_name, p)) or 0 for p in (0, 1)])
            assert committed == 6
            async for record in c:
                seen.append(record.value)
                if len(seen) == 11:
                    break
        assert sorted(seen) == sorted(["first"] + [f"v{i}" for i in range(10)])
        tick.cancel()
        assert ticks > 20

    asyncio.run(main())


def test_local_cluster_leaves_the_users_ray_settings_alone(tmp_path):
    """In a fresh process: local_cluster starts its private Ray with kcoord's settings, but
    the driver stays in Ray's anonymous namespace and the process environment is as it was
    (a later ray.init by the user sees no kcoord setting)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = """
import json, os, ray, kcoord
before = {k: v for k, v in os.environ.items() if k.startswith("RAY_")}
with kcoord.local_cluster(brokers=1, group_coordinators=0) as c:
    ns = ray.get_runtime_context().namespace
    kcoord.Admin(c).create_topic("t", partitions=1, replication_factor=1)
    with kcoord.Producer(c) as p:
        p.send("t", b"x").get(timeout=30)
    during = {k: v for k, v in os.environ.items() if k.startswith("RAY_")}
print(json.dumps({"ns": ns, "before": before, "during": during}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["ns"] != "kcoord", "the user's driver was moved into kcoord's namespace"
    from kcoord.cluster.local import LOCAL_RAY_ENV

    # (Ray itself sets RAY_CLIENT_MODE and RAY_USAGE_STATS_ENABLED in its driver.)
    assert not set(LOCAL_RAY_ENV) & (set(doc["during"]) | set(doc["before"])), "local_cluster changed the process environment"
