"""A replica back with a wiped disk (another log directory id than the controller recorded)
holds nothing it held: it does not lead on the strength of its ISR or ELR membership --
whatever the topic's durability -- until it is in sync again, or an operator enables unclean
election for the topic (KIP-858's directory ids, KIP-966's unclean recovery)."""

from __future__ import annotations

from kcoord.protocol.controller import AlterConfigOp, IncrementalAlterConfigsRequest, LeaderAndIsrResponse
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import ReplicaId, SendLeaderAndIsr
from kcoord.replication.metadata import NO_LEADER, PartitionState, ReplicaTrust, decode_trust, partition_key

from controller_harness import BROKERS, TOPIC, Harness, lai_targets

DURABLE = {"min.insync.replicas": "2", "flush.messages": "1"}


def seen(h: Harness, brokers=BROKERS, leo: int = 100) -> None:
    """Every replica answers as process a<b> from directory d<b>."""
    for b in brokers:
        h.beat(b, incarnation=f"a{b}", directory_id=f"d{b}", log_end_offset=leo)


def enable_unclean(h: Harness) -> list:
    op = AlterConfigOp("unclean.leader.election.enable", 0, "true")
    resp, actions = h.core.alter_configs(IncrementalAlterConfigsRequest(TOPIC, [op]), h.now)
    assert resp.error_code == 0, resp.error_message
    return h.apply(actions)


def stored_trust(h: Harness, broker: int) -> ReplicaTrust:
    return decode_trust(h.store.get(partition_key(TOPIC, 0))).get(broker, ReplicaTrust())


def test_a_single_replica_back_with_a_wiped_disk_stays_offline_until_unclean_election_is_enabled():
    """RF=1: its acknowledged records are gone with its disk. Electing it would restart the
    partition at offset 0 under consumers that committed past it; it stays offline (and says
    why) until the operator accepts the loss."""
    h = Harness()
    h.create(rf=1)
    seen(h, [0])
    h.dead(0)
    assert h.stored().leader == NO_LEADER
    h.beat(0, incarnation="b0", directory_id="d0-new", log_end_offset=0)
    assert h.stored().leader == NO_LEADER, "an empty directory must not lead on the ISR's word"
    assert h.core.metrics_snapshot()["directories_replaced"] == 1
    assert h.core.partition_counts()["replaced_directory_replicas"] == 1
    assert stored_trust(h, 0) == ReplicaTrust("b0", True, "", "", "d0-new", True), "persisted before anything acts on it"
    # a restarted controller knows it too
    h2 = h.restart()
    h2.beat(0, incarnation="b0", directory_id="d0-new", log_end_offset=0)
    assert h2.stored().leader == NO_LEADER
    actions = enable_unclean(h2)
    p = h2.stored()
    assert (p.leader, p.isr) == (0, [0]) and lai_targets(actions) == [0]
    assert h2.core.metrics_snapshot()["unclean_elections"] == 1
    assert p.last_unclean_epoch == p.leader_epoch, "the store says this epoch began unclean"
    assert h2.core.partition_counts()["replaced_directory_replicas"] == 0 and not stored_trust(h2, 0).replaced


def test_a_single_replica_back_with_its_own_directory_leads_again():
    """The contrast: a new process on the directory it had is elected as before."""
    h = Harness()
    h.create(rf=1)
    seen(h, [0])
    h.dead(0)
    h.beat(0, incarnation="b0", directory_id="d0", log_end_offset=100)
    assert h.stored().leader == 0
    assert h.core.metrics_snapshot()["directories_replaced"] == 0


def test_a_durable_topics_last_isr_member_back_wiped_does_not_lead_and_unclean_picks_the_longest_log():
    """flush.messages=1 topics keep the classic rules (no ELR): the ISR shrank to broker 0
    alone, then everyone died. 0 returns with an empty directory: before directory ids it
    was elected and the others truncated to nothing. Now the partition waits; an unclean
    election picks the longest live log, not the empty one first in the ISR."""
    h = Harness()
    h.create(config=DURABLE)
    seen(h)
    h.alter([0])
    for b in (1, 2, 0):
        h.dead(b)
    assert (h.stored().leader, h.stored().isr) == (NO_LEADER, [0])
    h.beat(1, incarnation="b1", directory_id="d1", log_end_offset=100)
    h.beat(2, incarnation="b2", directory_id="d2", log_end_offset=90)
    h.beat(0, incarnation="b0", directory_id="d0-new", log_end_offset=0)
    assert h.stored().leader == NO_LEADER
    enable_unclean(h)
    p = h.stored()
    assert (p.leader, p.isr) == (1, [1]), (p.leader, p.isr)


