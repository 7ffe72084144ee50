"""Topic config versions (issue 32, finding 4): an older config never replaces a newer one.

The controller numbers a topic's config (``TopicState.config_version``, bumped by every
change and stored with the topic record) and every LeaderAndIsr carries the number; a
replica applies a config only when its number is newer than the one it runs, whatever the
epochs. A replica process starts on the config it was created with, which Ray replays
when it restarts the actor: until a LeaderAndIsr tells it the current one it runs nothing
that depends on it (retention, the cleaner) and does not trust it to say its appends were
fsynced."""

from __future__ import annotations

import dataclasses
import random

import msgpack

from controller_harness import TOPIC, Harness
from replication_helpers import batch, lai, leader_and_isr, make_replica, produce

from kcoord.log import Log, LogConfig, MemoryLog
from kcoord.protocol.controller import AlterConfigOp, IncrementalAlterConfigsRequest
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import SendLeaderAndIsr
from kcoord.replication.metadata import TopicState, topic_key
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.replica import Replica
from sim.disk import SimDisk
from kcoord.replication.topic_configs import AlterOp


def _set(h: Harness, key: str, value: str | None):
    op = AlterConfigOp(name=key, op=AlterOp.SET, value=value) if value is not None else AlterConfigOp(name=key, op=AlterOp.DELETE)
    resp, actions = h.core.alter_configs(IncrementalAlterConfigsRequest(topic=TOPIC, ops=[op]), h.now)
    assert resp.error_code == 0, resp.error_message
    h.apply(actions)
    return [a for a in actions if isinstance(a, SendLeaderAndIsr)]


# -- the controller numbers configs ------------------------------------------------------


def test_every_config_change_gets_a_higher_version_stored_with_the_topic_and_sent_along():
    h = Harness()
    h.create(config={"min.insync.replicas": "2"})
    created = [a for a in h.sent if isinstance(a, SendLeaderAndIsr)]
    assert created and {a.request.config_version for a in created} == {0}
    lais = _set(h, "min.insync.replicas", "1")
    assert {a.request.config_version for a in lais} == {1}
    assert TopicState.decode(h.store.get(topic_key(TOPIC))).config_version == 1
    assert {a.request.config_version for a in _set(h, "flush.messages", "1")} == {2}
    # a controller that restarts on the store goes on from there
    h2 = h.restart()
    assert h2.core.topics[TOPIC].config_version == 2
    h2.sent.clear()
    assert {a.request.config_version for a in _set(h2, "flush.messages", None)} == {3}


def test_a_topic_record_stored_before_versions_loads_as_version_0():
    old = msgpack.packb(
        {"name": "t", "num_partitions": 1, "replication_factor": 3, "config": {"retention.ms": "5"}, "internal": False, "created_ms": 7},
        use_bin_type=True,
    )
    topic = TopicState.decode(old)
    assert topic.config_version == 0 and topic.config == {"retention.ms": "5"}


# -- the replica applies only newer configs --------------------------------------------


def _with_config(req, version: int, config=None, **keys):
    """``req`` carrying a topic config (Kafka key names, or as keyword arguments with
    underscores for dots) at ``version``."""
    config = dict(config or {}, **{k.replace("_", "."): v for k, v in keys.items()})
    return dataclasses.replace(req, config=config, config_version=version)


