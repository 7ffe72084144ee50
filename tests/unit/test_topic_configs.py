"""Topic changes after creation in the controller core (no Ray): describe_configs,
incremental alter_configs, create_partitions -- validation, refusal codes, persist-then-tell
ordering and placement -- and a replica applying a new config and DeleteRecords."""

from __future__ import annotations

import pytest

import dataclasses

from kcoord.log import LogConfig
from kcoord.protocol.controller import (
    AlterConfigOp,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    LeaderAndIsrRequest,
    MetadataRequest,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import DeleteRecordsRequest
from kcoord.replication.controller import CreateReplica, Persist, ReplicaId, SendLeaderAndIsr
from kcoord.replication.metadata import TopicState, partition_key, topic_key
from kcoord.replication.topic_configs import AlterOp, ConfigSource, builtin_defaults
from kcoord.replication.topic_plan import TOPIC_CONFIG_KEYS, spread_replicas

from controller_harness import BROKERS, TOPIC, Harness, config
from replication_helpers import batch, call, lai, leader_and_isr, make_replica, produce, pump, replies, serve_pending


def SET(name, value):
    return AlterConfigOp(name=name, op=AlterOp.SET, value=value)


def DELETE(name):
    return AlterConfigOp(name=name, op=AlterOp.DELETE)


def alter(h: Harness, *ops, topic: str = TOPIC, validate_only: bool = False):
    resp, actions = h.core.alter_configs(IncrementalAlterConfigsRequest(topic=topic, ops=list(ops), validate_only=validate_only), h.now)
    h.apply(actions)
    return resp, actions


def described(h: Harness, topic: str = TOPIC, keys=None) -> dict:
    resp = h.core.describe_configs(DescribeConfigsRequest(topic=topic, keys=keys))
    assert resp.error_code == 0, resp.error_message
    return {e.name: (e.value, e.source) for e in resp.configs}


# -- describe ----------------------------------------------------------------------------


def test_describe_reports_every_key_with_its_source():
    h = Harness(cfg=config(default_topic_config={"retention.ms": "60000"}))
    h.create(config={"min.insync.replicas": "2"})
    d = described(h)
    assert set(d) == TOPIC_CONFIG_KEYS
    assert d["min.insync.replicas"] == ("2", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert d["retention.ms"] == ("60000", ConfigSource.STATIC_BROKER_CONFIG)
    assert d["segment.bytes"] == (str(LogConfig().segment_bytes), ConfigSource.DEFAULT_CONFIG)
    assert d["unclean.leader.election.enable"] == ("false", ConfigSource.DEFAULT_CONFIG)
    assert set(builtin_defaults()) == TOPIC_CONFIG_KEYS


def test_describe_selected_keys_and_refusals():
    h = Harness()
    h.create()
    assert set(described(h, keys=["retention.ms"])) == {"retention.ms"}
    resp = h.core.describe_configs(DescribeConfigsRequest(topic=TOPIC, keys=["no.such.key"]))
    assert resp.error_code == ErrorCode.INVALID_CONFIG and "no.such.key" in resp.error_message
    resp = h.core.describe_configs(DescribeConfigsRequest(topic="missing"))
    assert resp.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- incremental alter ---------------------------------------------------------------------


def test_set_and_delete_are_per_key_and_persisted_before_replicas_hear():
    h = Harness()
    h.create(config={"min.insync.replicas": "2", "segment.bytes": "1000"})
    h.sent.clear()
    resp, actions = alter(h, SET("retention.ms", "5000"), DELETE("segment.bytes"))
    assert resp.error_code == 0, resp.error_message
    # untouched keys keep their value; the deleted one is back at its default
    assert h.core.topics[TOPIC].config == {"min.insync.replicas": "2", "retention.ms": "5000"}
    stored = TopicState.decode(h.store.get(topic_key(TOPIC)))
    assert stored.config == {"min.insync.replicas": "2", "retention.ms": "5000"}
    d = {e.name: (e.value, e.source) for e in resp.configs}
    assert d["segment.bytes"] == (str(LogConfig().segment_bytes), ConfigSource.DEFAULT_CONFIG)
    assert d["retention.ms"] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    # the Persist of the topic comes before every LeaderAndIsr, which carry the new config
    kinds = [type(a).__name__ for a in actions]
    assert kinds[0] == "Persist" and actions[0].key == topic_key(TOPIC)
    lais = [a for a in actions if isinstance(a, SendLeaderAndIsr)]
    assert {a.replica.broker for a in lais} == set(BROKERS)
    assert all(a.request.config["retention.ms"] == "5000" and "segment.bytes" not in a.request.config for a in lais)
    # the same epochs: a config change is no new leadership
    p = h.partition()
    assert all((a.request.leader_epoch, a.request.partition_epoch) == (p.leader_epoch, p.partition_epoch) for a in lais)


def test_new_config_survives_a_controller_restart_and_reaches_recreated_replicas():
    h = Harness()
    h.create()
    alter(h, SET("max.message.bytes", "2048"))
    h2 = h.restart()
    assert h2.core.topics[TOPIC].config == {"max.message.bytes": "2048"}
    creates = [a for a in h2.sent if isinstance(a, CreateReplica)]
    assert creates and all(a.config["max.message.bytes"] == "2048" for a in creates)


def test_dead_replicas_are_not_told_but_get_the_config_when_they_return():
    h = Harness()
    h.create()
    h.dead(2)
    h.sent.clear()
    _, actions = alter(h, SET("retention.ms", "1234"))
    assert {a.replica.broker for a in actions if isinstance(a, SendLeaderAndIsr)} == {0, 1}
    back = h.beat(2, incarnation="new")
    lais = [a for a in back if isinstance(a, SendLeaderAndIsr) and a.replica.broker == 2]
    assert lais and lais[0].request.config["retention.ms"] == "1234"


@pytest.mark.parametrize(
    "ops, code, named",
    [
        ([SET("no.such.key", "1")], ErrorCode.INVALID_CONFIG, "no.such.key"),
        ([SET("log.cleaner.enable", "false")], ErrorCode.INVALID_CONFIG, "log.cleaner.enable"),  # a broker key
        ([SET("segment.bytes", "-5")], ErrorCode.INVALID_CONFIG, "segment.bytes"),
        ([SET("retention.ms", "soon")], ErrorCode.INVALID_CONFIG, "retention.ms"),
        ([SET("cleanup.policy", "shred")], ErrorCode.INVALID_CONFIG, "cleanup.policy"),
        ([SET("min.insync.replicas", "4")], ErrorCode.INVALID_CONFIG, "min.insync.replicas"),
        ([SET("unclean.leader.election.enable", "perhaps")], ErrorCode.INVALID_CONFIG, "unclean.leader.election.enable"),
        ([SET("retention.ms", None)], ErrorCode.INVALID_CONFIG, "retention.ms"),
        ([SET("retention.ms", "1"), DELETE("retention.ms")], ErrorCode.INVALID_REQUEST, "retention.ms"),
        ([AlterConfigOp(name="cleanup.policy", op=AlterOp.APPEND, value="compact")], ErrorCode.INVALID_REQUEST, "APPEND"),
        ([AlterConfigOp(name="retention.ms", op=9, value="1")], ErrorCode.INVALID_REQUEST, "op 9"),
        ([], ErrorCode.INVALID_REQUEST, "no config change"),
    ],
)
def test_bad_changes_are_refused_and_change_nothing(ops, code, named):
    h = Harness()
    h.create(config={"retention.ms": "100"})
    writes = h.store.writes
    resp, actions = alter(h, *ops)
    assert resp.error_code == code and named in resp.error_message, resp.error_message
    assert actions == [] and h.store.writes == writes
    assert h.core.topics[TOPIC].config == {"retention.ms": "100"}


def test_validate_only_and_unchanged_configs_write_nothing():
    h = Harness()
    h.create()
    writes = h.store.writes
    resp, actions = alter(h, SET("retention.ms", "10"), validate_only=True)
    assert resp.error_code == 0 and actions == [] and h.store.writes == writes
    assert {e.name: e.value for e in resp.configs}["retention.ms"] == "10"
    assert h.core.topics[TOPIC].config == {}
    resp, actions = alter(h, DELETE("retention.ms"))  # already the default
    assert resp.error_code == 0 and actions == []
    resp, _ = h.core.alter_configs(IncrementalAlterConfigsRequest(topic="missing", ops=[SET("retention.ms", "1")]), 0)
    assert resp.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_internal_topic_refuses_changes_that_would_lose_group_state():
    h = Harness()
    h.apply(h.core.create_topic(CreateTopicsRequest(name="__consumer_offsets", partitions=2, replication_factor=3, config={"retention.ms": "-1"}), 0)[1])
    for op in (SET("retention.ms", "1000"), DELETE("retention.ms"), SET("cleanup.policy", "delete")):
        resp, actions = alter(h, op, topic="__consumer_offsets")
        assert resp.error_code == ErrorCode.POLICY_VIOLATION and op.name in resp.error_message
        assert actions == []
    resp, _ = alter(h, SET("max.message.bytes", "4096"), topic="__consumer_offsets")
    assert resp.error_code == 0
    resp, _ = alter(h, SET("cleanup.policy", "compact"), topic="__consumer_offsets")  # an older cluster's upgrade
    assert resp.error_code == 0 and h.core.topics["__consumer_offsets"].config["cleanup.policy"] == "compact"
    d = {e.name: e for e in resp.configs}
    assert d["retention.ms"].read_only and not d["max.message.bytes"].read_only
    resp, actions = h.core.create_partitions(CreatePartitionsRequest(topic="__consumer_offsets", count=3), 0)
    assert resp.error_code == ErrorCode.POLICY_VIOLATION and actions == []


# -- create_partitions ----------------------------------------------------------------------


def test_the_decisions_topic_of_transactional_writes_cannot_grow():
    """A driver finds a write's decision in the partition its prefix hashes to over the
    topic's partition count: growing the topic would hide every earlier decision, and a
    driver recovering a decided batch would abort what it had to commit."""
    from kcoord.txn_write import DECISIONS_TOPIC

    h = Harness()
    h.apply(h.core.create_topic(CreateTopicsRequest(name=DECISIONS_TOPIC, partitions=1, replication_factor=3, config={"cleanup.policy": "compact"}), 0)[1])
    writes = h.store.writes
    resp, actions = h.core.create_partitions(CreatePartitionsRequest(topic=DECISIONS_TOPIC, count=4), h.now)
    assert resp.error_code == ErrorCode.POLICY_VIOLATION and DECISIONS_TOPIC in resp.error_message, resp
    assert actions == [] and h.store.writes == writes and h.core.topics[DECISIONS_TOPIC].num_partitions == 1


def test_new_partitions_continue_the_creation_placement():
    h = Harness()
    resp, actions = h.core.create_topic(CreateTopicsRequest(name="grow", partitions=2, replication_factor=2), 0)
    h.apply(actions)
    resp, actions = h.core.create_partitions(CreatePartitionsRequest(topic="grow", count=5), h.now)
    assert resp.error_code == 0, resp.error_message
    h.apply(actions)
    expected = spread_replicas("grow", BROKERS, 2, range(5))  # what creating it with 5 would give
    assert {i: h.core.partitions[("grow", i)].replicas for i in range(5)} == expected
    assert [p.partition for p in resp.topic.partitions] == list(range(5))
    md = h.core.metadata(MetadataRequest(topics=["grow"])).topics[0]
    assert len(md.partitions) == 5 and all(p.leader == expected[p.partition][0] for p in md.partitions)


def test_create_partitions_persists_partitions_then_the_topic_then_creates_and_tells():
    h = Harness()
    h.create(partitions=1)
    resp, actions = h.core.create_partitions(CreatePartitionsRequest(topic=TOPIC, count=3), h.now)
    assert resp.error_code == 0
    h.apply(actions)
    persists = [a.key for a in actions if isinstance(a, Persist)]
    assert persists == [partition_key(TOPIC, 1), partition_key(TOPIC, 2), topic_key(TOPIC)]
    kinds = [type(a).__name__ for a in actions]
    last_persist = max(i for i, k in enumerate(kinds) if k == "Persist")
    assert last_persist < kinds.index("CreateReplica") < kinds.index("SendLeaderAndIsr")
    assert {a.replica for a in actions if isinstance(a, CreateReplica)} == {ReplicaId(TOPIC, p, b) for p in (1, 2) for b in BROKERS}
    assert TopicState.decode(h.store.get(topic_key(TOPIC))).num_partitions == 3
    assert h.restart().core.topics[TOPIC].num_partitions == 3


def test_a_create_partitions_cut_short_leaves_nothing_after_a_reload():
    h = Harness()
    h.create(partitions=1)
    _, actions = h.core.create_partitions(CreatePartitionsRequest(topic=TOPIC, count=2), h.now)
    # the store failed before the topic record: only the new partition was written
    first = next(a for a in actions if isinstance(a, Persist))
    h.store.put(first.key, first.value)
    h2 = Harness(h.cfg, h.store)
    assert h2.core.topics[TOPIC].num_partitions == 1
    assert (TOPIC, 1) not in h2.core.partitions and h2.store.get(partition_key(TOPIC, 1)) is None


@pytest.mark.parametrize(
    "kw, code",
    [
        (dict(count=2), ErrorCode.INVALID_PARTITIONS),  # no growth
        (dict(count=1), ErrorCode.INVALID_PARTITIONS),  # shrink
        (dict(count=10_001), ErrorCode.INVALID_PARTITIONS),
        (dict(count=3, assignment=[[0, 1, 1]]), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (dict(count=3, assignment=[[0, 1, 7]]), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (dict(count=4, assignment=[[0, 1, 2]]), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (dict(topic="missing", count=3), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ],
)
def test_create_partitions_refusals(kw, code):
    h = Harness()
    h.create(partitions=2)
    writes = h.store.writes
    resp, actions = h.core.create_partitions(CreatePartitionsRequest(**{"topic": TOPIC, **kw}), h.now)
    assert resp.error_code == code and resp.error_message, resp
    assert actions == [] and h.store.writes == writes and h.core.topics[TOPIC].num_partitions == 2


def test_create_partitions_explicit_assignment_and_validate_only():
    h = Harness()
    h.create(partitions=1)
    resp, actions = h.core.create_partitions(CreatePartitionsRequest(topic=TOPIC, count=2, assignment=[[2, 0, 1]], validate_only=True), h.now)
    assert resp.error_code == 0 and actions == [] and h.core.topics[TOPIC].num_partitions == 1
    assert resp.topic.partitions[1].replicas == [2, 0, 1]
    resp, actions = h.core.create_partitions(CreatePartitionsRequest(topic=TOPIC, count=2, assignment=[[2, 0, 1]]), h.now)
    h.apply(actions)
    assert h.partition(1).replicas == [2, 0, 1] and h.partition(1).leader == 2


# -- the replica side ----------------------------------------------------------------------


def test_a_leader_and_isr_with_a_new_config_applies_it_to_the_running_replica():
    r = make_replica(0)
    leader_and_isr(r, lai(0, 1, (0,), replicas=(0,)))
    big = batch(1, tag=b"x" * 3000)
    assert replies(produce(r, big, "p1", 10, acks=1))["p1"].error_code == 0
    same_epoch = dataclasses.replace(lai(0, 1, (0,), replicas=(0,)), config={"max.message.bytes": "1000", "min.insync.replicas": "2", "retention.ms": "5"}, config_version=1)
    response, _ = leader_and_isr(r, same_epoch)
    assert response.error_code == 0, response.error_message
    assert r.log.config.max_batch_bytes == 1000 and r.log.config.retention_ms == 5 and r.config.min_insync_replicas == 2
    assert replies(produce(r, big, "p2", 20, acks=1))["p2"].error_code == ErrorCode.MESSAGE_TOO_LARGE
    # a config it cannot parse (never sent by the controller) leaves the running one
    leader_and_isr(r, dataclasses.replace(same_epoch, config={"segment.bytes": "lots"}, config_version=2))
    assert r.log.config.max_batch_bytes == 1000


def test_delete_records_moves_the_log_start_up_to_the_hw_only_and_followers_follow():
    leader, follower = make_replica(0), make_replica(1)
    leader_and_isr(leader, lai(0, 1, (0, 1), replicas=(0, 1)))
    leader_and_isr(follower, lai(0, 1, (0, 1), replicas=(0, 1)))
    produce(leader, batch(3, tag=b"a"), "p1", 10, acks=1)
    produce(leader, batch(3, tag=b"b"), "p2", 10, acks=1)
    for now in range(20, 26):
        serve_pending(follower, leader, now)
    assert leader.hw == 6 == follower.hw

    def delete(replica, offset):
        """The answer, once follower 1 (in the ISR) has moved its log start too."""
        token = ("delete", offset)
        acts = replica.handle(DeleteRecordsRequest(topic="t", partition=0, offset=offset), token, 30)
        for now in range(31, 34):
            if token in replies(acts):
                break
            acts += pump(follower, leader, now)
        return replies(acts)[token]

    above = delete(leader, 7)
    assert above.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and "high watermark" in above.error_message
    assert delete(leader, -7).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert delete(follower, 1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.log.log_start_offset == 0
    ok = delete(leader, 4)
    assert ok.error_code == 0 and ok.low_watermark == 4 == leader.log.log_start_offset
    assert follower.log.log_start_offset == 4, "learnt from the fetch answers"
    assert delete(leader, 2).low_watermark == 4, "never moves back"
    assert delete(leader, -1).low_watermark == 6, "-1 is the high watermark"
    assert follower.log.log_start_offset == 6


def test_delete_records_refuses_the_internal_offsets_topic():
    from kcoord.log import MemoryLog
    from kcoord.replication.replica import Replica

    r = Replica("__consumer_offsets", 0, 0, MemoryLog(LogConfig(flush_messages=1)))
    call(r, dataclasses.replace(lai(0, 1, (0,), replicas=(0,)), topic="__consumer_offsets"))
    answer = call(r, DeleteRecordsRequest(topic="__consumer_offsets", partition=0, offset=0))[0]
    assert answer.error_code == ErrorCode.POLICY_VIOLATION
