"""ControllerState: failure detection and elections, replica recreation, preferred-leader
moves, eligible leader replicas for topics without per-append fsync, heartbeat intervals."""

from __future__ import annotations

from kcoord.protocol.controller import LeaderAndIsrResponse, MetadataRequest
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import (
    CREATED,
    REPLACED,
    CreateReplica,
    Persist,
    ReplicaId,
    SendHeartbeat,
    SendLeaderAndIsr,
)
from kcoord.replication.metadata import NO_LEADER

from controller_harness import BROKERS, TOPIC, Harness, config, lai_targets, persists


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
    h.core.on_replica_ensured(ReplicaId(TOPIC, 0, 2), CREATED, h.now)
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
    h.core.on_replica_ensured(rid, REPLACED, h.now)
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


def test_a_restarted_controller_leaves_out_of_the_new_isr_a_member_it_has_not_heard():
    """The 30-minute chaos run of 2026-11-29 (seed 934377): leader 2 of `chaos-0` and the
    controller were killed within 0.2 s. The restarted controller, watching every replica
    with a start-up grace, elected 1 with ISR [1, 2, 0]: broker 2, dead (its replacement
    still starting), stayed an ISR member, and the new leader's HW waited for it for the
    whole replica.lag.time.max.ms (a producer waited 10.2 s). A member the controller has
    not heard since it started watching it leaves the ISR at an election (it comes back by
    the leader's expansion once it fetches); the members it has heard stay."""
    h = Harness()
    h.create()
    beat_all(h)
    h2 = h.restart()
    h2.now += 100
    h2.beat(1, incarnation="a1")
    actions = h2.dead(0)
    p = h2.stored()
    assert (p.leader, p.isr) == (1, [1]), "2 is alive only by the start-up grace"
    assert persists(actions)
    h2.beat(2, incarnation="a2")
    assert 2 not in h2.stored().isr, "back by the leader's expansion, not by a heartbeat"


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


def lossy_with_lineage() -> Harness:
    """A page-cache topic whose replicas report a storage lineage (node, boot), with the
    ISR shrunk to the leader alone (ELR [1, 2])."""
    h = Harness()
    h.create(config=LOSSY)
    for b in BROKERS:
        h.beat(b, incarnation=f"a{b}", storage=f"node{b}/boot1")
    h.alter([0])
    return h


def test_sole_isr_member_restarted_with_its_page_cache_is_elected_again():
    """Found by the chaos suite: the only ISR member of a page-cache topic was SIGKILLed and
    restarted on the same node; kcoord counted it as possibly without its tail and left the
    partition offline for good. A process crash keeps the page cache (the log's writes are
    os.write calls): the same storage lineage means nothing was lost."""
    h = lossy_with_lineage()
    h.dead(1)
    h.dead(2)
    h.dead(0)
    assert h.stored().leader == NO_LEADER
    h.beat(0, incarnation="b0", storage="node0/boot1")  # a new process, same page cache
    p = h.stored()
    assert (p.leader, p.isr) == (0, [0]), "it holds every acknowledged record: elect it"


def test_sole_isr_member_restarted_after_a_reboot_still_waits():
    h = lossy_with_lineage()
    h.dead(1)
    h.dead(2)
    h.dead(0)
    h.beat(0, incarnation="b0", storage="node0/boot2")  # the machine rebooted
    assert h.stored().leader == NO_LEADER, "its unflushed tail may be gone: wait"
    h.beat(0, incarnation="b0", storage="")
    assert h.stored().leader == NO_LEADER, "no lineage reported counts as changed"


def test_a_storage_error_voids_the_lineage():
    """A failed fsync may drop unflushed pages without a reboot: after an offline log the
    next process of that replica is suspect even on the same boot and node."""
    from kcoord.protocol.errors import ErrorCode

    h = lossy_with_lineage()
    h.dead(1)
    h.dead(2)
    h.beat(0, incarnation="a0", storage="node0/boot1", error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message="fsync failed")
    assert h.stored().leader == NO_LEADER
    h.beat(0, incarnation="b0", storage="node0/boot1")
    assert h.stored().leader == NO_LEADER, "its unflushed tail may be gone: wait"


