"""Changing topics on a running cluster (issue 14, "live configs and admin"): a config change
taking effect on the running replicas without a restart, create_partitions then producing
to and consuming from a new partition, delete_records moving the earliest offset that a
consumer then resets past, and bad input answered with Kafka's codes while the cluster
stays healthy. Uses the shared ``kcluster``."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import ray

from consumer_support import drain
from kcoord import records
from kcoord.client.admin import Admin, ConfigResource, NewPartitions
from kcoord.client.consumer import Consumer
from kcoord.client.producer import Producer
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.protocol.replication import ProduceRequest, ProduceResponse
from waiting import wait_until

pytestmark = pytest.mark.ray


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _replicas(cluster, topic: str, partition: int = 0) -> list[dict]:
    md = cluster.partition_metadata(topic, partition, refresh=True)
    return [ray.get(cluster.handle(cluster.replica_name(topic, partition, b)).describe.remote(), timeout=30) for b in md.replicas]


def _produce_raw(cluster, topic: str, value: bytes) -> ProduceResponse:
    """One batch straight to the leader: what the replica itself decides (the Producer
    would refuse a record above the max.message.bytes it has cached, client-side)."""
    data = records.build_batch_columns([value])
    return cluster.call_leader(
        topic, 0, "produce", lambda epoch: ProduceRequest(topic, 0, data, acks=-1, timeout_ms=10_000, current_leader_epoch=epoch), ProduceResponse
    )


def test_a_config_change_takes_effect_on_the_running_replicas(kcluster):
    admin = Admin(kcluster)
    topic = _name("cfg-live")
    admin.create_topic(topic, partitions=1, replication_factor=3)
    before = {r["broker"]: r["incarnation"] for r in _replicas(kcluster, topic)}
    assert _produce_raw(kcluster, topic, b"x" * 5000).error_code == 0

    described = admin.alter_topic_config(topic, set={"max.message.bytes": 2000, "segment.bytes": 1024})
    assert described["max.message.bytes"] == {"value": "2000", "source": "DYNAMIC_TOPIC_CONFIG", "is_default": False, "read_only": False}
    refused = _produce_raw(kcluster, topic, b"x" * 5000)
    assert refused.error_code == ErrorCode.MESSAGE_TOO_LARGE, refused
    # segment.bytes: every replica rolls small segments from now on
    with Producer(kcluster) as p:
        for i in range(12):
            p.send(topic, value=b"%03d" % i + b"y" * 300, partition=0)
            p.flush()

    def segments_everywhere() -> bool:
        infos = _replicas(kcluster, topic)
        return all(r["log_end_offset"] == 13 and len(list(Path(r["directory"]).glob("*.log"))) >= 3 for r in infos)

    wait_until(segments_everywhere, timeout=30, what="every replica to roll 1 KiB segments")
    # back to the default: the large batch is accepted again
    described = admin.alter_configs([ConfigResource("topic", topic, {"max.message.bytes": None})])[topic]
    assert described["max.message.bytes"]["source"] == "DEFAULT_CONFIG"
    assert _produce_raw(kcluster, topic, b"x" * 5000).error_code == 0
    # described through kafka-python's call too, and nothing restarted
    assert admin.describe_configs([ConfigResource("topic", topic)])[topic]["segment.bytes"]["value"] == "1024"
    after = {r["broker"]: r["incarnation"] for r in _replicas(kcluster, topic)}
    assert after == before, "the replicas applied the config without a restart"


def test_new_partitions_take_records_and_consumers_read_them(kcluster):
    admin = Admin(kcluster)
    topic = _name("grow")
    admin.create_topic(topic, partitions=1, replication_factor=2)
    with Producer(kcluster) as early:
        early.send(topic, value=b"p0", partition=0).get(30)
        result = admin.create_partitions({topic: NewPartitions(3)})
        parts = result[topic]["partitions"]
        assert [p["partition"] for p in parts] == [0, 1, 2]
        assert all(p["leader"] >= 0 and len(p["replicas"]) == 2 for p in parts)
        # a producer made before sees them once it refreshes its metadata (here: on a send
        # to a partition it did not know)
        assert early.partitions_for(topic) == {0}
        for i in (1, 2):
            meta = early.send(topic, value=b"p%d" % i, partition=i).get(30)
            assert (meta.partition, meta.offset) == (i, 0)
        assert early.partitions_for(topic) == {0, 1, 2}
        with pytest.raises(KafkaError) as info:
            early.send(topic, value=b"nope", partition=3)
        assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with Consumer(cluster=kcluster, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, i) for i in range(3)])
        got = drain(c, 3, timeout=30)
    assert sorted((r.partition, r.value) for r in got) == [(0, b"p0"), (1, b"p1"), (2, b"p2")]
    assert admin.list_offsets(topic, "latest") == {0: 1, 1: 1, 2: 1}


def test_delete_records_moves_the_earliest_offset_and_a_consumer_resets_past_it(kcluster):
    admin = Admin(kcluster)
    topic = _name("delrec")
    admin.create_topic(topic, partitions=1, replication_factor=3)
    tp = TopicPartition(topic, 0)
    with Producer(kcluster) as p:
        p.send_batch(topic, values=[b"v%02d" % i for i in range(20)], partition=0)
        p.flush()
    assert admin.delete_records({tp: 12}) == {tp: {"low_watermark": 12}}
    # answered once every replica that could lead had moved its log start (the low watermark)
    assert [r["log_start_offset"] for r in _replicas(kcluster, topic)] == [12, 12, 12]
    assert admin.list_offsets(topic, "earliest") == {0: 12}
    with Consumer(cluster=kcluster, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 0)  # below the log start now: OFFSET_OUT_OF_RANGE, then reset
        got = drain(c, 8, timeout=30)
    assert [r.offset for r in got] == list(range(12, 20))
    assert got[0].value == b"v12"
    # -1: up to the high watermark; the followers follow from their fetch answers
    assert admin.delete_records({tp: -1})[tp]["low_watermark"] == 20
    assert all(r["log_start_offset"] == 20 for r in _replicas(kcluster, topic))


def test_bad_changes_are_refused_with_kafka_codes_and_the_cluster_carries_on(kcluster):
    admin = Admin(kcluster)
    topic = _name("badchg")
    admin.create_topic(topic, partitions=2, replication_factor=3, config={"retention.ms": 60_000})
    tp = TopicPartition(topic, 0)
    with Producer(kcluster) as p:
        p.send_batch(topic, values=[b"a", b"b", b"c"], partition=0)
        p.flush()
    cases = [
        (lambda: admin.alter_topic_config(topic, set={"no.such.key": 1}), ErrorCode.INVALID_CONFIG, "no.such.key"),
        (lambda: admin.alter_topic_config(topic, set={"segment.bytes": "big"}), ErrorCode.INVALID_CONFIG, "segment.bytes"),
        (lambda: admin.alter_topic_config(topic, set={"min.insync.replicas": 4}), ErrorCode.INVALID_CONFIG, "min.insync.replicas"),
        (lambda: admin.alter_topic_config("__consumer_offsets", set={"retention.ms": 1000}), ErrorCode.POLICY_VIOLATION, "retention.ms"),
        (lambda: admin.describe_topic_config("no-such-topic"), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no-such-topic"),
        (lambda: admin.create_partitions({topic: NewPartitions(1)}), ErrorCode.INVALID_PARTITIONS, "only grow"),
        (lambda: admin.create_partitions({topic: 2}), ErrorCode.INVALID_PARTITIONS, "only grow"),
        (lambda: admin.delete_records({tp: 4}), ErrorCode.OFFSET_OUT_OF_RANGE, "high watermark"),
        (lambda: admin.delete_records({TopicPartition(topic, 7): 0}), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "no partition 7"),
    ]
    for call, code, named in cases:
        with pytest.raises(KafkaError) as info:
            call()
        assert info.value.code == code and named in str(info.value), (code, info.value)
    # nothing changed, and the cluster still serves the topic
    config = admin.describe_topic_config(topic)
    assert config["retention.ms"]["value"] == "60000" and config["segment.bytes"]["is_default"]
    assert admin.describe_topic(topic)["partitions"][1]["partition"] == 1 and len(kcluster.partitions_for(topic)) == 2
    assert admin.list_offsets(topic, "earliest") == {0: 0, 1: 0}
    with Producer(kcluster) as p:
        assert p.send(topic, value=b"d", partition=0).get(30).offset == 3
    with Consumer(cluster=kcluster, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert [r.value for r in drain(c, 4, timeout=30)] == [b"a", b"b", b"c", b"d"]
