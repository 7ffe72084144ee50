"""A leader's heartbeat answer vouches for the followers fetching from it: the controller
counts each as answering with the status its fetch carried, and beats only the followers no
leader vouches for (not heard from lately, a dead leader, vouching switched off)."""

from __future__ import annotations

from kcoord.protocol.controller import HeartbeatResponse
from kcoord.replication.controller import ReplicaId, SendHeartbeat

from controller_harness import BROKERS, TOPIC, Harness, config, lai_targets


def beaten(actions) -> list[int]:
    return sorted(a.replica.broker for a in actions if isinstance(a, SendHeartbeat))


def leader_beat(h: Harness, heard: dict, incarnation: str = "i0") -> list:
    """The leader (broker 0) answers a heartbeat, vouching for ``heard``:
    {broker: (ms ago, LEO, incarnation, storage, partition epoch, directory id)}."""
    return h.beat(0, incarnation=incarnation, followers_heard=heard)


def fetching(h: Harness, ago: int = 0, incarnation: str = "i0", partition_epoch: int | None = None) -> dict:
    pe = h.partition().partition_epoch if partition_epoch is None else partition_epoch
    return {b: (ago, 10, incarnation, "", pe, "") for b in (1, 2)}


def test_followers_a_leader_vouches_for_are_not_beaten_and_stay_alive():
    h = Harness(config(follower_heartbeat_interval_ms=600))
    h.create()
    for b in BROKERS:
        h.beat(b)
    for h.now in range(200, 10_000, 200):
        assert beaten(h.apply(h.core.tick(h.now))) == [0], "only the leader is beaten"
        leader_beat(h, fetching(h))
    assert all(h.core.detector.is_alive(ReplicaId(TOPIC, 0, b)) for b in BROKERS)
    assert h.stored().isr == [0, 1, 2] and h.core.metrics_snapshot()["replicas_failed"] == 0


def test_followers_are_beaten_again_when_their_leader_stops_vouching():
    h = Harness(config(follower_heartbeat_interval_ms=600))
    h.create()
    h.now = 200
    leader_beat(h, fetching(h))
    assert beaten(h.core.tick(740)) == [0]
    assert beaten(h.core.tick(800)) == [0, 1, 2], "one follower interval after the last vouch"


def test_a_follower_the_leader_has_not_heard_from_lately_is_beaten_at_once():
    h = Harness(config(follower_heartbeat_interval_ms=600, vouch_max_age_ms=500))
    h.create()
    h.now = 200
    heard = fetching(h)
    heard[2] = (501, 10, "i0", "", h.partition().partition_epoch, "")
    leader_beat(h, heard)
    assert beaten(h.core.tick(201)) == [2]
    assert h.core.detector.is_alive(ReplicaId(TOPIC, 0, 2)), "not failed on the leader's word: the beat decides"


def test_a_vouch_from_a_new_process_is_a_restart():
    h = Harness()
    h.create()
    h.beat(1, incarnation="first")
    h.now = 100  # heard after that answer (an older word says nothing new)
    heard = fetching(h, incarnation="first")
    heard[1] = (0, 0, "second", "", h.partition().partition_epoch, "")
    actions = leader_beat(h, heard)
    assert h.stored().isr == [0, 2], "its memory is gone: out of the ISR until it catches up"
    assert 1 in lai_targets(actions), "told who leads, to catch up"
    snap = h.core.metrics_snapshot()
    assert (snap["replicas_failed"], snap["replicas_recovered"]) == (1, 1)


def test_a_vouched_follower_behind_on_the_partition_epoch_is_told_again():
    h = Harness()
    h.create()
    h.alter([0, 1])  # partition epoch 1; follower 2's copy of the state may be lost
    h.now = 100
    actions = leader_beat(h, fetching(h, partition_epoch=0))
    assert 2 in lai_targets(actions)


def test_a_vouched_follower_brings_an_offline_partition_back_as_a_direct_answer_would():
    h = Harness()
    h.create()
    h.now = 100
    h.dead(2)
    assert not h.core.detector.is_alive(ReplicaId(TOPIC, 0, 2))
    # a fetch from before the death proves nothing
    leader_beat(h, {2: (50, 10, "i0", "", h.partition().partition_epoch, "")})
    assert not h.core.detector.is_alive(ReplicaId(TOPIC, 0, 2))
    h.now = 300
    actions = leader_beat(h, {2: (0, 10, "i1", "", h.partition().partition_epoch, "")})
    assert h.core.detector.is_alive(ReplicaId(TOPIC, 0, 2)) and 2 in lai_targets(actions)


def test_only_the_current_leader_vouches():
    h = Harness()
    h.create()
    h.now = 100
    h.dead(0)  # broker 1 leads now
    assert h.partition().leader == 1
    h.now = 200
    # the deposed leader still answers as a leader of the old epoch, vouching for 2
    stale = HeartbeatResponse(topic=TOPIC, partition=0, broker=0, role="leader", leader=0, leader_epoch=0,
                              partition_epoch=0, incarnation="i0", followers_heard={2: (0, 10, "other", "", 0, "")})
    h.core.on_heartbeat_sent(ReplicaId(TOPIC, 0, 0), h.now)
    h.apply(h.core.on_heartbeat(ReplicaId(TOPIC, 0, 0), stale, h.now))
    assert h.core.metrics_snapshot()["replicas_failed"] == 1, "its word about 2 ('other' process) was not taken"


def test_vouching_can_be_switched_off():
    h = Harness(config(follower_heartbeat_interval_ms=600, leader_vouches=False))
    h.create()
    h.now = 200
    leader_beat(h, fetching(h))
    assert beaten(h.core.tick(600)) == [0, 1, 2]
