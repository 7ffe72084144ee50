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


def test_a_vouch_from_a_new_process_gets_it_beaten_and_its_answer_is_a_restart():
    h = Harness()
    h.create()
    h.beat(1, incarnation="first")
    h.now = 100  # heard after that answer (an older word says nothing new)
    heard = fetching(h, incarnation="first")
    heard[1] = (0, 0, "second", "", h.partition().partition_epoch, "")
    leader_beat(h, heard)
    assert h.stored().isr == [0, 1, 2], "the leader's word makes no other process current"
    assert beaten(h.core.tick(h.now)) == [1], "beaten at once: its own answer decides"
    actions = h.beat(1, incarnation="second", log_end_offset=0)
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
    # its next process, named by the leader, is beaten at once; its answer brings it back
    h.now = 400
    leader_beat(h, {1: (0, 10, "i0", "", h.partition().partition_epoch, ""), 2: (0, 0, "p2", "", h.partition().partition_epoch, "")})
    assert not h.core.detector.is_alive(ReplicaId(TOPIC, 0, 2)) and 2 in beaten(h.core.tick(h.now))
    h.beat(2, incarnation="p2", log_end_offset=0)
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


def test_a_vouch_for_a_process_older_than_the_one_that_answered_does_not_bring_it_back():
    """Review of issue 32, finding 2 (KIP-903's hole, reopened): follower 2 (out of the ISR)
    caught up; its process p1 left a fetch parked at the leader and died; its next process p2
    answered the controller. The leader's next answer still vouched for p1 ("heard 0 ms
    ago"): the controller took p1 as the current process again -- Ray's death notice guards
    only until the next process answers -- and the leader's retried proposal naming p1 was
    accepted, so 2 joined the ISR holding nothing."""
    h = Harness()
    h.create()
    h.beat(1, incarnation="i0")
    h.beat(2, incarnation="p1")
    h.now = 100
    h.dead(2)
    assert h.stored().isr == [0, 1]
    h.now = 200
    h.beat(2, incarnation="p2", log_end_offset=0)
    rid = ReplicaId(TOPIC, 0, 2)
    h.now = 300
    pe = h.partition().partition_epoch
    actions = leader_beat(h, {1: (0, 10, "i0", "", pe, ""), 2: (0, 10, "p1", "", pe, "")})
    assert h.core.trust.incarnation[rid] == "p2" and h.core.detector._health[rid].incarnation == "p2"
    assert 2 not in lai_targets(actions), "p1 is nobody to tell anything"
    resp, _ = h.alter([0, 1, 2], incarnations={1: "i0", 2: "p1"})
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA and h.stored().isr == [0, 1]
    # p2's own progress is what makes it eligible, once it has caught up
    h.now = 400
    leader_beat(h, {1: (0, 10, "i0", "", h.partition().partition_epoch, ""), 2: (0, 10, "p2", "", h.partition().partition_epoch, "")})
    resp, _ = h.alter([0, 1, 2], incarnations={1: "i0", 2: "p2"})
    assert resp.error_code == ErrorCode.NONE and h.stored().isr == [0, 1, 2]


def test_a_vouch_names_a_process_only_the_replicas_own_answer_makes_current():
    """Incarnations have no order (a uuid per process), so a vouch cannot tell a newer
    process from an older one whose fetch the leader still holds: it never makes another
    process current. That follower is beaten at once, and its own answer decides."""
    h = Harness()
    h.create()
    for b in BROKERS:
        h.beat(b, incarnation=f"a{b}")
    rid = ReplicaId(TOPIC, 0, 2)
    h.now = 100
    pe = h.partition().partition_epoch
    # a process this controller never heard of: older or newer, nobody can tell
    leader_beat(h, {1: (0, 10, "a1", "", pe, ""), 2: (0, 10, "x2", "", pe, "")}, incarnation="a0")
    assert h.core.trust.incarnation[rid] == "a2" and h.stored().isr == [0, 1, 2]
    assert 2 in beaten(h.core.tick(h.now)), "beaten at once: its answer tells which process runs"
    h.alter([0, 1], incarnations={1: "a1"})  # 2 falls behind; the leader then judges x2 caught up
    resp, _ = h.alter([0, 1, 2], incarnations={1: "a1", 2: "x2"})
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA and h.stored().isr == [0, 1]


def test_a_controller_that_just_started_takes_no_vouch_before_the_replicas_own_answer():
    """The process a predecessor recorded may have died since, with a fetch parked at its
    leader; a vouch for it proves nothing to a controller that has not heard the replica
    itself, and must not make it ISR-eligible (sim seed 43725's rule, for vouches)."""
    h = Harness()
    h.create()
    for b in BROKERS:
        h.beat(b, incarnation=f"a{b}")
    h.alter([0, 1])
    h2 = h.restart()
    h2.beat(0, incarnation="a0")
    h2.beat(1, incarnation="a1")
    h2.now = 100
    pe = h2.partition().partition_epoch
    leader_beat(h2, {1: (0, 10, "a1", "", pe, ""), 2: (0, 10, "a2", "", pe, "")}, incarnation="a0")
    resp, _ = h2.alter([0, 1, 2], incarnations={1: "a1", 2: "a2"})
    assert resp.error_code == ErrorCode.INELIGIBLE_REPLICA and h2.stored().isr == [0, 1]
    h2.now = 200
    h2.beat(2, incarnation="a2")  # the recorded process answers itself: it is alive
    resp, _ = h2.alter([0, 1, 2], incarnations={1: "a1", 2: "a2"})
    assert resp.error_code == ErrorCode.NONE and h2.stored().isr == [0, 1, 2]
