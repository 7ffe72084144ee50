"""A leader's heartbeat answer vouches for the followers fetching from it: the controller
counts each as answering with the status its fetch carried, and beats only the followers no
leader vouches for (not heard from lately, a dead leader, vouching switched off)."""

from __future__ import annotations

from kcoord.protocol.controller import HeartbeatResponse
from kcoord.protocol.errors import ErrorCode
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
    assert beaten(h.core.tick(899)) == [0], "the next vouch may come late: half a leader interval of grace"
    assert beaten(h.core.tick(900)) == [0, 1, 2], "one follower interval and the grace after the last vouch"


def test_leader_rounds_that_run_a_little_late_do_not_get_the_followers_beaten():
    """Every round of the leader's heartbeats runs a few ms after its interval (a timer
    fires late, the answer takes a round trip), and each answer vouches for both followers.
    Measured on an idle cluster before the grace: the followers were beaten along with
    their leader every few seconds, a third more beats than the leader's alone."""
    h = Harness(config(heartbeat_interval_ms=1000, follower_heartbeat_interval_ms=1000))
    h.create()
    for b in BROKERS:
        h.beat(b)
    leader_beat(h, fetching(h))
    leader = ReplicaId(TOPIC, 0, 0)
    sent = h.now
    for _ in range(30):
        sent += 1000 + 3  # the next round runs 3 ms late
        assert beaten(h.apply(h.core.tick(sent))) == [0], f"only the leader is beaten at {sent}"
        h.core.on_heartbeat_sent(leader, sent)
        h.now = sent + 2  # its answer, 2 ms later, vouches for the fetching followers
        h.apply(h.core.on_heartbeat(leader, HeartbeatResponse(
            topic=TOPIC, partition=0, broker=0, role="leader", leader=0, leader_epoch=h.partition().leader_epoch,
            partition_epoch=h.partition().partition_epoch, log_end_offset=10, incarnation="i0",
            followers_heard=fetching(h)), h.now))
    assert h.core.metrics_snapshot()["replicas_failed"] == 0


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


def test_a_fetch_the_dead_process_left_parked_at_its_leader_does_not_bring_it_back():
    """Sim seed 1829: follower 2's process lost power with a fetch still travelling to its
    leader, which parked it; Ray reported the process dead. The leader's next heartbeat
    answer vouched for it as heard just now (its fetch was parked), the controller took it
    as alive again, and accepted the leader's proposal -- judged on that same dead process --
    to put 2 back in the ISR while its new process held nothing."""
    h = Harness()
    h.create()
    h.beat(2, incarnation="p1")
    h.now = 100
    h.dead(2)
    assert h.stored().isr == [0, 1]
    h.now = 300
    pe = h.partition().partition_epoch
    leader_beat(h, {1: (0, 10, "i0", "", pe, ""), 2: (0, 10, "p1", "", pe, "")})
    assert not h.core.detector.is_alive(ReplicaId(TOPIC, 0, 2)), "a process Ray reported dead stays dead"
    resp, _ = h.alter([0, 1, 2], incarnations={1: "i0", 2: "p1"})
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA and h.stored().isr == [0, 1]
    # its next process, heard through the leader, is alive (and catches up before joining)
    h.now = 400
    leader_beat(h, {1: (0, 10, "i0", "", h.partition().partition_epoch, ""), 2: (0, 0, "p2", "", h.partition().partition_epoch, "")})
    assert h.core.detector.is_alive(ReplicaId(TOPIC, 0, 2))


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
