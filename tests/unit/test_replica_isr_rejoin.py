"""A caught-up follower outside the ISR is proposed back in promptly once a controller can
answer: an AlterPartition left unanswered by a controller that has since been replaced (the
leader hears a newer controller epoch) is sent again at once, as Kafka's controller channel
resends its in-flight requests to a new active controller, instead of after the driver's call
timeout (10 s in production: the chaos run's follower that stayed out of the ISR for ~11 s
while fully caught up, issue 32)."""

from __future__ import annotations

from replication_helpers import batch, call, follower_fetch, lai, leader_and_isr, make_replica, of_type, produce

from kcoord.protocol.controller import AlterPartitionResponse, HeartbeatRequest
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.actions import SendAlterPartition
from kcoord.replication.config import ReplicationConfig


def leader_with_follower_out(controller_epoch: int = 1):
    """Leader 0 of [0, 1, 2] with ISR [0]; follower 1 fetches up to the leader's log end:
    the leader proposes [0, 1] (returned with the replica)."""
    r = make_replica(0, ReplicationConfig())
    resp, _ = leader_and_isr(r, lai(0, 1, [0], controller_epoch=controller_epoch), 0)
    assert resp.error_code == 0 and r.role == "leader"
    produce(r, batch(3), "p", now=10, acks=1)
    acts = follower_fetch(r, 1, r.log.log_end_offset, "f1", 20, 1, incarnation="proc-1")
    (alter,) = of_type(acts, SendAlterPartition)
    assert alter.request.new_isr == [0, 1]
    return r, alter.request


def test_a_proposal_unanswered_by_a_replaced_controller_is_sent_again_when_the_new_one_is_heard():
    r, lost = leader_with_follower_out()
    # The controller restarts with the proposal in flight: its answer never comes (the
    # driver would give up only at its call timeout). The new controller (epoch 2) beats
    # the leader; the follower keeps fetching, caught up.
    _, acts = call(r, HeartbeatRequest(controller_epoch=2), 300)
    acts += follower_fetch(r, 1, r.log.log_end_offset, "f2", 310, 1, incarnation="proc-1")
    acts += r.tick(320) or []
    resent = [a.request for a in of_type(acts, SendAlterPartition)]
    assert len(resent) == 1, f"the leader waits for an answer the replaced controller will never send ({resent})"
    assert resent[0].new_isr == [0, 1] and resent[0] is not lost
    # The old request's answer, should one arrive after all, is not taken for the new one's.
    r.on_alter_partition_response(lost, AlterPartitionResponse(ErrorCode.NONE, None, 0, 1, 2, [0, 1]), 330)
    assert r.isr == [0], "an answer to the abandoned request is ignored"
    r.on_alter_partition_response(resent[0], AlterPartitionResponse(ErrorCode.NONE, None, 0, 1, 2, [0, 1]), 340)
    assert r.isr == [0, 1]


def test_a_heartbeat_of_the_same_controller_leaves_the_proposal_in_flight():
    """A paused controller answers what piled up once it resumes: nothing to resend."""
    r, lost = leader_with_follower_out()
    _, acts = call(r, HeartbeatRequest(controller_epoch=1), 300)
    acts += follower_fetch(r, 1, r.log.log_end_offset, "f2", 310, 1, incarnation="proc-1")
    acts += r.tick(320) or []
    assert of_type(acts, SendAlterPartition) == [], "one AlterPartition in flight at a time"
    r.on_alter_partition_response(lost, AlterPartitionResponse(ErrorCode.NONE, None, 0, 1, 2, [0, 1]), 330)
    assert r.isr == [0, 1]


def test_a_proposal_sent_to_the_newest_controller_known_is_not_abandoned():
    """Only a controller newer than the one known when the proposal left replaces it; the
    proposal sent again to the new controller waits for its answer."""
    r, lost = leader_with_follower_out()
    _, acts = call(r, HeartbeatRequest(controller_epoch=2), 300)
    (again,) = [a.request for a in of_type(acts, SendAlterPartition)]
    _, acts = call(r, HeartbeatRequest(controller_epoch=2), 600)
    acts += r.tick(610) or []
    assert of_type(acts, SendAlterPartition) == [], "sent to the controller at epoch 2 already"
    r.on_alter_partition_response(again, AlterPartitionResponse(ErrorCode.NONE, None, 0, 1, 2, [0, 1]), 620)
    assert r.isr == [0, 1]


def test_a_newer_controller_epoch_in_a_leader_and_isr_also_resends():
    """The new controller may announce itself with a LeaderAndIsr at the same partition
    epoch (it restates what it loaded) rather than a heartbeat."""
    r, lost = leader_with_follower_out()
    resp, acts = leader_and_isr(r, lai(0, 1, [0], partition_epoch=1, controller_epoch=2), 300)
    assert resp.error_code == 0
    (again,) = [a.request for a in of_type(acts, SendAlterPartition)]
    assert again.new_isr == [0, 1]
