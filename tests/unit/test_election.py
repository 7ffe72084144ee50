"""Election rules (kcoord.replication.election): who leads next, and when nobody may."""

from __future__ import annotations

import itertools

from kcoord.replication.election import elect_leader, preferred_leader_move, shrink_isr_without
from kcoord.replication.metadata import NO_LEADER, PartitionState


def part(replicas=(0, 1, 2), leader=0, isr=(0, 1, 2), epoch=3) -> PartitionState:
    return PartitionState("t", 0, list(replicas), leader=leader, leader_epoch=epoch, partition_epoch=epoch, isr=list(isr))


def alive(*brokers: int):
    return lambda b: b in brokers


def test_clean_election_picks_first_live_isr_member_in_assignment_order():
    p = part(replicas=(2, 0, 1), leader=2, isr=(0, 1, 2))
    e = elect_leader(p, alive(0, 1))
    assert (e.leader, e.isr, e.unclean) == (0, [0, 1], False)
    e = elect_leader(p, alive(1))
    assert (e.leader, e.isr) == (1, [1])


def test_a_live_isr_member_not_heard_yet_leads_if_it_must_but_leaves_the_new_isr():
    """``heard`` (the controller has heard the replica since it started watching it): a
    member alive only by a grace period may hold nothing running; kept in the ISR, the new
    leader's HW would wait for it for replica.lag.time.max.ms."""
    p = part(replicas=(0, 1, 2), leader=0, isr=(0, 1, 2))
    e = elect_leader(p, alive(1, 2), heard=alive(1))
    assert (e.leader, e.isr) == (1, [1])
    e = elect_leader(p, alive(1, 2), heard=alive())
    assert (e.leader, e.isr) == (1, [1]), "the leader itself stays, heard or not"
    e = elect_leader(p, alive(1, 2), heard=alive(1, 2))
    assert (e.leader, e.isr) == (1, [1, 2])


def test_a_heard_isr_member_leads_before_one_alive_only_by_its_grace():
    """A member the controller has not heard since it started watching may run nothing
    (a restarted controller's grace): electing it when a heard member can lead leaves the
    partition without a serving leader until its grace runs out. Heard members lead first,
    in assignment order; an unheard one leads only when no heard member can."""
    p = part(replicas=(0, 1, 2), leader=0, isr=(0, 1, 2))
    e = elect_leader(p, alive(1, 2), heard=alive(2))
    assert (e.leader, e.isr) == (2, [2])
    e = elect_leader(p, alive(0, 1, 2), heard=alive(1, 2))
    assert (e.leader, e.isr) == (1, [1, 2]), "among heard members, assignment order"
    lossy = lossy_part(isr=(0,), elr=(1, 2))
    e = elect_leader(lossy, alive(1, 2), trusted=lambda b: True, heard=alive(2))
    assert (e.leader, e.isr) == (2, [2]), "the same order among ELR members"


def test_clean_election_never_picks_a_live_replica_outside_the_isr():
    p = part(isr=(0, 1))
    e = elect_leader(p, alive(1, 2))
    assert e.leader == 1 and 2 not in e.isr
    e = elect_leader(part(isr=(0,)), alive(1, 2))
    assert e.offline


def test_offline_when_no_isr_member_is_alive_and_isr_is_kept():
    p = part(isr=(0, 1))
    e = elect_leader(p, alive(2), log_end_offsets={2: 100})
    assert e.offline and e.leader == NO_LEADER
    assert e.isr == [0, 1], "kept, so the first ISR member to return is elected"
    assert not e.unclean


