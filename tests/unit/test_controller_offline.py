"""An offline partition keeps its whole ISR, however its members' failures are ordered."""

from __future__ import annotations

from kcoord.protocol.controller import CreateTopicsRequest, HeartbeatResponse
from kcoord.replication.controller import ControllerConfig, ControllerState, ReplicaId


def started(now: int = 0) -> ControllerState:
    c = ControllerState("c", ControllerConfig(heartbeat_interval_ms=100, session_timeout_ms=1000, replica_startup_grace_ms=0))
    c.start({}, [0, 1, 2], 0, now)
    resp, _ = c.create_topic(CreateTopicsRequest("t", 1, 3), now)
    assert resp.error_code == 0
    for b in (0, 1, 2):  # every replica answers its first heartbeat
        c.on_heartbeat_sent(ReplicaId("t", 0, b), now)
        c.on_heartbeat(ReplicaId("t", 0, b), HeartbeatResponse(topic="t", partition=0, broker=b), now)
    return c


def test_whole_isr_times_out_at_once_isr_kept_and_any_member_can_return():
    c = started()
    p = c.partitions[("t", 0)]
    leader, f1, f2 = p.replicas
    # nobody answers heartbeats: one detector check finds all three failed together
    actions = c.tick(1500)
    assert p.leader == -1 and sorted(p.isr) == sorted([leader, f1, f2])
    assert c.metrics.failovers_failed == 1
    # any ISR member holds everything acknowledged, so the first to return leads
    status = HeartbeatResponse(topic="t", partition=0, broker=f2, incarnation="new")
    c.on_heartbeat(ReplicaId("t", 0, f2), status, 1600)
    assert p.leader == f2 and p.isr == [f2]


def test_members_fail_one_by_one_last_standing_leads_again():
    c = started()
    p = c.partitions[("t", 0)]
    leader, f1, f2 = p.replicas
    for b in (leader, f1, f2):  # each failure is handled before the next one happens
        c.on_heartbeat(ReplicaId("t", 0, b), None, 10, dead=True)
    assert p.leader == -1 and p.isr == [f2], "f2 led last and alone: only it is known complete"
    c.on_heartbeat(ReplicaId("t", 0, leader), HeartbeatResponse(incarnation="x"), 20)
    assert p.leader == -1, "a replica outside the ISR must not be elected cleanly"
    c.on_heartbeat(ReplicaId("t", 0, f2), HeartbeatResponse(incarnation="y"), 30)
    assert p.leader == f2


def test_followers_fail_before_leader_isr_shrinks_to_the_last_member():
    c = started()
    p = c.partitions[("t", 0)]
    leader, f1, f2 = p.replicas
    for b in (f1, f2, leader):
        c.on_heartbeat(ReplicaId("t", 0, b), None, 10, dead=True)
    assert p.leader == -1 and p.isr == [leader], "only the last leader is known to have everything"
    c.on_heartbeat(ReplicaId("t", 0, f1), HeartbeatResponse(incarnation="x"), 20)
    assert p.leader == -1, "a replica outside the ISR must not be elected cleanly"
    c.on_heartbeat(ReplicaId("t", 0, leader), HeartbeatResponse(incarnation="y"), 30)
    assert p.leader == leader