def test_a_late_leader_and_isr_does_not_roll_the_config_back():
    """Replayed: an older LeaderAndIsr answered after alter_configs reverted min ISR 2 -> 1
    and flush.messages None -> 1."""
    r = make_replica(0, log=MemoryLog(LogConfig()))
    old = _with_config(lai(0, 1, (0, 1, 2), partition_epoch=1), 1, min_insync_replicas="1", flush_messages="1")
    new = _with_config(lai(0, 1, (0, 1, 2), partition_epoch=2), 2, min_insync_replicas="2")
    assert leader_and_isr(r, old)[0].error_code == 0
    assert r.config.min_insync_replicas == 1 and r.log.config.flush_messages == 1
    assert leader_and_isr(r, new)[0].error_code == 0
    assert r.config.min_insync_replicas == 2 and r.log.config.flush_messages is None
    # the old one again (a duplicate, or late), then one of an older leader epoch
    leader_and_isr(r, old)
    leader_and_isr(r, _with_config(lai(0, 0, (0, 1, 2), partition_epoch=0), 1, min_insync_replicas="1"))
    assert r.config.min_insync_replicas == 2 and r.log.config.flush_messages is None
    assert r.config_version == 2


def test_a_newer_config_applies_whatever_the_epochs():
    r = make_replica(0)
    leader_and_isr(r, _with_config(lai(0, 5, (0, 1, 2), partition_epoch=9), 3, min_insync_replicas="1"))
    # a LeaderAndIsr fenced by its leader epoch still carries the controller's config
    resp, _ = leader_and_isr(r, _with_config(lai(0, 4, (0, 1, 2), partition_epoch=8), 4, min_insync_replicas="2"))
    assert resp.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert r.config.min_insync_replicas == 2 and r.config_version == 4


# -- a restarted process does not trust its creation-time config ------------------------


def test_a_restarted_replica_runs_no_retention_on_its_creation_time_config():
    disk = SimDisk(random.Random(0))
    created = {"segment.bytes": "150", "retention.ms": "10", "flush.messages": "1"}  # as the actor was created

    def process(now: int) -> Replica:
        log = Log("/m/broker-0/t-0", LogConfig.from_topic_config(created), now_ms=now, fs=disk)
        return Replica(TOPIC, 0, 0, log, ReplicationConfig(log_retention_check_interval_ms=1000), now)

    r = process(0)
    leader_and_isr(r, _with_config(lai(0, 1, (0,), replicas=(0,)), 0, created))
    for i in range(3):
        produce(r, batch(2, tag=b"b%d-" % i), f"p{i}", 10, acks=1)
    assert len(r.log.segments) == 3 and r.hw == 6
    r.close(20)
    # the operator set retention.ms=-1 (version 1); the process dies, and Ray restarts it
    # with the arguments it was created with
    restarted = process(100_000)
    assert restarted.config_version == -1
    restarted.tick(200_000)
    assert restarted.log.log_start_offset == 0, "no retention on a config that may be stale"
    current = {**created, "retention.ms": "-1"}
    leader_and_isr(restarted, _with_config(lai(0, 2, (0,), replicas=(0,)), 1, current))
    restarted.tick(300_000)
    assert restarted.log.log_start_offset == 0 and restarted.config_version == 1
    # with the current config known, upkeep runs on it: retention.ms back to 10
    leader_and_isr(restarted, _with_config(lai(0, 2, (0,), replicas=(0,)), 2, created))
    restarted.tick(400_000)
    assert restarted.log.log_start_offset == 4, "the expired segments below the HW went"


def test_a_restarted_replica_created_fsynced_refuses_its_first_leadership_all_the_same():
    """Its creation config says every append was fsynced, but the topic may have been
    altered to flush.messages unset before the crash: it cannot know it lost nothing."""
    log = MemoryLog(LogConfig(flush_messages=1))
    r = make_replica(0, log=log)
    leader_and_isr(r, _with_config(lai(0, 1, (0,)), 0, flush_messages="1"))
    produce(r, batch(2), "p", 1, acks=1)
    restarted = Replica(TOPIC, 0, 0, log.crash(), None, 100)
    resp, _ = leader_and_isr(restarted, _with_config(lai(0, 3, (0,)), 1, flush_messages="1"))
    assert resp.error_code == ErrorCode.FENCED_LEADER_EPOCH and restarted.role == "none"
    assert leader_and_isr(restarted, _with_config(lai(0, 4, (0,)), 1, flush_messages="1"))[0].error_code == 0