def test_unclean_election_picks_the_longest_log_only_when_allowed():
    p = part(isr=(0,))
    leos = {1: 40, 2: 70}
    e = elect_leader(p, alive(1, 2), unclean_allowed=True, log_end_offsets=leos)
    assert (e.leader, e.isr, e.unclean) == (2, [2], True)
    # ties go to assignment order; unknown LEOs count as -1
    e = elect_leader(p, alive(1, 2), unclean_allowed=True, log_end_offsets={1: 5, 2: 5})
    assert e.leader == 1
    e = elect_leader(p, alive(2, 1), unclean_allowed=True, log_end_offsets={})
    assert e.leader == 1
    # a live ISR member always wins over an unclean candidate with a longer log
    e = elect_leader(part(isr=(0, 1)), alive(1, 2), unclean_allowed=True, log_end_offsets={1: 1, 2: 99})
    assert (e.leader, e.unclean) == (1, False)


def test_unclean_with_nobody_alive_is_offline():
    e = elect_leader(part(isr=(0,)), alive(), unclean_allowed=True)
    assert e.offline and e.isr == [0]


def test_preferred_leader_move_only_when_preferred_is_alive_and_in_isr():
    assert preferred_leader_move(part(leader=1, isr=(0, 1, 2)), alive(0, 1, 2)) == 0
    assert preferred_leader_move(part(leader=1, isr=(1, 2)), alive(0, 1, 2)) is None, "not in the ISR"
    assert preferred_leader_move(part(leader=1, isr=(0, 1, 2)), alive(1, 2)) is None, "not alive"
    assert preferred_leader_move(part(leader=0), alive(0, 1, 2)) is None, "already leads"
    assert preferred_leader_move(part(leader=NO_LEADER, isr=(0,)), alive(0)) is None, "offline: election's job"


def test_preferred_leader_move_waits_for_every_settled_isr_member():
    p = part(leader=1, isr=(0, 1, 2))
    assert preferred_leader_move(p, alive(0, 1, 2), settled=alive(0, 1)) is None, "member 2 may be dead"
    assert preferred_leader_move(p, alive(0, 1, 2), settled=alive(0, 1, 2)) == 0
    assert preferred_leader_move(part(leader=1, isr=(0, 1)), alive(0, 1, 2), settled=alive(0, 1)) == 0, "only ISR members count"


def test_isr_shrinks_without_a_failed_follower():
    assert shrink_isr_without(part(isr=(0, 1, 2)), 1) == [0, 2]
    assert shrink_isr_without(part(isr=(0, 2)), 1) is None, "not a member"
    assert shrink_isr_without(part(isr=(0, 1, 2)), 0) is None, "the leader is replaced by election, not shrunk"


def test_isr_never_shrinks_below_one():
    # whatever order followers fail in, the ISR keeps at least one member (the leader)
    for order in itertools.permutations([1, 2]):
        p = part(leader=0, isr=(0, 1, 2))
        for b in order:
            new = shrink_isr_without(p, b)
            if new is not None:
                p.isr = new
            assert len(p.isr) >= 1
        assert p.isr == [0]


def test_offline_partition_keeps_its_whole_isr():
    # with no leader, the ISR is exactly who holds every acked record: never shrink it
    for b in (0, 1, 2):
        assert shrink_isr_without(part(leader=NO_LEADER, isr=(0, 1, 2)), b) is None


# -- topics without per-append fsync: trusted members and eligible leader replicas (ELR) --


def lossy_part(isr=(0,), elr=(1,), leader=NO_LEADER) -> PartitionState:
    p = part(leader=leader, isr=isr)
    p.elr = list(elr)
    return p


def test_elr_is_ignored_without_a_trust_verdict():
    # durable topics (no ``trusted``): exactly the classic rules, offline without ISR
    assert elect_leader(lossy_part(), alive(1, 2)).offline


def test_trusted_live_elr_member_leads_when_no_trusted_isr_member_is_alive():
    e = elect_leader(lossy_part(isr=(0,), elr=(2, 1)), alive(1, 2), trusted=lambda b: True)
    assert (e.leader, e.isr, e.unclean) == (1, [1], False), "assignment order among the ELR"