def test_an_eligible_replica_back_wiped_is_no_candidate():
    """A page-cache topic: the ISR is [0] with ELR [1, 2]. Broker 1 returns from a wiped disk
    with the very storage lineage it had (same machine, same boot); it would be trusted as
    the process seen leaving, yet it holds nothing. Broker 2, the other ELR member, leads."""
    h = Harness()
    h.create(config={"min.insync.replicas": "2"})
    for b in BROKERS:
        h.beat(b, incarnation=f"a{b}", storage=f"node{b}/boot1", directory_id=f"d{b}")
    h.alter([0])  # ELR [1, 2]
    for b in (1, 2, 0):
        h.dead(b)
    assert (h.stored().isr, h.stored().elr) == ([0], [1, 2])
    h.beat(1, incarnation="b1", storage="node1/boot1", directory_id="d1-new", log_end_offset=0)
    assert h.stored().leader == NO_LEADER, "its disk is gone: no witness of anything"
    h.beat(2, incarnation="b2", storage="node2/boot1", directory_id="d2", log_end_offset=100)
    assert h.stored().leader == 2


def test_a_follower_back_wiped_is_trusted_again_once_it_rejoins_the_isr():
    h = Harness()
    h.create()
    seen(h)
    h.dead(2)
    h.beat(2, incarnation="b2", directory_id="d2-new", log_end_offset=0)
    assert ReplicaId(TOPIC, 0, 2) in h.core.trust.replaced
    resp, _ = h.alter([0, 1, 2], incarnations={2: "b2"})  # it caught up from the leader
    assert resp.error_code == 0
    assert h.core.partition_counts()["replaced_directory_replicas"] == 0 and not stored_trust(h, 2).replaced


def test_a_wiped_follower_the_leader_vouches_for_is_beaten_and_seen_as_replaced():
    """The leader's word for a new process (on a new directory) gets it beaten at once; its
    own answer carries the directory, and makes it replaced."""
    h = Harness()
    h.create()
    seen(h)
    h.now = 100
    pe = h.partition().partition_epoch
    heard = {1: (0, 100, "a1", "", pe, "d1"), 2: (0, 0, "b2", "", pe, "d2-new")}
    h.beat(0, incarnation="a0", directory_id="d0", followers_heard=heard)
    assert not h.core.trust.replaced, "a vouch makes no other process current"
    assert 2 in [a.replica.broker for a in h.core.tick(h.now) if type(a).__name__ == "SendHeartbeat"]
    h.beat(2, incarnation="b2", directory_id="d2-new", log_end_offset=0)
    assert h.core.trust.replaced == {ReplicaId(TOPIC, 0, 2)}
    assert h.stored().isr == [0, 1], "a new process: out of the ISR until it catches up"


def test_a_designated_leader_refusing_from_a_new_directory_is_not_re_elected():
    """The refusal of a restarted designated leader names its directory: a wiped one does not
    get the partition back at a new epoch; an ISR member that kept its disk does."""
    h = Harness()
    h.create(config=DURABLE)
    seen(h)
    lai = next(a for a in h.sent if isinstance(a, SendLeaderAndIsr) and a.replica.broker == 0)
    refusal = LeaderAndIsrResponse(ErrorCode.FENCED_LEADER_EPOCH, "restarted", directory_id="d0-new")
    h.apply(h.core.on_leader_and_isr_result(ReplicaId(TOPIC, 0, 0), lai.request, refusal, h.now) or [])
    p = h.stored()
    assert p.leader == 1 and 0 not in p.isr, (p.leader, p.isr)


def test_a_leader_heard_only_through_its_leader_and_isr_answer_is_known_by_its_directory():
    """Sim seed 8536: the controller elected broker 2, whose heartbeat answers were lost; the
    only word it had from it was the answer to its LeaderAndIsr. It failed; the next
    controller, knowing no directory for 2, re-sent it the leadership, and a process on a
    wiped disk took it with an empty log (a reader saw the HW go back). The answer names the
    directory, which is recorded (and persisted) when none is known."""
    h = Harness()
    h.create()
    h.now = 100
    h.dead(0)
    p = h.partition()
    leader = p.leader
    lai = next(a.request for a in h.sent if isinstance(a, SendLeaderAndIsr) and a.replica.broker == leader and a.request.leader == leader)
    assert lai.directory_id == "", "nothing known of its directory yet"
    h.apply(h.core.on_leader_and_isr_result(ReplicaId(TOPIC, 0, leader), lai, LeaderAndIsrResponse(directory_id=f"d{leader}", storage="m"), h.now))
    assert stored_trust(h, leader).directory == f"d{leader}"
    # the next controller, shrinking the ISR as a follower dies, addresses the new state to
    # the leader in that directory (which a process on a wiped disk refuses to lead from)
    h2 = h.restart()
    follower = next(b for b in h2.partition().isr if b != leader)
    h2.dead(follower)
    resent = [a.request for a in h2.sent if isinstance(a, SendLeaderAndIsr) and a.replica.broker == leader and a.request.leader == leader]
    assert resent and all(r.directory_id == f"d{leader}" for r in resent)
    # a later answer from another directory is not taken from a LeaderAndIsr answer (a late
    # answer of a previous process could undo it); heartbeats and vouches tell
    h2.apply(h2.core.on_leader_and_isr_result(ReplicaId(TOPIC, 0, leader), resent[0], LeaderAndIsrResponse(directory_id="other"), h2.now))
    assert stored_trust(h2, leader).directory == f"d{leader}"


