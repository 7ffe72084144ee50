"""Admin on real Ray: round trips, and one test per error code for bad input, checking the
Kafka code and that the message names the problem."""

from __future__ import annotations

import pytest

from kcoord.client.admin import Admin
from kcoord.client.producer import Producer
from kcoord.protocol.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.ray


def error_of(fn, *args, **kwargs) -> KafkaError:
    with pytest.raises(KafkaError) as info:
        fn(*args, **kwargs)
    return info.value


def test_topic_round_trip_describe_list_offsets_delete(kcluster, topic_name):
    admin = Admin(kcluster)
    desc = admin.create_topic(topic_name, partitions=2, replication_factor=3, config={"min.insync.replicas": 2, "retention.ms": 60_000})
    assert desc["topic"] == topic_name and len(desc["partitions"]) == 2
    assert desc["config"]["min.insync.replicas"] == "2" and desc["config"]["retention.ms"] == "60000"
    for p in desc["partitions"]:
        assert p["leader"] in p["replicas"] and sorted(p["isr"]) == sorted(p["replicas"]) and len(p["replicas"]) == 3
        assert p["leader_epoch"] >= 0 and p["high_watermark"] == 0 and p["log_end_offset"] == 0
    assert topic_name in admin.list_topics()
    with Producer(kcluster) as p:
        p.send_batch(topic_name, values=[b"x"] * 7, partition=1)
    assert admin.list_offsets(topic_name, "earliest") == {0: 0, 1: 0}
    assert admin.list_offsets(topic_name, "latest") == {0: 0, 1: 7}
    assert admin.list_offsets(topic_name, 0) == {0: -1, 1: 0}  # first record with timestamp >= 0
    after = admin.describe_topic(topic_name)["partitions"][1]
    assert after["high_watermark"] == 7 and after["log_end_offset"] == 7
    cluster = admin.describe_cluster()
    assert cluster["cluster"] == kcluster.name and sorted(cluster["brokers"]) == [0, 1, 2]
    admin.delete_topic(topic_name)
    assert topic_name not in admin.list_topics()


@pytest.mark.parametrize(
    "name,needle",
    [
        ("bad name", "illegal characters [' ']"),
        ("bad/slash", "illegal characters ['/']"),
        ("ünïcode", "illegal characters"),
        (".", "cannot be '.'"),
        ("..", "cannot be '..'"),
        ("x" * 250, "250 characters; the limit is 249"),
        ("", "non-empty"),
        ("__reserved", "reserved for internal topics"),
    ],
)
def test_invalid_topic_names(kcluster, name, needle):
    err = error_of(Admin(kcluster).create_topic, name)
    assert err.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert needle in err.message


def test_longest_legal_name_is_accepted(kcluster, topic_name):
    admin = Admin(kcluster)
    name = (topic_name + "." + "x" * 249)[:249]
    admin.create_topic(name, partitions=1, replication_factor=1)
    assert name in admin.list_topics()
    admin.delete_topic(name)


@pytest.mark.parametrize("partitions,needle", [(0, "at least 1 partition, got 0"), (-3, "at least 1 partition, got -3"), (10_001, "limit of 10000"), ("2", "must be an integer")])
def test_invalid_partitions(kcluster, topic_name, partitions, needle):
    err = error_of(Admin(kcluster).create_topic, topic_name, partitions=partitions)
    assert err.code == ErrorCode.INVALID_PARTITIONS
    assert needle in err.message


@pytest.mark.parametrize("rf,needle", [(4, "replication factor 4 is larger than the 3 available brokers"), (0, "must be >= 1, got 0"), (1.5, "must be an integer")])
def test_invalid_replication_factor(kcluster, topic_name, rf, needle):
    err = error_of(Admin(kcluster).create_topic, topic_name, replication_factor=rf)
    assert err.code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert needle in err.message


def test_topic_already_exists(kcluster, topic_name):
    admin = Admin(kcluster)
    admin.create_topic(topic_name, partitions=1, replication_factor=1)
    err = error_of(admin.create_topic, topic_name, partitions=1, replication_factor=1)
    assert err.code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert topic_name in err.message and "already exists" in err.message
    admin.delete_topic(topic_name)


@pytest.mark.parametrize(
    "config,needle",
    [
        ({"retention.bananas": 5}, "unknown topic config ['retention.bananas']"),
        ({"min.insync.replicas": 3}, "min.insync.replicas=3 exceeds replication factor 1"),
        ({"segment.bytes": "lots"}, "segment.bytes"),
        ({"unclean.leader.election.enable": "maybe"}, "unclean.leader.election.enable"),
    ],
)
def test_invalid_config(kcluster, topic_name, config, needle):
    err = error_of(Admin(kcluster).create_topic, topic_name, replication_factor=1, config=config)
    assert err.code == ErrorCode.INVALID_CONFIG
    assert needle in err.message


def test_invalid_replica_assignment(kcluster, topic_name):
    err = error_of(Admin(kcluster).create_topic, topic_name, partitions=2, replication_factor=2, assignment={0: [0, 1], 1: [1, 7]})
    assert err.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "[1, 7]" in err.message and "outside" in err.message
    err = error_of(Admin(kcluster).create_topic, topic_name, partitions=2, replication_factor=2, assignment={0: [0, 0], 1: [1, 2]})
    assert err.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT and "distinct" in err.message


def test_unknown_topic_in_every_call(kcluster):
    admin = Admin(kcluster)
    name = "no-such-topic-admin"
    for call in (admin.delete_topic, admin.describe_topic, admin.list_offsets):
        err = error_of(call, name)
        assert err.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, call
        assert name in err.message and "does not exist" in err.message


def test_list_offsets_bad_spec(kcluster):
    admin = Admin(kcluster)
    for spec in ("middle", -5, 1.5, True):
        with pytest.raises(ValueError, match="offset spec"):
            admin.list_offsets("whatever", spec)