def test_suspect_isr_member_does_not_lead_while_a_trusted_candidate_lives():
    # 0 restarted (suspect) and is the only ISR member; 1 left the ISR holding every acked record
    e = elect_leader(lossy_part(isr=(0,), elr=(1,)), alive(0, 1), trusted=lambda b: b != 0)
    assert e.leader == 1
    # the trusted ELR member is down: wait for it rather than trust the restarted 0
    e = elect_leader(lossy_part(isr=(0,), elr=(1,)), alive(0), trusted=lambda b: b != 0)
    assert e.offline and e.isr == [0]


def test_all_candidates_back_but_untrusted_longest_log_leads():
    p = lossy_part(isr=(0,), elr=(1,))
    e = elect_leader(p, alive(0, 1, 2), log_end_offsets={0: 5, 1: 9, 2: 50}, trusted=lambda b: False)
    assert (e.leader, e.isr) == (1, [1]), "2 is neither in the ISR nor the ELR: never a candidate"
    e = elect_leader(p, alive(0, 1), log_end_offsets={0: 9, 1: 9}, trusted=lambda b: False)
    assert e.leader == 0, "ties go to assignment order"


def test_no_unclean_election_while_an_isr_member_is_alive_but_not_yet_heard():
    """Sim seed 10010: a restarted controller found its lossy partition's leader restarted
    (suspect, log lost) and the two other ISR members alive but not yet heard from (their log
    ends unknown). With unclean election allowed it elected the empty replica -- the only
    known log end -- and the others truncated everything. Unclean election is for when no
    ISR or ELR member is alive; otherwise the partition waits for them."""
    p = lossy_part(isr=(0, 1, 2), elr=())
    trusted = lambda b: False  # noqa: E731 - 0 restarted; 1 and 2 have not answered yet
    e = elect_leader(p, alive(0, 1, 2), unclean_allowed=True, log_end_offsets={0: 0}, trusted=trusted)
    assert e.offline, "wait for the ISR members to answer"
    e = elect_leader(p, alive(0, 1, 2), unclean_allowed=True, log_end_offsets={0: 0, 1: 51, 2: 51}, trusted=trusted)
    assert e.leader == 1 and not e.unclean, "once they answered, the longest log of the ISR leads"
    e = elect_leader(lossy_part(isr=(0,), elr=()), alive(1, 2), unclean_allowed=True, log_end_offsets={1: 3, 2: 5})
    assert e.unclean and e.leader == 2, "no ISR member alive: unclean picks the longest live log"


# -- replicas whose log directory was replaced (a wiped disk) -----------------------------


def test_an_isr_member_with_a_replaced_directory_is_no_candidate_of_any_topic():
    wiped = lambda b: b != 0  # noqa: E731 - broker 0 came back from a wiped disk
    assert elect_leader(part(isr=(0,)), alive(0, 1, 2), holds_data=wiped).offline, "durable topic"
    e = elect_leader(part(isr=(0, 1)), alive(0, 1), holds_data=wiped)
    assert (e.leader, e.isr) == (1, [1]), "it leaves the ISR with the election"
    lossy = lossy_part(isr=(0,), elr=())
    assert elect_leader(lossy, alive(0), log_end_offsets={0: 0}, trusted=lambda b: False, holds_data=wiped).offline, (
        "the last-resort longest log is no resort when its candidate holds nothing"
    )


def test_unclean_election_does_not_wait_for_a_replaced_isr_member():
    """Its data is gone: waiting for it recovers nothing; the longest live log loses least."""
    p = part(isr=(0,))
    e = elect_leader(p, alive(0, 1, 2), unclean_allowed=True, log_end_offsets={0: 0, 1: 40, 2: 70}, holds_data=lambda b: b != 0)
    assert (e.leader, e.unclean) == (2, True)
    assert elect_leader(p, alive(0, 1, 2), unclean_allowed=True, log_end_offsets={0: 0, 1: 40, 2: 70}).leader == 0, (
        "without the verdict the ISR member leads (the classic rule)"
    )
