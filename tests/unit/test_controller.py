"""ControllerState: topic creation and deletion, AlterPartition, controller restarts,
producer ids and metrics. Elections and failure handling are in test_controller_failover.py."""

from __future__ import annotations

import pytest

from kcoord.protocol.controller import (
    AlterPartitionRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    InitProducerIdRequest,
    MetadataRequest,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import (
    CreateReplica,
    DeleteReplica,
    Persist,
    ReplicaId,
    SendLeaderAndIsr,
)
from kcoord.replication.metadata import ClusterState, cluster_key

from controller_harness import BROKERS, TOPIC, Harness, lai_targets, persists


# -- topic creation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, code",
    [
        (dict(name="bad name!"), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (dict(name=""), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (dict(name="__internal"), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (dict(name="x", partitions=0), ErrorCode.INVALID_PARTITIONS),
        (dict(name="x", replication_factor=0), ErrorCode.INVALID_REPLICATION_FACTOR),
        (dict(name="x", replication_factor=4), ErrorCode.INVALID_REPLICATION_FACTOR),
        (dict(name="x", replication_factor=2, config={"min.insync.replicas": "3"}), ErrorCode.INVALID_CONFIG),
        (dict(name="x", config={"no.such.key": "1"}), ErrorCode.INVALID_CONFIG),
        (dict(name="x", config={"min.insync.replicas": "many"}), ErrorCode.INVALID_CONFIG),
        (dict(name="x", config={"segment.bytes": "-5"}), ErrorCode.INVALID_CONFIG),
        (dict(name="x", partitions=2, replication_factor=2, assignment={0: [0, 1]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (dict(name="x", replication_factor=2, assignment={0: [0, 0]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (dict(name="x", replication_factor=2, assignment={0: [0, 7]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_create_topic_validation(kw, code):
    h = Harness()
    writes = h.store.writes
    resp, actions = h.core.create_topic(CreateTopicsRequest(**kw), 0)
    assert resp.error_code == code, resp.error_message
    assert resp.error_message
    assert actions == [] and h.store.writes == writes and h.core.topics == {}


def test_create_existing_topic_is_refused():
    h = Harness()
    h.create()
    resp, actions = h.core.create_topic(CreateTopicsRequest(name=TOPIC, partitions=1, replication_factor=3), 0)
    assert resp.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and actions == []


def test_assignment_spreads_leaders_and_replicas_over_brokers():
    h = Harness()
    h.create("spread", partitions=6, rf=3)
    parts = [h.partition(i, "spread") for i in range(6)]
    for p in parts:
        assert sorted(p.replicas) == BROKERS, "RF=3 on 3 brokers: every broker once"
        assert p.leader == p.replicas[0] and p.leader_epoch == 0 and p.isr == p.replicas
    leaders = [p.leader for p in parts]
    assert all(leaders.count(b) == 2 for b in BROKERS), leaders
    h.create("rf2", partitions=3, rf=2)
    loads = {b: 0 for b in BROKERS}
    for i in range(3):
        for b in h.partition(i, "rf2").replicas:
            loads[b] += 1
    assert sorted(loads.values()) == [2, 2, 2]


def test_create_topic_persists_before_creating_and_informing_replicas():
    h = Harness()
    actions = h.create(partitions=2, config={"min.insync.replicas": "2"})
    kinds = [type(a).__name__ for a in actions]
    last_persist = max(i for i, k in enumerate(kinds) if k == "Persist")
    assert last_persist < kinds.index("CreateReplica") < kinds.index("SendLeaderAndIsr")
    assert {a.replica for a in actions if isinstance(a, CreateReplica)} == {ReplicaId(TOPIC, p, b) for p in (0, 1) for b in BROKERS}
    create = next(a for a in actions if isinstance(a, CreateReplica))
    assert create.config["min.insync.replicas"] == "2"
    # leaders are told first, so followers find them ready
    for p in (0, 1):
        targets = [a.replica.broker for a in actions if isinstance(a, SendLeaderAndIsr) and a.replica.partition == p]
        assert targets[0] == h.partition(p).leader and sorted(targets) == BROKERS


def test_metadata_reports_leaders_and_offline_replicas():
    h = Harness()
    h.create()
    h.dead(2)
    md = h.core.metadata(MetadataRequest([TOPIC, "nope"]))
    t, missing = md.topics
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    (p,) = t.partitions
    assert (p.leader, p.isr, p.offline_replicas) == (0, [0, 1], [2])


def test_delete_topic_persists_deletion_and_stops_watching():
    h = Harness()
    h.create()
    resp, actions = h.core.delete_topic(DeleteTopicsRequest(TOPIC), 0)
    h.apply(actions)
    assert resp.error_code == 0 and h.store.keys("topic/") == [] and h.store.keys("partition/") == []
    assert isinstance(actions[0], Persist) and {a.replica.broker for a in actions if isinstance(a, DeleteReplica)} == set(BROKERS)
    assert h.core.detector.members() == []


# -- AlterPartition ------------------------------------------------------------------------


def test_alter_partition_shrinks_and_expands_with_fencing():
    h = Harness()
    h.create()
    resp, actions = h.alter([0, 1])
    assert resp.error_code == 0 and resp.isr == [0, 1] and resp.partition_epoch == 1
    assert persists(actions) and h.stored().isr == [0, 1] and h.stored().partition_epoch == 1
    # the same request again (a retry or a duplicate) is answered as applied, changing nothing
    resp, actions = h.alter([0, 1], partition_epoch=0)
    assert resp.error_code == 0 and actions == [] and (resp.isr, resp.partition_epoch) == ([0, 1], 1)
    # a different change built on the stale partition epoch is refused
    resp, actions = h.alter([0, 1, 2], partition_epoch=0)
    assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION and actions == []
    assert (resp.isr, resp.partition_epoch) == ([0, 1], 1), "the answer carries the current state"
    # a deposed leader (stale leader epoch) or another broker is fenced
    resp, _ = h.alter([0, 1, 2], leader_epoch=5)
    assert resp.error_code == ErrorCode.FENCED_LEADER_EPOCH
    resp, _ = h.alter([1, 2], leader=1)
    assert resp.error_code == ErrorCode.FENCED_LEADER_EPOCH
    # the ISR must keep the leader and name only assigned replicas
    resp, _ = h.alter([1, 2])
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    resp, _ = h.alter([0, 5])
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    resp, actions = h.alter([0, 1, 2])
    assert resp.error_code == 0 and resp.isr == [0, 1, 2] and resp.partition_epoch == 2
    snap = h.core.metrics_snapshot()
    assert (snap["isr_shrinks"], snap["isr_expands"]) == (1, 1)


def test_alter_partition_refuses_dead_replicas_as_ineligible():
    h = Harness()
    h.create()
    h.dead(2)  # the controller shrinks the ISR itself
    assert h.partition().isr == [0, 1]
    epoch = h.partition().partition_epoch
    resp, actions = h.alter([0, 1, 2])
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA
    assert h.stored().isr == [0, 1] and h.stored().partition_epoch == resp.partition_epoch == epoch + 1
    h.beat(2, incarnation="i1")  # back: now it may join
    # Seed 1336: a copy of the refused request (Ray retries, the network repeats) arrived
    # once 2 was live and was applied while the leader, told "no", left 2 out of its HW.
    resp, _ = h.alter([0, 1, 2], partition_epoch=epoch)
    assert resp.error_code == ErrorCode.INVALID_UPDATE_VERSION and h.stored().isr == [0, 1]
    resp, _ = h.alter([0, 1, 2])
    assert resp.error_code == 0 and h.stored().isr == [0, 1, 2]


def test_alter_partition_for_unknown_partition():
    h = Harness()
    resp, _ = h.core.alter_partition(AlterPartitionRequest(topic="x", partition=0, leader=0, leader_epoch=0, partition_epoch=0, new_isr=[0]), 0)
    assert resp.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- restart -------------------------------------------------------------------------------


def test_restart_bumps_controller_epoch_and_resends_every_follower_its_state():
    h = Harness()
    h.create(partitions=2)
    h.dead(0)  # partition 0: leader 1 at epoch 1
    epoch = h.core.controller_epoch
    h2 = h.restart()
    assert h2.core.controller_epoch == epoch + 1
    assert ClusterState.decode(h2.store.get(cluster_key())).controller_epoch == epoch + 1
    assert isinstance(h2.sent[0], Persist) and h2.sent[0].key == cluster_key()
    sends = [a for a in h2.sent if isinstance(a, SendLeaderAndIsr)]
    # every replica but each partition's leader (leaders are verified by their first
    # heartbeat: one that restarted meanwhile must not be handed its old leadership)
    followers = {(p, b) for p in (0, 1) for b in h2.partition(p).replicas if b != h2.partition(p).leader}
    assert {(a.replica.partition, a.replica.broker) for a in sends} == followers
    assert all(a.request.controller_epoch == epoch + 1 for a in sends)
    p0 = [a.request for a in sends if a.replica.partition == 0]
    assert {(r.leader, r.leader_epoch, tuple(r.isr)) for r in p0} == {(1, 1, (1, 2))}
    # the leader answers as the same process, one epoch behind nothing: nothing to resend;
    # one that missed its state (behind) gets it from _verify
    assert lai_targets(h2.beat(1, incarnation="", leader_epoch=0)) == [1]
    assert {a.replica for a in h2.sent if isinstance(a, CreateReplica)} == {ReplicaId(TOPIC, p, b) for p in (0, 1) for b in BROKERS}


def test_restart_completes_a_persisted_election_and_keeps_epochs_growing():
    h = Harness()
    h.create()
    actions = h.core.on_heartbeat(ReplicaId(TOPIC, 0, 0), None, 0, dead=True)
    # the controller died right after persisting: the LeaderAndIsr never left
    h.apply([a for a in actions if isinstance(a, Persist)])
    h2 = h.restart()
    sends = [a for a in h2.sent if isinstance(a, SendLeaderAndIsr)]
    assert {(a.request.leader, a.request.leader_epoch) for a in sends} == {(1, 1)}
    # a later election continues from the persisted epoch: never two leaders per epoch
    h2.beat(2, incarnation="")  # the new controller hears from the candidate first
    h2.dead(1)
    assert (h2.stored().leader, h2.stored().leader_epoch) == (2, 2)


def test_producer_id_blocks_never_overlap_across_restarts():
    h = Harness()
    seen: list[range] = []
    for _ in range(3):
        for count in (1, 10, 3):
            resp, actions = h.core.init_producer_id(InitProducerIdRequest(count=count))
            assert resp.error_code == 0 and persists(actions), "persisted before answering"
            h.apply(actions)
            seen.append(range(resp.producer_id, resp.producer_id + resp.count))
        h = h.restart()
    ids = [i for r in seen for i in r]
    assert len(ids) == len(set(ids)) == 42
    resp, actions = h.core.init_producer_id(InitProducerIdRequest(count=0))
    assert resp.error_code == ErrorCode.INVALID_REQUEST and actions == []


def test_metrics_snapshot_counts():
    h = Harness()
    h.create(partitions=2)
    h.dead(0, p=0)  # failover on p0
    h.dead(2, p=1)  # follower failure on p1 (replicas [1, 2, 0])
    snap = h.core.metrics_snapshot()
    assert snap["partitions"] == 2
    assert snap["failovers_total"] == 1 and snap["failovers_failed"] == 0
    assert snap["replicas_failed"] == 2 and snap["isr_shrinks"] == 1
    assert snap["under_replicated_partitions"] == 2 and snap["offline_partitions"] == 0
    assert snap["controller_epoch"] == 1
    assert snap["failover_ms_p50"] == -1.0, "no new leader confirmed yet"


def test_alter_partition_refuses_a_member_judged_from_a_process_that_restarted():
    """Seed 100472 (KIP-903): the leader still held a follower's progress from before a power
    loss and proposed it for the ISR; the restarted process had an empty log."""
    h = Harness()
    h.create()
    h.dead(2)
    h.beat(2, incarnation="new")  # 2 restarted and answers again
    resp, _ = h.alter([0, 1, 2], incarnations={1: "i0", 2: "old"})
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA and "restarted" in resp.error_message
    assert h.stored().isr == [0, 1]
    resp, _ = h.alter([0, 1, 2], incarnations={2: "new"})
    assert resp.error_code == 0 and h.stored().isr == [0, 1, 2]


def test_a_controller_that_just_started_lets_no_replica_join_the_isr_before_hearing_it():
    """Seed 43725 (KIP-903): the leader proposed follower 2 on the progress of a process
    that then lost power; the proposal reached a controller that had just started, which
    knew only the incarnation its predecessor stored -- the one the leader named -- and
    took it. The restarted follower, on another node, held nothing."""
    h = Harness()
    h.create()
    h.beat(2, incarnation="before")
    h.alter([0, 1])  # 2 falls behind and leaves the ISR
    h = h.restart()  # the new controller has heard nobody yet
    resp, _ = h.alter([0, 1, 2], incarnations={1: "i0", 2: "before"})
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA and "2" in resp.error_message
    assert h.stored().isr == [0, 1]
    h.beat(2, incarnation="after")  # the process it hears is another one: still refused
    resp, _ = h.alter([0, 1, 2], incarnations={2: "before"})
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA and h.stored().isr == [0, 1]
    resp, _ = h.alter([0, 1, 2], incarnations={2: "after"})  # judged from the process it heard
    assert resp.error_code == 0 and h.stored().isr == [0, 1, 2]
