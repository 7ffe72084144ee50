"""ControllerState (the FailoverCoordinator's core) with an explicit clock and a MemoryStore.

The shell runs actions in order and applies every Persist before anything after it, so
:class:`Harness` does the same and checks, at each SendLeaderAndIsr, that the store already
holds exactly the partition state the message announces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kcoord.protocol.controller import (
    AlterPartitionRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    HeartbeatResponse,
    InitProducerIdRequest,
    LeaderAndIsrResponse,
    MetadataRequest,
)
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import (
    ControllerConfig,
    ControllerState,
    CreateReplica,
    DeleteReplica,
    Persist,
    ReplicaId,
    SendHeartbeat,
    SendLeaderAndIsr,
)
from kcoord.replication.metadata import NO_LEADER, ClusterState, PartitionState, cluster_key, partition_key
from kcoord.replication.metastore import MemoryStore

BROKERS = [0, 1, 2]
TOPIC = "t"


def config(**kw) -> ControllerConfig:
    base = dict(heartbeat_interval_ms=200, session_timeout_ms=3000, replica_startup_grace_ms=0, auto_leader_rebalance=False)
    base.update(kw)
    return ControllerConfig(**base)


@dataclass
class Harness:
    """One controller, its store, and everything it asked for so far."""

    cfg: ControllerConfig = field(default_factory=config)
    store: MemoryStore = field(default_factory=MemoryStore)
    sent: list = field(default_factory=list)
    now: int = 0

    def __post_init__(self) -> None:
        self.core = ControllerState("c", self.cfg)
        self.apply(self.core.start(dict(self.store.data), BROKERS, 0, self.now))

    def apply(self, actions: list) -> list:
        """Execute like the shell: Persist at once and in order; check that each
        LeaderAndIsr announces what the store already holds."""
        for a in actions:
            if isinstance(a, Persist):
                if a.value is None:
                    self.store.delete(a.key)
                else:
                    self.store.put(a.key, a.value)
            elif isinstance(a, SendLeaderAndIsr):
                raw = self.store.get(partition_key(a.request.topic, a.request.partition))
                assert raw is not None, f"{a} sent before its partition was persisted"
                stored = PartitionState.decode(raw)
                req = a.request
                assert (stored.leader, stored.leader_epoch, stored.partition_epoch, stored.isr) == (
                    req.leader,
                    req.leader_epoch,
                    req.partition_epoch,
                    req.isr,
                ), f"{a} announces a state the store does not hold yet ({stored})"
                assert req.controller_epoch == ClusterState.decode(self.store.get(cluster_key())).controller_epoch
        self.sent += actions
        return actions

    def restart(self) -> "Harness":
        """A new controller on the same store (the old one's memory is gone)."""
        return Harness(self.cfg, self.store, now=self.now)

    def create(self, name: str = TOPIC, partitions: int = 1, rf: int = 3, **kw) -> list:
        """Partition i gets replicas [i, i+1, ...] (mod brokers) unless told otherwise."""
        if name == TOPIC:
            kw.setdefault("assignment", {i: [(i + j) % len(BROKERS) for j in range(rf)] for i in range(partitions)})
        resp, actions = self.core.create_topic(CreateTopicsRequest(name=name, partitions=partitions, replication_factor=rf, **kw), self.now)
        assert resp.error_code == 0, resp.error_message
        actions = self.apply(actions)
        if name == TOPIC:
            # New replicas answer their first heartbeat at once, as real ones do. (No
            # incarnation: tests that care about processes give their own.)
            for i in range(partitions):
                for b in self.partition(i).replicas:
                    self.beat(b, incarnation="", p=i)
        return actions

    def partition(self, p: int = 0, topic: str = TOPIC) -> PartitionState:
        return self.core.partitions[(topic, p)]

    def stored(self, p: int = 0, topic: str = TOPIC) -> PartitionState:
        return PartitionState.decode(self.store.get(partition_key(topic, p)))

    def dead(self, broker: int, p: int = 0) -> list:
        return self.apply(self.core.on_heartbeat(ReplicaId(TOPIC, p, broker), None, self.now, dead=True))

    def beat(self, broker: int, incarnation: str = "i0", p: int = 0, **status) -> list:
        rid = ReplicaId(TOPIC, p, broker)
        part = self.partition(p)
        fields = dict(
            topic=TOPIC,
            partition=p,
            broker=broker,
            role="leader" if part.leader == broker else ("follower" if part.leader != NO_LEADER else "none"),
            leader=part.leader,
            leader_epoch=part.leader_epoch,
            partition_epoch=part.partition_epoch,
            log_end_offset=10,
            incarnation=incarnation,
        )
        fields.update(status)
        self.core.on_heartbeat_sent(rid, self.now)
        return self.apply(self.core.on_heartbeat(rid, HeartbeatResponse(**fields), self.now))

    def alter(self, new_isr, leader: int | None = None, leader_epoch: int | None = None, partition_epoch: int | None = None, partition: int = 0):
        p = self.partition(partition)
        req = AlterPartitionRequest(
            topic=TOPIC,
            partition=partition,
            leader=p.leader if leader is None else leader,
            leader_epoch=p.leader_epoch if leader_epoch is None else leader_epoch,
            partition_epoch=p.partition_epoch if partition_epoch is None else partition_epoch,
            new_isr=list(new_isr),
        )
        resp, actions = self.core.alter_partition(req, self.now)
        self.apply(actions)
        return resp, actions


def lai_targets(actions) -> list[int]:
    return [a.replica.broker for a in actions if isinstance(a, SendLeaderAndIsr)]


def persists(actions) -> list[Persist]:
    return [a for a in actions if isinstance(a, Persist)]


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
    # the same request again carries a stale partition epoch
    resp, actions = h.alter([0, 1], partition_epoch=0)
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
    resp, actions = h.alter([0, 1, 2])
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA and actions == []
    assert h.stored().isr == [0, 1]
    h.beat(2, incarnation="i1")  # back: now it may join
    resp, _ = h.alter([0, 1, 2])
    assert resp.error_code == 0 and h.stored().isr == [0, 1, 2]


def test_alter_partition_for_unknown_partition():
    h = Harness()
    resp, _ = h.core.alter_partition(AlterPartitionRequest(topic="x", partition=0, leader=0, leader_epoch=0, partition_epoch=0, new_isr=[0]), 0)
    assert resp.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- failures ------------------------------------------------------------------------------


def test_leader_failure_elects_next_isr_member_with_epoch_persisted_first():
    h = Harness()
    h.create()
    h.now = 1000
    actions = h.dead(0)
    assert isinstance(actions[0], Persist), "persist before telling anyone"
    p = h.stored()
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (1, 1, 1, [1, 2])
    assert lai_targets(actions) == [1, 2], "the dead replica is not called; the new leader first"
    snap = h.core.metrics_snapshot()
    assert snap["failovers_total"] == 1 and snap["replicas_failed"] == 1
    # failover time: detection -> the new leader accepted its LeaderAndIsr
    lai = next(a for a in actions if isinstance(a, SendLeaderAndIsr) and a.replica.broker == 1)
    h.core.on_leader_and_isr_result(lai.replica, lai.request, LeaderAndIsrResponse(), 1040)
    assert h.core.metrics_snapshot()["failover_ms_last"] == 40.0


def test_leader_failure_by_session_timeout():
    h = Harness()
    h.create()
    for b in BROKERS:
        h.beat(b)
    h.now = 2000
    for b in (1, 2):
        h.beat(b)
    h.now = 3001
    actions = h.apply(h.core.tick(h.now))
    assert h.partition().leader == 1 and persists(actions)
    assert any(isinstance(a, SendHeartbeat) for a in actions)


def test_follower_failure_shrinks_isr():
    h = Harness()
    h.create()
    actions = h.dead(1)
    assert persists(actions) and h.stored().isr == [0, 2] and h.stored().partition_epoch == 1
    assert h.stored().leader_epoch == 0, "the leader keeps its epoch"
    assert lai_targets(actions) == [0, 2]
    assert h.core.metrics_snapshot()["isr_shrinks"] == 1
    assert h.core.partition_counts()["under_replicated_partitions"] == 1


def test_restarted_follower_leaves_isr_then_is_told_who_leads():
    h = Harness()
    h.create()
    h.beat(1, incarnation="first")
    actions = h.beat(1, incarnation="second")  # restarted between two beats
    assert h.stored().isr == [0, 2], "its memory is gone: out of the ISR until it catches up"
    assert lai_targets(actions)[-1] == 1
    snap = h.core.metrics_snapshot()
    assert (snap["replicas_failed"], snap["replicas_recovered"]) == (1, 1)


def test_whole_isr_dead_goes_offline_and_returns_with_an_isr_member():
    h = Harness()
    h.create()
    h.dead(1)
    h.dead(2)
    assert h.stored().isr == [0], "never below one"
    actions = h.dead(0)
    p = h.stored()
    assert (p.leader, p.isr) == (NO_LEADER, [0]) and p.leader_epoch == 1
    assert persists(actions) and lai_targets(actions) == []
    assert h.core.partition_counts()["offline_partitions"] == 1
    assert h.core.metadata(MetadataRequest([TOPIC])).topics[0].partitions[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert h.core.metrics_snapshot()["failovers_failed"] == 1
    # a replica outside the ISR coming back changes nothing (no unclean election)
    before = h.stored()
    actions = h.beat(1, incarnation="b")
    assert h.stored() == before and h.stored().leader == NO_LEADER
    assert lai_targets(actions) == [], "nothing to tell anyone"
    # the ISR member returns: it leads again at a new epoch
    actions = h.beat(0, incarnation="a")
    p = h.stored()
    assert (p.leader, p.leader_epoch, p.isr) == (0, 2, [0])
    assert lai_targets(actions) == [0, 1]
    assert h.core.partition_counts()["offline_partitions"] == 0


def test_unclean_election_when_topic_allows_it():
    h = Harness()
    h.create(config={"unclean.leader.election.enable": "true"})
    h.beat(2, log_end_offset=50)
    h.beat(1, log_end_offset=20)
    h.dead(1)
    h.dead(2)
    h.dead(0)
    assert h.stored().leader == NO_LEADER
    h.beat(1, incarnation="x", log_end_offset=20)
    h.beat(2, incarnation="y", log_end_offset=50)
    p = h.stored()
    # 1 came back first and was elected uncleanly; 2 then only rejoins as a follower
    assert p.leader == 1 and p.isr == [1]
    assert h.core.metrics_snapshot()["unclean_elections"] == 1


def test_dead_replica_is_recreated_by_tick():
    h = Harness(config(ensure_replica_interval_ms=500))
    h.create()
    h.dead(2)
    actions = h.apply(h.core.tick(h.now))
    assert ReplicaId(TOPIC, 0, 2) in [a.replica for a in actions if isinstance(a, CreateReplica)]
    h.core.on_replica_created(ReplicaId(TOPIC, 0, 2), True, h.now)
    assert h.core.metrics_snapshot()["replicas_recreated"] == 1
    h.now += 100
    assert not [a for a in h.core.tick(h.now) if isinstance(a, CreateReplica)], "not again before the interval"


def test_restart_stuck_only_after_failed_for_restart_stuck_ms():
    h = Harness(config(restart_stuck_ms=10_000))
    h.create()
    rid = ReplicaId(TOPIC, 0, 2)
    assert not h.core.restart_stuck(rid, h.now), "a live replica is never stuck"
    h.dead(2)
    assert not h.core.restart_stuck(rid, h.now + 9_999)
    assert h.core.restart_stuck(rid, h.now + 10_000)
    h.core.on_replica_replaced(rid)
    assert h.core.metrics_snapshot()["replicas_replaced_stuck"] == 1
    h.beat(2, incarnation="i1")
    assert not h.core.restart_stuck(rid, h.now + 60_000), "back alive: not stuck"


def test_preferred_leader_rebalance():
    h = Harness()
    h.create()
    h.dead(0)
    assert h.partition().leader == 1
    assert persists(h.apply(h.core.rebalance_leaders(h.now))) == [], "preferred replica is dead"
    h.beat(0, incarnation="new")
    assert h.partition().leader == 1 and 0 not in h.partition().isr
    assert h.apply(h.core.rebalance_leaders(h.now)) == [], "back, but not in the ISR yet"
    h.alter([0, 1, 2])  # the leader adds it once it caught up
    actions = h.apply(h.core.rebalance_leaders(h.now))
    p = h.stored()
    assert (p.leader, p.leader_epoch) == (0, 2)
    assert isinstance(actions[0], Persist) and lai_targets(actions) == [0, 1, 2]
    assert h.core.metrics_snapshot()["preferred_leader_elections"] == 1


def test_auto_rebalance_runs_on_its_interval():
    h = Harness(config(auto_leader_rebalance=True, leader_rebalance_interval_ms=1000))
    h.create()
    h.dead(0)
    h.beat(0, incarnation="new")
    h.alter([0, 1, 2])
    h.now = 999
    h.apply(h.core.tick(h.now))
    assert h.partition().leader == 1
    h.now = 1000
    h.apply(h.core.tick(h.now))
    assert h.partition().leader == 0


def test_auto_rebalance_waits_for_the_per_broker_imbalance_threshold():
    # 33 partitions: broker 0 is the preferred leader of 11 (0, 3, ..., 30).
    h = Harness(config(auto_leader_rebalance=True, leader_rebalance_interval_ms=1000, leader_imbalance_per_broker_percentage=10))
    h.create(partitions=33)

    def move_away(p: int) -> None:
        h.dead(0, p=p)
        h.beat(0, incarnation="new", p=p)
        h.alter([0, 1, 2], partition=p)
        assert h.partition(p).leader == 1 and 0 in h.partition(p).isr

    move_away(0)
    h.now = 1000
    h.apply(h.core.tick(h.now))
    assert h.partition(0).leader == 1, "1 of 11 (9%) led elsewhere is within the 10% threshold"
    move_away(3)
    h.now = 2000
    h.apply(h.core.tick(h.now))
    assert (h.partition(0).leader, h.partition(3).leader) == (0, 0), "2 of 11 (18%) is over it: both move back"
    move_away(6)
    h.apply(h.core.rebalance_leaders(h.now))
    assert h.partition(6).leader == 0, "the admin rebalance ignores the threshold"


def test_stale_replica_view_is_corrected_from_its_heartbeat():
    h = Harness()
    h.create()
    h.dead(1)  # ISR shrink at partition epoch 1
    actions = h.beat(0, partition_epoch=0)  # the leader missed the LeaderAndIsr
    assert lai_targets(actions) == [0]
    assert h.beat(0) == [], "up to date: nothing to send"


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


# -- regressions found by the simulation (tests/sim) -----------------------------------------


def test_restarted_controller_elects_an_isr_member_that_came_back_while_it_was_down():
    """Seed 4: the whole ISR died (partition offline, ISR [0]); broker 0 came back while the
    controller was down. The new controller's detector saw 0 alive from its first beat, so
    no RECOVERED event ever fired, and nothing else elected it: offline forever."""
    h = Harness()
    h.create()
    h.dead(1)
    h.dead(2)
    h.dead(0)
    assert h.stored().leader == NO_LEADER
    h2 = h.restart()
    h2.beat(1, incarnation="b")  # not in the ISR: still offline
    assert h2.stored().leader == NO_LEADER
    actions = h2.beat(0, incarnation="a")
    p = h2.stored()
    assert (p.leader, p.isr) == (0, [0]) and p.leader_epoch == 2
    assert isinstance(actions[0], Persist) and lai_targets(actions)[0] == 0


# -- topics without per-append fsync: ELR and restarted (suspect) replicas -------------------
#
# Found by the simulation in page-cache / flush.ms mode (seeds 38, 60, 158, 7): a crash can
# lose a replica's unflushed tail, so "any ISR member holds every acknowledged record" stops
# being true once a replica restarts. Durable topics (flush.messages=1) keep the classic rules.

LOSSY = {"min.insync.replicas": "2"}
DURABLE = {"min.insync.replicas": "2", "flush.messages": "1"}


def beat_all(h: Harness, incarnations=("a0", "a1", "a2")) -> None:
    for b, inc in zip(BROKERS, incarnations):
        h.beat(b, incarnation=inc)


def test_replicas_leaving_below_min_isr_become_eligible_leaders():
    """Seed 38: the ISR shrank to the leader alone while the followers still held every
    acknowledged record; the leader then crashed, lost its unflushed tail and, as the only
    ISR member, was elected again: the followers truncated to it."""
    h = Harness()
    h.create(config=LOSSY)
    beat_all(h)
    resp, _ = h.alter([0, 1])
    assert resp.error_code == 0 and h.stored().elr == [], "still at min.insync.replicas"
    h.alter([0])
    assert h.stored().elr == [1], "left while the ISR fell below min.insync.replicas"
    actions = h.dead(0)
    p = h.stored()
    assert (p.leader, p.isr) == (1, [1]) and isinstance(actions[0], Persist)
    assert p.elr == [0], "the old leader held everything acked when it died"
    # back at min.insync.replicas: nobody outside the ISR is promised anything any more
    h.beat(2, incarnation="a2")
    h.alter([1, 2])
    assert h.stored().elr == []


def test_durable_topics_keep_the_classic_rules():
    h = Harness()
    h.create(config=DURABLE)
    beat_all(h)
    h.alter([0])
    assert h.stored().elr == []
    h.dead(0)
    assert h.stored().leader == NO_LEADER, "whole ISR dead: offline until it returns"


def test_restarted_sole_isr_member_waits_for_the_eligible_replica():
    """Seed 60: the only ISR member crashed, came back as a new process (its unflushed tail
    possibly gone) and was elected, while the replica holding the acknowledged records was
    still cut off; everyone then truncated to the restarted replica's shorter log."""
    h = Harness()
    h.create(config=LOSSY)
    beat_all(h)
    h.alter([0])  # ELR [1, 2]
    h.dead(1)
    h.dead(2)
    h.dead(0)
    assert h.stored().leader == NO_LEADER
    h.beat(0, incarnation="b0")  # a new process: suspect
    assert h.stored().leader == NO_LEADER, "it may have lost acknowledged records: wait"
    h.beat(1, incarnation="a1")  # the very process that left the ISR: trusted
    p = h.stored()
    assert (p.leader, p.isr) == (1, [1])
    # the restarted replica rejoins the ISR once caught up, and is trusted again
    h.beat(0, incarnation="b0")
    h.alter([0, 1])
    assert 0 in h.stored().isr


def test_restarted_eligible_replica_is_not_trusted():
    h = Harness()
    h.create(config=LOSSY)
    beat_all(h)
    h.alter([0])  # ELR [1, 2]
    h.dead(1)
    h.dead(2)
    h.dead(0)
    h.beat(1, incarnation="b1", log_end_offset=12)  # restarted: it may have lost what it held
    h.beat(2, incarnation="b2", log_end_offset=3)
    assert h.stored().leader == NO_LEADER, "the ISR member may still come back intact"
    # every candidate is back and none is trusted: the longest log holds what the others do
    h.beat(0, incarnation="b0", log_end_offset=7)
    p = h.stored()
    assert (p.leader, p.isr) == (1, [1])


def test_restarted_controller_does_not_trust_the_elr():
    """Seed 89: an ELR member crashed and restarted while the controller was down; the new
    controller, seeing it answer, elected it from the persisted ELR although it had lost
    records that the (dead) ISR member still held."""
    h = Harness()
    h.create(config=LOSSY)
    beat_all(h)
    h.alter([0])  # ELR [1, 2]
    h.dead(0)  # 1 leads from the ELR; ISR [1], ELR [0, 2]
    h.dead(2)
    h.dead(1)
    p = h.stored()
    assert p.leader == NO_LEADER and p.isr == [1] and p.elr == [0, 2]
    h2 = h.restart()
    h2.beat(2, incarnation="c2")
    h2.beat(0, incarnation="c0")
    assert h2.stored().leader == NO_LEADER, "this controller never saw them leave: no trust"
    h2.beat(1, incarnation="a1")
    assert h2.stored().leader == 1


def test_designated_leader_refusing_its_epoch_is_not_re_elected_if_others_can_lead():
    """Seed 7: after a controller restart the old leader, restarted meanwhile, refused to
    resume its epoch; the controller re-elected it at a new epoch (first in assignment
    order) and the others truncated to its shorter log."""
    h = Harness()
    h.create(config=LOSSY)
    beat_all(h)
    p = h.partition()
    lai = next(a for a in h.sent if isinstance(a, SendLeaderAndIsr) and a.replica.broker == 0)
    refusal = LeaderAndIsrResponse(ErrorCode.FENCED_LEADER_EPOCH, "restarted")
    h.apply(h.core.on_leader_and_isr_result(ReplicaId(TOPIC, 0, 0), lai.request, refusal, h.now) or [])
    p = h.stored()
    assert p.leader == 1 and p.leader_epoch == 1


def test_leaders_are_beaten_often_followers_less():
    h = Harness(config(follower_heartbeat_interval_ms=900))
    h.create()
    for b in BROKERS:
        h.beat(b)

    def due(now: int) -> list[int]:
        return sorted(a.replica.broker for a in h.core.tick(now) if isinstance(a, SendHeartbeat))

    assert due(200) == [0], "only the leader is due after the base interval"
    assert h.core.next_deadline(200) <= 400
    h.now = 400
    h.beat(0)
    assert due(900) == [0, 1, 2]
    # leadership moves: the new leader is beaten at the base interval from then on
    h.now = 1000
    h.dead(0)
    h.now = 1100
    for b in (1, 2):
        h.beat(b)
    assert h.partition().leader == 1
    now_due = due(1300)
    assert 1 in now_due and 2 not in now_due, "the new leader is beaten at the base interval, its follower is not"


def test_follower_interval_is_capped_by_the_session_timeout():
    h = Harness(config(follower_heartbeat_interval_ms=60_000))
    h.create()
    for b in BROKERS:
        h.beat(b)
    beaten = sorted(a.replica.broker for a in h.core.tick(1000) if isinstance(a, SendHeartbeat))
    assert beaten == [0, 1, 2], "followers are beaten at least every third of the session timeout"
