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


def test_a_follower_proposed_back_into_the_isr_keeps_its_caught_up_time():
    """Finding 3's second form (sim seed 3): the controller drops follower 2 from the ISR
    (partition epoch 1) right after the election; it fetches one batch behind, the leader
    proposes it back and the controller agrees. Kafka never resets a follower's
    lastCaughtUpTime on an ISR change: it was caught up at the election (0 ms), so it may
    not be proposed out before replica.lag.time.max.ms has passed since."""
    from kcoord.protocol.controller import AlterPartitionResponse

    r = _new_leader()
    leader_and_isr(r, lai(0, 3, (0, 1), partition_epoch=4), 30)
    produce(r, batch(3), "p", 40, acks=1)
    acts = follower_fetch(r, 2, 0, "b", 50, epoch=3, incarnation="proc-2")
    acts += follower_fetch(r, 1, 3, "a", 50, epoch=3, incarnation="proc-1")
    (alter,) = of_type(acts, SendAlterPartition)
    assert alter.request.new_isr == [0, 1, 2]
    acts = r.on_alter_partition_response(alter.request, AlterPartitionResponse(leader=0, leader_epoch=3, partition_epoch=5, isr=[0, 1, 2]), 60)
    acts += r.tick(61)
    assert of_type(acts, SendAlterPartition) == [], "caught up at the election, 61 ms ago"
    # without a fetch at the log end it is out once the lag time has passed since then
    follower_fetch(r, 1, 3, "c", 900, epoch=3, incarnation="proc-1")
    (alter,) = of_type(r.tick(1001), SendAlterPartition)
    assert alter.request.new_isr == [0, 1]


def test_a_follower_that_left_the_isr_rejoins_only_on_a_fetch_made_after_it_left():
    """What resetting its progress guarded, kept: the log end it reported before it left
    (maybe before a crash) does not bring it back into the ISR."""
    r = _new_leader()
    produce(r, batch(3), "p", 5, acks=1)
    follower_fetch(r, 1, 3, "a", 10, epoch=3, incarnation="proc-1")
    follower_fetch(r, 2, 3, "b", 10, epoch=3, incarnation="proc-2")
    _, acts = leader_and_isr(r, lai(0, 3, (0, 1), partition_epoch=4), 20)
    acts += r.tick(21)
    assert of_type(acts, SendAlterPartition) == []
    (alter,) = of_type(follower_fetch(r, 2, 3, "c", 30, epoch=3, incarnation="proc-2"), SendAlterPartition)
    assert alter.request.new_isr == [0, 1, 2]


def test_an_isr_members_old_process_does_not_count_for_the_hw():
    """Sim seeds 432, 902, 47 (``twin``): follower 2 was recreated on another machine while
    its old process ran on, cut off from the controller but still fetching. The leader
    proposed 2 back into the ISR judged on its new process, the controller agreed; then the
    old process, further ahead, fetched and the HW counted its position while the ISR
    member (the new process) held less. Only the process the controller admitted counts
    (KIP-903's broker epoch on the fetch path)."""
    from kcoord.protocol.controller import AlterPartitionResponse

    r = _new_leader()
    leader_and_isr(r, lai(0, 3, (0, 1), partition_epoch=4), 5)
    produce(r, batch(3), "p", 10, acks=1)
    acts = follower_fetch(r, 1, 3, "a", 20, epoch=3, incarnation="proc-1")
    acts += follower_fetch(r, 2, 3, "b", 20, epoch=3, incarnation="proc-2-new")
    (alter,) = of_type(acts, SendAlterPartition)
    assert alter.request.new_isr == [0, 1, 2] and alter.request.incarnations[2] == "proc-2-new"
    r.on_alter_partition_response(alter.request, AlterPartitionResponse(leader=0, leader_epoch=3, partition_epoch=5, isr=[0, 1, 2]), 30)
    follower_fetch(r, 1, 3, "c", 40, epoch=3, incarnation="proc-1")
    follower_fetch(r, 2, 3, "d", 40, epoch=3, incarnation="proc-2-new")
    assert r.hw == 3
    produce(r, batch(2), "q", 50, acks=1)
    follower_fetch(r, 1, 5, "e", 60, epoch=3, incarnation="proc-1")
    follower_fetch(r, 2, 5, "f", 60, epoch=3, incarnation="proc-2-old")  # the ghost, ahead
    assert r.hw == 3, "the admitted process of ISR member 2 holds only 3 records"
    follower_fetch(r, 2, 4, "g", 70, epoch=3, incarnation="proc-2-new")
    assert r.hw == 4
    follower_fetch(r, 2, 5, "h", 80, epoch=3, incarnation="proc-2-old")
    assert r.hw == 4
    follower_fetch(r, 2, 5, "i", 90, epoch=3, incarnation="proc-2-new")
    assert r.hw == 5


