"""A newly elected leader's view of its followers (issue 32, finding 3).

Kafka's new leader sets every ISR follower's last caught-up time to "now": each gets a full
``replica.lag.time.max.ms`` to show it keeps up, whatever it fetches first. Only a process
other than one this leadership has already heard from starts over (KIP-903)."""

from __future__ import annotations

from replication_helpers import batch, follower_fetch, lai, leader_and_isr, make_replica, of_type, produce

from kcoord.replication.actions import SendAlterPartition
from kcoord.replication.config import ReplicationConfig


def _new_leader(now: int = 0, lag_ms: int = 1000):
    r = make_replica(0, ReplicationConfig(replica_lag_time_max_ms=lag_ms))
    resp, _ = leader_and_isr(r, lai(0, 3, (0, 1, 2)), now)
    assert resp.error_code == 0 and r.role == "leader"
    return r


def test_a_follower_one_batch_behind_at_its_first_fetch_keeps_its_grace_period():
    """Replayed: at 10 ms follower 1's first fetch (its process named for the first time)
    came from one batch behind the log end, and the leader proposed ISR [0, 2]."""
    r = _new_leader()
    produce(r, batch(3), "p", 5, acks=1)
    acts = follower_fetch(r, 1, 0, "f1", 10, epoch=3, incarnation="proc-1")
    acts += follower_fetch(r, 2, 3, "f2", 10, epoch=3, incarnation="proc-2")
    assert of_type(acts, SendAlterPartition) == [], "within replica.lag.time.max.ms of the election"
    assert r.leading.isr.followers[1].incarnation == "proc-1"
    # still behind (it never fetched up to the log end) once the lag time has passed: out
    follower_fetch(r, 2, 3, "f2b", 900, epoch=3, incarnation="proc-2")
    (alter,) = of_type(r.tick(1001), SendAlterPartition)
    assert alter.request.new_isr == [0, 2]


def test_a_follower_that_catches_up_after_its_first_fetch_stays():
    r = _new_leader()
    produce(r, batch(3), "p", 5, acks=1)
    acts = follower_fetch(r, 1, 0, "a", 10, epoch=3, incarnation="proc-1")
    acts += follower_fetch(r, 2, 0, "b", 10, epoch=3, incarnation="proc-2")
    produce(r, batch(2), "q", 500, acks=1)
    # each fetches from where the log ended at its previous fetch: caught up as of then
    acts += follower_fetch(r, 1, 3, "c", 800, epoch=3, incarnation="proc-1")
    acts += follower_fetch(r, 2, 3, "d", 800, epoch=3, incarnation="proc-2")
    acts += r.tick(1005)
    assert of_type(acts, SendAlterPartition) == []
    assert r.leading.isr.followers[1].last_caught_up_ms == 10, "caught up with the log as of its first fetch"


def test_another_process_after_the_first_one_heard_still_starts_over():
    """What the rule keeps: a follower that restarts during the leadership loses the
    progress of its previous process (KIP-903), grace period included."""
    r = _new_leader()
    produce(r, batch(3), "p", 5, acks=1)
    follower_fetch(r, 2, 3, "x", 10, epoch=3, incarnation="proc-2")
    follower_fetch(r, 1, 3, "a", 10, epoch=3, incarnation="proc-1")
    acts = follower_fetch(r, 1, 0, "b", 20, epoch=3, incarnation="proc-1b")
    (alter,) = of_type(acts, SendAlterPartition)
    assert alter.request.new_isr == [0, 2]
