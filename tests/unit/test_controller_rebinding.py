"""A broker re-bound to another node leaves its processes on the old node behind (sim seeds
1594 and 127): none of them may join an ISR, whatever a leader says of it, until the
broker's process on its new node answers (KIP-903: only the registered broker epoch counts).

Bound brokers' replicas have no Ray restarts and die with their node; the controller re-binds
the broker (persisted) and recreates its replicas elsewhere, empty. A replica of that broker
whose death no heartbeat has shown yet -- its leader vouches for it, a fetch of the old
process being parked there, or a ghost of it still fetching -- was taken for live, and a
leader's proposal naming that old process was accepted: the ISR named a replica that held
nothing."""

from __future__ import annotations

from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import CreateReplica, ReplicaId

from controller_harness import TOPIC, Harness

NODES = {"n0": "h0", "n1": "h1", "n2": "h2"}


def _two_partitions_without_broker_1() -> Harness:
    """Brokers on n0-n2; partitions 0 and 1 on [0, 1, 2], led by 0, both with ISR [0, 2]
    (broker 1 is in no ISR: its broker may move)."""
    h = Harness(binding={0: "n0", 1: "n1", 2: "n2"})
    h.core.on_nodes(list(NODES), NODES, h.now)
    h.create(partitions=2, assignment={0: [0, 1, 2], 1: [0, 1, 2]})
    for p in (0, 1):
        for b in (0, 1, 2):
            h.beat(b, incarnation=f"p{p}b{b}", p=p)
        resp, _ = h.alter([0, 2], partition=p)
        assert resp.error_code == 0
    return h


def _vouch(h: Harness, p: int, incarnation: str) -> None:
    pe = h.partition(p).partition_epoch
    h.beat(0, incarnation=f"p{p}b0", p=p, followers_heard={1: (0, 10, incarnation, "", pe, "")})


def _rebind_broker_1(h: Harness) -> None:
    """n1 is lost; Ray reports partition 0's replica of broker 1 dead; the controller re-binds
    broker 1 to the spare node and recreates that replica there."""
    h.core.on_nodes(["n0", "n2", "spare"], {**NODES, "spare": "h9"}, h.now)
    h.dead(1, p=0)
    creates = [a for a in h.apply(h.core.tick(h.now)) if isinstance(a, CreateReplica)]
    assert [(a.replica.partition, a.node) for a in creates if a.replica.broker == 1][:1] == [(0, "spare")]


def test_a_replica_left_on_the_node_its_broker_was_moved_from_does_not_join_the_isr():
    h = _two_partitions_without_broker_1()
    _rebind_broker_1(h)
    h.now += 10
    _vouch(h, 1, "p1b1")  # a fetch of the old process is still parked at the leader
    resp, _ = h.alter([0, 1, 2], partition=1, incarnations={1: "p1b1"})
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA, resp
    assert h.stored(1).isr == [0, 2]


def test_the_replicas_of_a_rebound_broker_are_recreated_on_its_new_node_and_join_from_there():
    h = _two_partitions_without_broker_1()
    _rebind_broker_1(h)
    h.now += 1
    creates = [a for a in h.apply(h.core.tick(h.now)) if isinstance(a, CreateReplica) and a.replica == ReplicaId(TOPIC, 1, 1)]
    assert [a.node for a in creates] == ["spare"], "its process on the old node is gone too"
    h.beat(1, incarnation="p1b1-new", p=1)
    resp, _ = h.alter([0, 1, 2], partition=1, incarnations={1: "p1b1-new"})
    assert resp.error_code == ErrorCode.NONE, resp
    assert h.stored(1).isr == [0, 1, 2]
