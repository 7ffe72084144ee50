"""Eligible leader replicas (KIP-966) across a topic config change: an ELR was formed under
the topic's min.insync.replicas and durability, and says nothing once either changes, so the
controller clears it (Kafka's ClearElrRecord) -- persisted before the new config, so that no
reload finds the new config next to the old ELR."""

from __future__ import annotations

import pytest

from kcoord.protocol.controller import AlterConfigOp, IncrementalAlterConfigsRequest
from kcoord.replication.controller import Persist, ReplicaId, SendLeaderAndIsr
from kcoord.replication.metadata import NO_LEADER, TopicState, partition_key, topic_key
from kcoord.replication.topic_configs import AlterOp

from controller_harness import BROKERS, TOPIC, Harness

LOSSY = {"min.insync.replicas": "2"}


def shrunk_below_min_isr(partitions: int = 1) -> Harness:
    """A page-cache topic (min ISR 2) whose ISR shrank to the leader alone: ELR [1, 2]."""
    h = Harness()
    h.create(config=LOSSY, partitions=partitions)
    for i in range(partitions):
        for b in h.partition(i).replicas:
            h.beat(b, incarnation=f"a{b}", p=i)
        leader = h.partition(i).leader
        resp, _ = h.alter([leader], partition=i)
        assert resp.error_code == 0
        assert sorted(h.stored(i).elr) == sorted(b for b in BROKERS if b != leader)
    return h


def alter_configs(h: Harness, *ops: tuple[str, str | None]) -> list:
    req = IncrementalAlterConfigsRequest(
        TOPIC, [AlterConfigOp(k, AlterOp.SET if v is not None else AlterOp.DELETE, v) for k, v in ops]
    )
    resp, actions = h.core.alter_configs(req, h.now)
    assert resp.error_code == 0, resp.error_message
    return actions


@pytest.mark.parametrize(
    "ops",
    [
        [("min.insync.replicas", "1")],  # lowered, to get writes going (the review's case)
        [("min.insync.replicas", None)],  # back to the default, 1
        [("min.insync.replicas", "3")],  # raised
        [("flush.messages", "1")],  # durable: the HW no longer stands still below min ISR
    ],
)
def test_a_changed_min_isr_or_durability_clears_the_elr(ops):
    """Review of issue 32, finding 1: min ISR 2, ISR [0], ELR [1, 2]. The operator sets min
    ISR 1; the leader commits the frozen tail and acknowledges acks=all writes with ISR [0].
    Its process dies: the controller elected 1 from the stale ELR, and those writes were gone."""
    h = shrunk_below_min_isr()
    epoch = h.stored().partition_epoch
    actions = h.apply(alter_configs(h, *ops))
    p = h.stored()
    assert p.elr == [] and p.isr == [0], "cleared, not recomputed"
    assert p.partition_epoch == epoch + 1, "a partition change, like any other"
    assert not any(h.core.trust.elr_witness.get(ReplicaId(TOPIC, 0, b)) for b in BROKERS)
    # written before the topic record, which is written before anyone hears of it
    keys = [a.key for a in actions if isinstance(a, Persist)]
    assert keys.index(partition_key(TOPIC, 0)) < keys.index(topic_key(TOPIC))
    first_lai = next(i for i, a in enumerate(actions) if isinstance(a, SendLeaderAndIsr))
    assert all(i < first_lai for i, a in enumerate(actions) if isinstance(a, Persist))
    h.now += 100
    h.dead(0)
    assert h.stored().leader == NO_LEADER, "nobody but the ISR member holds the acknowledged writes"


def test_a_config_change_that_keeps_min_isr_and_durability_keeps_the_elr():
    h = shrunk_below_min_isr()
    epoch = h.stored().partition_epoch
    h.apply(alter_configs(h, ("retention.ms", "5000"), ("min.insync.replicas", "2")))
    assert h.stored().elr == [1, 2] and h.stored().partition_epoch == epoch
    h.now += 100
    h.dead(0)
    assert h.stored().leader == 1, "still every acknowledged record's holder"


def test_no_reload_finds_the_new_config_with_the_old_elr():
    """The store may fail at any write of the change (the controller resigns and reloads
    from what the store holds): the partitions' cleared ELRs go first, the topic record
    last, so every prefix is either the old config (with an ELR cleared or not, both safe
    under it) or the new config with every ELR cleared."""
    h = shrunk_below_min_isr(partitions=3)
    before = dict(h.store.data)
    writes = [a for a in alter_configs(h, ("min.insync.replicas", "1")) if isinstance(a, Persist)]
    assert writes
    for n in range(len(writes) + 1):
        h.store.data = dict(before)
        for a in writes[:n]:
            h.store.put(a.key, a.value)
        h2 = h.restart()
        config = TopicState.decode(h2.store.get(topic_key(TOPIC))).config
        for i in range(3):
            if config.get("min.insync.replicas") != "2":
                assert h2.stored(i).elr == [], f"after {n} of {len(writes)} writes, partition {i}"
        assert h2.core.topics[TOPIC].config == config


def test_a_proposal_judged_under_an_older_config_is_refused_and_the_leader_told_the_new_one():
    """A page-cache topic at min ISR 1 (no ELR can form): the operator raises it to 2, and
    the leader, not told yet, proposes to drop its lagging followers. Accepted, ISR [0] and
    ELR [1, 2] under min ISR 2 -- while the leader, still at min ISR 1, moves the HW alone, so
    the ELR member lacks acknowledged records. The proposal carries the config version it
    was judged under; an older one is refused (the leader retries) and the leader is sent
    the current config."""
    from kcoord.protocol.controller import AlterPartitionRequest

    h = Harness()
    h.create(config={"min.insync.replicas": "1"})
    for b in h.partition().replicas:
        h.beat(b, incarnation=f"a{b}")
    p = h.partition()
    version = h.core.topics[TOPIC].config_version
    h.apply(alter_configs(h, ("min.insync.replicas", "2")))
    assert h.core.topics[TOPIC].config_version == version + 1

    def propose(v: int):
        p = h.partition()
        req = AlterPartitionRequest(TOPIC, 0, p.leader, p.leader_epoch, p.partition_epoch, [p.leader], config_version=v)
        return h.core.alter_partition(req, h.now)

    resp, actions = propose(version)
    assert resp.error_code != 0 and h.partition().isr == p.isr and h.partition().elr == []
    told = [a for a in actions if isinstance(a, SendLeaderAndIsr) and a.replica.broker == p.leader]
    assert told and told[0].request.config_version == version + 1
    resp, actions = propose(version + 1)
    h.apply(actions)
    assert resp.error_code == 0 and h.partition().isr == [p.leader] and h.partition().elr