def test_restarted_controller_remembers_storage_lineage():
    h = lossy_with_lineage()
    h.dead(1)
    h.dead(2)
    h.dead(0)
    h2 = h.restart()
    h2.beat(0, incarnation="b0", storage="node0/boot1")
    assert (h2.stored().leader, h2.stored().isr) == (0, [0])


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


def test_a_leader_restarted_before_any_controller_recorded_it_is_not_trusted_to_lead_again():
    """Seed 28240: the controller crashed before it had heard from the leader of a
    page-cache topic; meanwhile the leader's machine lost power and its replica restarted
    empty. The next controller's first contact with it was that new process: it took the
    new storage lineage as the known one, so the leader's FENCED_LEADER_EPOCH answer did
    not make it suspect, it was elected again, and the followers truncated to its empty log."""
    h = Harness()
    h.create(config=LOSSY)
    for b in (1, 2):  # the first controller recorded the followers, not the leader
        h.beat(b, incarnation=f"a{b}", storage=f"node{b}/boot1")
    h2 = h.restart()
    # The restarted leader: a process nobody recorded, not told of the current epoch.
    actions = h2.beat(0, incarnation="b0", storage="node0/boot2", role="none", leader_epoch=-1, log_end_offset=0)
    told = next(a for a in actions if isinstance(a, SendLeaderAndIsr) and a.replica.broker == 0)
    h2.beat(1, incarnation="a1", storage="node1/boot1", log_end_offset=42)
    h2.beat(2, incarnation="a2", storage="node2/boot1", log_end_offset=42)
    # It answers that it will not resume the epoch (it restarted): elect again.
    lai = LeaderAndIsrResponse(error_code=ErrorCode.FENCED_LEADER_EPOCH, storage="node0/boot2")
    h2.apply(h2.core.on_leader_and_isr_result(told.replica, told.request, lai, h2.now))
    assert h2.stored().leader in (1, 2), "a follower that kept every record leads, not the emptied leader"
    # A process seen for the first time that is up to date did not restart: not suspect.
    h = Harness()
    h.create(config=LOSSY)
    h3 = h.restart()
    h3.beat(0, incarnation="a0", storage="node0/boot1")
    assert ReplicaId(TOPIC, 0, 0) not in h3.core.trust.suspect


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


def test_eligible_replica_restarted_with_its_page_cache_stays_eligible():
    """Long chaos run: the sole ISR member's node was lost with its disk; the ELR members had
    been SIGKILLed and restarted on their nodes since leaving the ISR, so, judged by process,
    none was trusted and the partition stayed offline for good. Same storage lineage: they
    hold what they held."""
    h = lossy_with_lineage()  # ELR [1, 2]
    h.dead(1)
    h.beat(1, incarnation="b1", storage="node1/boot1")  # restarted, same page cache
    h.dead(0)  # the sole ISR member is gone for good
    p = h.stored()
    assert p.leader == 1, (p.leader, p.isr, p.elr)


def test_eligible_replica_restarted_after_a_reboot_is_not_trusted():
    h = lossy_with_lineage()  # ELR [1, 2]
    h.dead(1)
    h.dead(2)
    h.beat(1, incarnation="b1", storage="node1/boot2")
    h.beat(2, incarnation="b2", storage="node2/boot2")
    h.dead(0)
    assert h.stored().leader == NO_LEADER


def test_a_role_is_addressed_to_the_process_last_heard_and_a_refusal_by_another_is_checked_at_once():
    """Seed 68272 (KIP-380): LeaderAndIsr names the replica process the controller last
    heard from; a newer process refuses it (STALE_BROKER_EPOCH), the controller beats that
    replica at once and, hearing the new process, sends it its role addressed to it."""
    h = Harness(config(follower_heartbeat_interval_ms=900))
    h.create()
    for b, inc in ((0, "p1"), (1, "q1"), (2, "r1")):
        h.beat(b, incarnation=inc)
    actions = h.dead(0)  # broker 0 fails: 1 leads, 1 and 2 are told
    told = {a.replica.broker: a.request for a in actions if isinstance(a, SendLeaderAndIsr)}
    assert {b: r.incarnation for b, r in told.items()} == {1: "q1", 2: "r1"}
    h.now += 10
    assert not any(isinstance(a, SendHeartbeat) and a.replica.broker == 2 for a in h.core.tick(h.now))
    refused = LeaderAndIsrResponse(ErrorCode.STALE_BROKER_EPOCH, "addressed to process r1; this is r2")
    assert h.apply(h.core.on_leader_and_isr_result(ReplicaId(TOPIC, 0, 2), told[2], refused, h.now)) == []
    assert any(isinstance(a, SendHeartbeat) and a.replica.broker == 2 for a in h.core.tick(h.now)), "beaten at once"
    again = [a for a in h.beat(2, incarnation="r2") if isinstance(a, SendLeaderAndIsr)]
    assert [(a.request.incarnation, a.request.leader) for a in again if a.replica.broker == 2] == [("r2", 1)]