def test_an_isr_member_pinned_at_its_first_fetch_of_the_leadership():
    """An ISR member at the election has no admitted process yet: the first one this
    leadership hears counts; another one's fetches do not, until the controller changes the
    ISR (it drops a restarted follower) and the leader's expansion names a process again."""
    r = _new_leader()
    produce(r, batch(3), "p", 10, acks=1)
    follower_fetch(r, 1, 3, "a", 20, epoch=3, incarnation="proc-1")
    follower_fetch(r, 2, 1, "b", 20, epoch=3, incarnation="proc-2")
    assert r.hw == 1
    follower_fetch(r, 2, 3, "c", 30, epoch=3, incarnation="proc-2-other")
    assert r.hw == 1
    leader_and_isr(r, lai(0, 3, (0, 1), partition_epoch=4), 40)  # the controller drops 2
    follower_fetch(r, 1, 3, "d", 50, epoch=3, incarnation="proc-1")
    assert r.hw == 3


def test_an_isr_member_whose_admitted_process_is_silent_is_proposed_out_not_re_pinned():
    """Sim seed 21425: broker 2's admitted process lost a fetch and stopped fetching; its
    old process (a twin, cut off from the controller) fetched on, caught up. Once the
    admitted one had been silent for replica.lag.time.max.ms the leader took the other for
    broker 2 and its HW counted the old process's log end; the admitted process (the one the
    controller elects for broker 2) held less, was elected, and acknowledged records were
    gone. Only the controller may name another process: a member heard from another process
    is proposed out, and back in by an expansion naming the process that fetches (KIP-903)."""
    from kcoord.protocol.controller import AlterPartitionResponse

    r = _new_leader()
    produce(r, batch(3), "p", 10, acks=1)
    follower_fetch(r, 1, 3, "a", 20, epoch=3, incarnation="proc-1")
    follower_fetch(r, 2, 1, "b", 20, epoch=3, incarnation="proc-2")
    assert r.hw == 1
    acts = follower_fetch(r, 1, 3, "a2", 900, epoch=3, incarnation="proc-1")
    acts += follower_fetch(r, 2, 3, "g1", 900, epoch=3, incarnation="proc-2-old")
    acts += follower_fetch(r, 1, 3, "a3", 1021, epoch=3, incarnation="proc-1")
    acts += follower_fetch(r, 2, 3, "g2", 1021, epoch=3, incarnation="proc-2-old")
    assert r.hw == 1, "the admitted process of ISR member 2 holds 1 record"
    (alter,) = of_type(acts, SendAlterPartition)
    assert alter.request.new_isr == [0, 1], "another process than the admitted one: out"
    r.on_alter_partition_response(alter.request, AlterPartitionResponse(leader=0, leader_epoch=3, partition_epoch=4, isr=[0, 1]), 1030)
    follower_fetch(r, 1, 3, "a4", 1040, epoch=3, incarnation="proc-1")
    assert r.hw == 3
    # whichever process fetches next is proposed back by name; the controller judges it
    (alter,) = of_type(follower_fetch(r, 2, 3, "n", 1050, epoch=3, incarnation="proc-2-next"), SendAlterPartition)
    assert alter.request.new_isr == [0, 1, 2] and alter.request.incarnations[2] == "proc-2-next"
