"""The controller's side of KIP-112: a heartbeat answered KAFKA_STORAGE_ERROR (the replica's
log went offline after an I/O error) fails that replica at once -- no session timeout --
and the controller, not the replica, moves leadership and shrinks the ISR; the replica is
listed offline until a new process on a healthy disk answers, and then rejoins."""

from __future__ import annotations

from kcoord.protocol.controller import MetadataRequest
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import CreateReplica, Persist, ReplicaId

from controller_harness import TOPIC, Harness, lai_targets

REASON = "log of t-0 on broker {b} failed: append failed: [Errno 28] No space left on device"


def offline_beat(h: Harness, broker: int, incarnation: str = "i0") -> list:
    return h.beat(broker, incarnation=incarnation, error_code=ErrorCode.KAFKA_STORAGE_ERROR,
                  error_message=REASON.format(b=broker), role="offline", log_end_offset=-1)


def metadata(h: Harness):
    (t,) = h.core.metadata(MetadataRequest([TOPIC])).topics
    return t.partitions[0]


def started(**create) -> Harness:
    h = Harness()
    h.create(config={"min.insync.replicas": "2"}, **create)
    h.now = 5000
    for b in (0, 1, 2):
        h.beat(b, incarnation="i0")
    return h


def test_a_leader_whose_log_went_offline_is_replaced_at_once():
    h = started()
    actions = offline_beat(h, 0)
    assert isinstance(actions[0], Persist), "the new leadership is persisted before anyone hears of it"
    p = h.stored()
    assert (p.leader, p.leader_epoch, p.isr) == (1, 1, [1, 2]), "elected at this very heartbeat, not after a session timeout"
    assert sorted(lai_targets(actions)) == [1, 2], "the offline replica is not told anything"
    md = metadata(h)
    assert (md.leader, md.isr, md.offline_replicas) == (1, [1, 2], [0])
    assert h.core.offline_logs == {ReplicaId(TOPIC, 0, 0): REASON.format(b=0)}
    assert h.core.partition_counts()["offline_log_replicas"] == 1
    assert h.core.metrics_snapshot()["offline_log_replicas"] == 1


def test_a_follower_whose_log_went_offline_leaves_the_isr_through_the_controller():
    h = started()
    actions = offline_beat(h, 2)
    p = h.stored()
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (0, 0, 1, [0, 1])
    assert sorted(lai_targets(actions)) == [0, 1], "the leader learns its new ISR from the controller"
    assert metadata(h).offline_replicas == [2]


def test_repeated_offline_answers_change_nothing_more():
    h = started()
    offline_beat(h, 0)
    epochs = (h.stored().leader_epoch, h.stored().partition_epoch)
    for _ in range(3):
        h.now += 200
        assert offline_beat(h, 0) == [], "no new election, no new ISR change"
    assert (h.stored().leader_epoch, h.stored().partition_epoch) == epochs
    assert metadata(h).offline_replicas == [0]


def test_the_controller_tries_to_bring_the_replica_back_and_a_restart_rejoins():
    h = started()
    offline_beat(h, 0)
    ensured = [a for a in h.apply(h.core.tick(h.now)) if isinstance(a, CreateReplica)]
    assert 0 in [a.replica.broker for a in ensured], "ensured at once: a dead actor would be recreated (a live one is left as is)"
    # The disk was repaired and the replica restarted: a new process answers healthy.
    h.now += 100
    actions = h.beat(0, incarnation="i1", leader_epoch=-1, partition_epoch=-1, role="none")
    assert lai_targets(actions) == [0], "told who leads: it truncates, catches up, and is added back"
    assert metadata(h).offline_replicas == [] and h.core.offline_logs == {}
    assert h.core.partition_counts()["offline_log_replicas"] == 0
    resp, _ = h.alter([1, 2, 0])
    assert resp.error_code == ErrorCode.NONE and h.stored().isr == [0, 1, 2]


def test_a_restart_on_a_still_broken_disk_stays_offline():
    h = started()
    offline_beat(h, 1)
    h.now += 1000
    offline_beat(h, 1, incarnation="i1")  # a new process, the same I/O error
    assert metadata(h).offline_replicas == [1] and h.stored().isr == [0, 2]
    resp, _ = h.alter([0, 2, 1])
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA, "an offline replica cannot be added back to the ISR"


def test_every_replica_offline_leaves_the_partition_offline_until_they_are_back():
    h = started()
    for b in (0, 1, 2):
        offline_beat(h, b)
    assert h.stored().leader == -1 and metadata(h).offline_replicas == [0, 1, 2]
    assert h.core.partition_counts() == {"partitions": 1, "under_replicated_partitions": 0, "offline_partitions": 1, "offline_log_replicas": 3, "replaced_directory_replicas": 0}
    assert h.core.metrics.unclean_elections == 0
    h.now += 1000
    for b in (0, 1, 2):  # restarted on repaired disks (suspect: the failed fsync may have dropped pages)
        h.beat(b, incarnation="i1", leader_epoch=-1, partition_epoch=-1, role="none")
    assert h.stored().leader in (1, 2), "a replica that was in the ISR or ELR when the last one failed"
    assert metadata(h).offline_replicas == [] and h.core.offline_logs == {}
    assert h.core.metrics.unclean_elections == 0