NODES = {"n0": "h0", "n1": "h1", "n2": "h2"}  # node -> host, broker b on node nb


def bound_harness() -> Harness:
    """Brokers bound to nodes n0-n2, each on its own host."""
    h = Harness(binding={0: "n0", 1: "n1", 2: "n2"})
    h.core.on_nodes(list(NODES), NODES, h.now)
    return h


def creates_after(h: Harness, ms: int, broker: int) -> list:
    """The CreateReplica actions for ``broker``'s replica of partition 0 in a tick ``ms`` later."""
    from kcoord.replication.controller import CreateReplica

    h.now += ms
    rid = ReplicaId(TOPIC, 0, broker)
    return [a for a in h.apply(h.core.tick(h.now)) if isinstance(a, CreateReplica) and a.replica == rid]


def test_an_offline_partitions_last_isr_member_is_recreated_when_its_machine_returns_as_a_new_node():
    """The broker of an offline partition's only ISR member lost its node. The controller
    waits for that machine (its disk holds the only copy), and when a node appears on the
    same host -- Ray gives a returning machine a new node id -- recreates the replica there
    (persisting the re-binding first); a node on another host does not count."""
    from kcoord.replication.placement import PLACEMENT_KEY, decode_binding

    h = bound_harness()
    h.create()
    h.dead(0)
    h.dead(2)
    assert (h.partition().leader, h.partition().isr) == (1, [1])
    h.core.on_nodes(["n0", "n2"], NODES, h.now)  # n1 is lost with broker 1's replica
    h.dead(1)
    assert (h.partition().leader, h.partition().isr) == (NO_LEADER, [1])
    h.core.on_nodes(["n0", "n2", "spare"], {**NODES, "spare": "h9"}, h.now)
    assert creates_after(h, 5_000, broker=1) == []  # a spare node on another host would start it empty
    h.core.on_nodes(["n0", "n2", "spare", "n1b"], {**NODES, "spare": "h9", "n1b": "h1"}, h.now)
    (create,) = creates_after(h, 5_000, broker=1)
    assert create.node == "n1b"
    assert decode_binding(h.store.get(PLACEMENT_KEY))[1] == "n1b"


def test_sole_isr_member_back_on_its_machine_with_an_emptied_disk_does_not_lead():
    """The chaos run of seed 622365: broker 1's node was lost (the nemesis deletes its data
    directory with it, as a lost machine takes its disk), 0 and 2 were killed, the controller
    restarted: ISR [1], ELR [0, 2] untrusted, offline until broker 1 returns. It returns on a
    new node of its host -- but empty. A new process on new storage is suspect, so it does not
    lead on the ISR's word: with every candidate back, the longest log (an ELR member holding
    every acknowledged record) leads."""
    h = bound_harness()
    h.create(config=LOSSY)
    for b in BROKERS:
        h.beat(b, incarnation=f"a{b}", log_end_offset=100)
    h.alter([0])  # ELR [1, 2]
    h.dead(0)  # 1 leads from the ELR; ISR [1], ELR [0, 2]
    h.dead(2)
    h.dead(1)
    assert (h.stored().leader, h.stored().isr, h.stored().elr) == (NO_LEADER, [1], [0, 2])
    h2 = h.restart()
    h2.core.on_nodes(["n0", "n2", "n1b"], {**NODES, "n1b": "h1"}, h2.now)
    h2.beat(0, incarnation="c0", log_end_offset=100)
    h2.beat(2, incarnation="c2", log_end_offset=100)
    assert h2.stored().leader == NO_LEADER, "this controller never saw them leave: no trust"
    assert [c.node for c in creates_after(h2, 5_000, broker=1)] == ["n1b"]
    h2.beat(0, incarnation="c0", log_end_offset=100)  # alive all along
    h2.beat(2, incarnation="c2", log_end_offset=100)
    assert h2.stored().leader == NO_LEADER
    h2.beat(1, incarnation="b1", storage="n1b/boot1", log_end_offset=0)
    p = h2.stored()
    assert p.leader == 0 and p.isr == [0], (p.leader, p.isr)