def test_a_leader_back_on_a_wiped_disk_is_failed_over_even_after_the_failover_was_lost():
    """Sim seed 18876: the leader came back on an empty directory; the controller recorded
    the new process and directory (persisted first) and elected another leader, but the
    partition's store write failed and it reloaded. The reloaded controller knew the new
    process already, saw no restart, and re-sent the leader its epoch: the empty log led it
    and a reader saw the HW go back. A replaced designated leader is failed over whenever it
    answers."""
    h = Harness()
    h.create()
    seen(h)
    assert h.stored().leader == 0
    h.now = 100
    before = dict(h.store.data)
    sent = len(h.sent)
    h.beat(0, incarnation="b0", directory_id="d0-new", log_end_offset=0)
    persists = [a for a in h.sent[sent:] if type(a).__name__ == "Persist"]
    first = persists[0]
    assert first.key == partition_key(TOPIC, 0) and PartitionState.decode(first.value).leader == 0
    assert decode_trust(first.value)[0].replaced, "what it is found to be is written first"
    assert h.stored().leader != 0, "this controller failed it over"
    # only that first write reached the store: the election's did not
    h.store.data = before
    h.store.put(persists[0].key, persists[0].value)
    h2 = h.restart()
    assert h2.stored().leader == 0 and stored_trust(h2, 0).replaced
    for b in (1, 2):
        h2.beat(b, incarnation=f"a{b}", directory_id=f"d{b}", log_end_offset=100)
    h2.beat(0, incarnation="b0", directory_id="d0-new", log_end_offset=0, role="none", leader_epoch=-1, partition_epoch=-1)
    assert h2.stored().leader not in (0, NO_LEADER), "another in-sync replica leads; the empty one does not"
    assert not any(isinstance(a, SendLeaderAndIsr) and a.replica.broker == 0 and a.request.leader == 0 for a in h2.sent)


def test_a_follower_back_wiped_while_no_controller_watched_leaves_the_isr_and_rejoins_trusted():
    """Sim seed 23499: follower 2's disk was wiped and its process restarted while no
    controller ran; the next controller heard it on a new directory while the ISR still
    named it. It stayed in the ISR, never trusted (no expansion could re-admit a member),
    and when the leader's disk went too the partition stayed offline for good although 2
    had caught up. It leaves the ISR at once, and the leader's expansion trusts it again."""
    h = Harness()
    h.create()
    seen(h)
    assert h.stored().isr == [0, 1, 2]
    h2 = h.restart()
    h2.beat(0, incarnation="a0", directory_id="d0")
    h2.beat(1, incarnation="a1", directory_id="d1")
    h2.beat(2, incarnation="b2", directory_id="d2-new", log_end_offset=0, role="follower")
    p = h2.stored()
    assert p.leader == 0 and p.isr == [0, 1], "a member holding none of what it held is no ISR member"
    assert stored_trust(h2, 2).replaced
    assert 0 in lai_targets(h2.sent), "the leader is told, so that it can take 2 back"
    resp, _ = h2.alter([0, 1, 2], incarnations={2: "b2"})  # it caught up from the leader
    assert resp.error_code == 0 and h2.stored().isr == [0, 1, 2]
    assert not stored_trust(h2, 2).replaced, "back in the ISR: trusted again"


def test_a_follower_restarted_unseen_on_its_own_directory_stays_in_the_isr():
    """The contrast: a new process on the directory it had is the leader's to judge."""
    h = Harness()
    h.create()
    seen(h)
    h2 = h.restart()
    h2.beat(0, incarnation="a0", directory_id="d0")
    h2.beat(2, incarnation="b2", directory_id="d2", role="follower")
    assert h2.stored().isr == [0, 1, 2]