def test_the_periodic_rebalance_waits_until_every_isr_member_answered_the_controller():
    """Chaos seed 983771: a follower of `chaos-2` was killed, then the controller; the new
    controller watched it alive only by its start-up grace (it never answered), and its
    periodic check moved leadership to the preferred replica. The new leader gave the dead
    member a fresh `replica.lag.time.max.ms` (as Kafka's does), so the HW stayed frozen for
    about 25 s with a live leader. A move waits until every ISR member answered this
    controller itself; the operator's rebalance does not wait."""
    cfg = config(auto_leader_rebalance=True, leader_rebalance_interval_ms=1000, replica_startup_grace_ms=30_000)
    h = Harness(cfg)
    h.create()
    h.dead(0)
    h.beat(0, incarnation="new")
    h.alter([0, 1, 2])
    assert h.partition().leader == 1
    h = h.restart()  # a new controller: every replica alive by its start-up grace only
    h.beat(0, incarnation="new")
    h.beat(1, incarnation="i1")
    h.now = 1000
    h.apply(h.core.tick(h.now))
    assert h.partition().leader == 1, "follower 2 never answered this controller: no move"
    h.beat(2, incarnation="i2")
    h.now = 2000
    h.apply(h.core.tick(h.now))
    assert h.partition().leader == 0, "every ISR member answered: leadership goes back"


def test_the_operators_rebalance_does_not_wait_for_unheard_isr_members():
    h = Harness(config(replica_startup_grace_ms=30_000))
    h.create()
    h.dead(0)
    h.beat(0, incarnation="new")
    h.alter([0, 1, 2])
    h = h.restart()
    h.beat(0, incarnation="new")
    h.apply(h.core.rebalance_leaders(h.now))
    assert h.partition().leader == 0


def test_a_leaders_word_that_a_follower_stopped_fetching_ends_its_start_up_grace():
    """Chaos seed 983771 (`chaos-2`): follower 1 was killed, then the controller, and its
    actor took ~17 s to answer again. The new controller watched it alive only by its
    start-up grace (30 s), so it stayed in the ISR and the leader's HW froze. The grace is
    for an actor that may still be starting; once the leader says the follower has not
    fetched for longer than a vouch is good for, it gets one session timeout to answer."""
    h = Harness(config(replica_startup_grace_ms=30_000, session_timeout_ms=3000))
    h.create()
    beat_all(h)
    h = h.restart()
    h.beat(2, incarnation="a2")
    pe = h.partition().partition_epoch
    h.now += 100
    h.beat(0, incarnation="a0", followers_heard={1: (5000, 10, "a1", "", pe, ""), 2: (0, 10, "a2", "", pe, "")})
    for h.now in range(h.now + 500, h.now + 5000, 500):
        h.apply(h.core.tick(h.now))
        h.beat(0, incarnation="a0", followers_heard={1: (5000 + h.now, 10, "a1", "", pe, ""), 2: (0, 10, "a2", "", pe, "")})
    assert h.stored().isr == [0, 2], "follower 1 stopped fetching and never answered: out of the ISR"
    h.beat(1, incarnation="b1")
    assert 1 not in h.stored().isr, "back by the leader's expansion once it fetches"


def test_a_follower_in_its_start_up_grace_that_the_leader_heard_lately_keeps_it():
    h = Harness(config(replica_startup_grace_ms=30_000, session_timeout_ms=3000))
    h.create()
    beat_all(h)
    h = h.restart()
    pe = h.partition().partition_epoch
    for h.now in range(100, 10_000, 500):
        h.apply(h.core.tick(h.now))
        h.beat(0, incarnation="a0", followers_heard={b: (0, 10, f"a{b}", "", pe, "") for b in (1, 2)})
    assert h.stored().isr == [0, 1, 2], "fetching followers stay, answered or not"
