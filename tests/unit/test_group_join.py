"""GroupCoordinatorState: JoinGroup, SyncGroup, heartbeats, leaving, session expiry, static
membership. Explicit clock, no Ray."""

from __future__ import annotations

import dataclasses

import pytest

from kcoord.group import GroupConfig, GroupState
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.group import (
    Assignment,
    JoinGroupProtocol,
    OffsetCommitPartition,
    OffsetCommitRequest,
    Subscription,
)

try:
    from .test_group_harness import DELAY, FAST, REBALANCE, SESSION, Shell, protocols
except ImportError:
    from test_group_harness import DELAY, FAST, REBALANCE, SESSION, Shell, protocols


def two_joined(s: Shell, group: str = "g") -> tuple[str, str, int]:
    """Two members in CompletingRebalance (joined, not yet synced): (leader, follower, gen)."""
    a = s.new_member_id(group)
    b = s.new_member_id(group)
    ra, rb = s.settle(s.join(group, a), s.join(group, b))
    assert ra.error_code == rb.error_code == 0
    return ra.leader, (b if ra.leader == a else a), ra.generation_id


# -- JoinGroup ------------------------------------------------------------------------------


def test_member_id_required_then_rejoin_forms_generation_one():
    s = Shell()
    r = s.call(_join_req("g"))
    assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id.startswith("c-")
    assert s.group().state == GroupState.EMPTY and r.member_id in s.group().pending_members
    token = s.join("g", r.member_id)
    assert s.reply(token) is None  # the initial rebalance delay
    s.advance(DELAY)
    joined = s.reply(token)
    assert joined.error_code == 0
    assert joined.generation_id == 1 and joined.leader == r.member_id == joined.member_id
    assert joined.protocol_name == "range" and joined.protocol_type == "consumer"
    assert [m.member_id for m in joined.members] == [r.member_id]
    assert s.group().state == GroupState.COMPLETING_REBALANCE


def _join_req(group: str, member_id: str = "", **kw):
    from kcoord.protocol.group import JoinGroupRequest

    return JoinGroupRequest(group, kw.pop("session", SESSION), kw.pop("rebalance", REBALANCE), member_id=member_id,
                            protocols=kw.pop("protos", protocols()), client_id="c", **kw)


def test_unknown_member_id_for_missing_group_and_unknown_member():
    s = Shell()
    assert s.call(_join_req("nope", "ghost")).error_code == E.UNKNOWN_MEMBER_ID
    assert s.group("nope") is None
    s.form_group("g", 1)
    assert s.call(_join_req("g", "ghost")).error_code == E.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("session", [5, 600_001])
def test_invalid_session_timeout(session):
    s = Shell()
    r = s.call(_join_req("g", session=session))
    assert r.error_code == E.INVALID_SESSION_TIMEOUT


def test_empty_group_id_is_invalid():
    s = Shell()
    assert s.call(_join_req("")).error_code == E.INVALID_GROUP_ID


def test_inconsistent_protocol_type_and_no_common_protocol():
    s = Shell()
    s.form_group("g", 1)
    other_type = s.call(_join_req("g", protocol_type="connect"))
    assert other_type.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    no_common = s.call(_join_req("g", protos=protocols(names=["roundrobin"])))
    assert no_common.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    empty_protocols = Shell().call(_join_req("h", protos=[]))
    assert empty_protocols.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_with_most_votes_among_common_ones_wins():
    s = Shell()
    ids = [s.new_member_id("g") for _ in range(3)]
    prefs = [["sticky", "range", "roundrobin"], ["roundrobin", "range"], ["range", "roundrobin", "sticky"]]
    tokens = [s.join("g", m, names=p) for m, p in zip(ids, prefs)]
    # Common to all: range, roundrobin. First choices among those: range, roundrobin, range.
    responses = s.settle(*tokens)
    assert {r.protocol_name for r in responses} == {"range"}


def test_group_max_size():
    s = Shell(dataclasses.replace(FAST, group_max_size=2))
    s.form_group("g", 2)
    r = s.call(_join_req("g"))
    assert r.error_code == E.GROUP_MAX_SIZE_REACHED


def test_initial_rebalance_delay_waits_and_extends_while_members_arrive():
    s = Shell(dataclasses.replace(FAST, group_initial_rebalance_delay_ms=3_000))
    a = s.new_member_id("g")
    ta = s.join("g", a, rebalance=10_000)
    assert s.reply(ta) is None and s.group().state == GroupState.PREPARING_REBALANCE
    assert s.coord.next_deadline(s.now) == s.now + 3_000
    s.advance(2_000)
    b = s.new_member_id("g")
    tb = s.join("g", b, rebalance=10_000)  # a new member during the delay extends it
    s.advance(1_000)  # first delay over: extended by another 3 s (7 s budget left)
    assert s.reply(ta) is None and s.reply(tb) is None
    s.advance(2_999)
    assert s.reply(ta) is None
    s.advance(1)
    ra, rb = s.reply(ta), s.reply(tb)
    assert ra.generation_id == rb.generation_id == 1 and len(ra.members) == 2


def test_initial_delay_extension_is_capped_by_rebalance_timeout():
    s = Shell(dataclasses.replace(FAST, group_initial_rebalance_delay_ms=3_000))
    a = s.new_member_id("g")
    ta = s.join("g", a, rebalance=5_000)  # budget: 3 s + 2 s of extensions
    start = s.now
    tokens = [ta]
    while s.reply(ta) is None and s.now - start < 60_000:
        m = s.new_member_id("g")
        tokens.append(s.join("g", m, rebalance=5_000))
        s.advance(500)
    assert s.now - start == 5_000
    assert s.group().state == GroupState.COMPLETING_REBALANCE


def test_join_completes_when_all_known_members_rejoin():
    s = Shell()
    members, gen, _ = s.form_group("g", 3)
    a, b, c = members
    ta = s.join("g", a)
    assert s.group().state == GroupState.PREPARING_REBALANCE and s.reply(ta) is None
    tb = s.join("g", b)
    assert s.reply(tb) is None
    tc = s.join("g", c)
    ra, rb, rc = s.reply(ta), s.reply(tb), s.reply(tc)
    assert ra.generation_id == rb.generation_id == rc.generation_id == gen + 1


def test_rebalance_timeout_removes_members_that_did_not_rejoin():
    s = Shell()
    members, gen, _ = s.form_group("g", 3)
    a, b, c = members
    ta = s.join("g", a, rebalance=5_000)
    # b and c keep heartbeating (told to rejoin) but never do
    for _ in range(4):
        s.advance(1_000)
        assert s.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS
        assert s.heartbeat("g", c, gen) == E.REBALANCE_IN_PROGRESS
    assert s.reply(ta) is None
    s.advance(1_000)  # rebalance timeout = max over members; b, c still have 30 s
    assert s.reply(ta) is None
    s.advance(REBALANCE - 5_000)
    r = s.reply(ta)
    assert r.error_code == 0 and r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]
    assert list(s.group().members) == [a]
    assert s.heartbeat("g", b, gen) == E.UNKNOWN_MEMBER_ID


def test_leader_gets_member_metadata_followers_do_not():
    s = Shell()
    a = s.new_member_id("g")
    b = s.new_member_id("g")
    ra, rb = s.settle(s.join("g", a, topics=["x", "y"]), s.join("g", b, topics=["y"]))
    assert ra.leader == rb.leader == a
    assert rb.members == []
    subs = {m.member_id: Subscription.decode(m.metadata).topics for m in ra.members}
    assert subs == {a: ["x", "y"], b: ["y"]}


def test_old_leader_stays_leader_when_it_rejoins():
    s = Shell()
    members, gen, _ = s.form_group("g", 3)
    leader = s.group().leader
    newcomer = s.join("g", s.new_member_id("g"))  # triggers a rebalance
    tokens = [s.join("g", m) for m in reversed(members)]  # the leader rejoins last
    responses = s.settle(newcomer, *tokens)
    assert all(r.leader == leader for r in responses) and len(responses[-1].members) == 4


def test_new_leader_when_old_leader_does_not_rejoin():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    leader = s.group().leader
    follower = next(m for m in members if m != leader)
    t = s.join("g", follower, topics=["t", "u"])  # changed subscription: rebalance
    (r,) = s.settle(t)  # the silent leader's session ends first
    assert r.leader == follower and len(r.members) == 1


def test_completing_rebalance_rejoin_with_same_protocols_repeats_the_response():
    s = Shell()
    leader, follower, gen = two_joined(s)
    r = s.reply(s.join("g", leader))
    assert r.error_code == 0 and r.generation_id == gen and len(r.members) == 2
    assert s.group().state == GroupState.COMPLETING_REBALANCE


def test_completing_rebalance_rejoin_with_new_protocols_rebalances():
    s = Shell()
    leader, follower, gen = two_joined(s)
    sync_token = s.sync("g", follower, gen)
    t = s.join("g", leader, topics=["other"])
    assert s.group().state == GroupState.PREPARING_REBALANCE
    assert s.reply(sync_token).error_code == E.REBALANCE_IN_PROGRESS
    assert s.reply(t) is None


def test_stable_follower_rejoin_without_change_is_answered_without_rebalance():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    follower = next(m for m in members if m != s.group().leader)
    r = s.reply(s.join("g", follower))
    assert r.error_code == 0 and r.generation_id == gen and r.members == []
    assert s.group().state == GroupState.STABLE


def test_stable_leader_rejoin_triggers_rebalance():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    t = s.join("g", s.group().leader)
    assert s.group().state == GroupState.PREPARING_REBALANCE and s.reply(t) is None


def test_stable_rejoin_with_changed_subscription_triggers_rebalance():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    follower = next(m for m in members if m != s.group().leader)
    s.join("g", follower, topics=["t", "u"])
    assert s.group().state == GroupState.PREPARING_REBALANCE


def test_repeated_join_supersedes_the_older_pending_request():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    a, b = members
    t1 = s.join("g", a)
    t2 = s.join("g", a)
    old = s.reply(t1)
    assert old.error_code == E.REBALANCE_IN_PROGRESS and s.reply(t2) is None
    s.join("g", b)
    assert s.reply(t2).generation_id == gen + 1


# -- SyncGroup ------------------------------------------------------------------------------


def test_sync_from_leader_distributes_assignments_after_persist():
    s = Shell(auto_persist=False)
    leader, follower, gen = two_joined(s)
    tf = s.sync("g", follower, gen)
    assert s.reply(tf) is None  # waits for the leader
    plan = {leader: Assignment({"t": [0, 1]}).encode(), follower: Assignment({"t": [2, 3]}).encode()}
    tl = s.sync("g", leader, gen, plan)
    assert s.reply(tl) is None and len(s.pending) == 1  # waits for the write
    assert s.group().state == GroupState.COMPLETING_REBALANCE
    s.complete()
    assert s.group().state == GroupState.STABLE
    assert Assignment.decode(s.reply(tl).assignment).partitions == {"t": [0, 1]}
    assert Assignment.decode(s.reply(tf).assignment).partitions == {"t": [2, 3]}
    # a late sync in Stable gets its assignment at once
    assert Assignment.decode(s.reply(s.sync("g", follower, gen)).assignment).partitions == {"t": [2, 3]}


def test_member_missing_from_leader_assignment_gets_empty_bytes():
    s = Shell()
    leader, follower, gen = two_joined(s)
    tf = s.sync("g", follower, gen)
    s.sync("g", leader, gen, {leader: b"x", "stranger": b"y"})
    assert s.reply(tf).assignment == b""
    assert set(s.group().members) == {leader, follower}


def test_sync_errors():
    s = Shell()
    leader, follower, gen = two_joined(s)
    assert s.reply(s.sync("g", follower, gen + 1)).error_code == E.ILLEGAL_GENERATION
    assert s.reply(s.sync("g", "ghost", gen)).error_code == E.UNKNOWN_MEMBER_ID
    assert s.reply(s.sync("nope", follower, gen)).error_code == E.UNKNOWN_MEMBER_ID
    # a rebalance starts: syncing now is pointless
    s.join("g", leader, topics=["other"])
    assert s.reply(s.sync("g", follower, gen)).error_code == E.REBALANCE_IN_PROGRESS


def test_sync_with_wrong_protocol_name_is_inconsistent():
    from kcoord.protocol.group import SyncGroupRequest

    s = Shell()
    leader, follower, gen = two_joined(s)
    r = s.call(SyncGroupRequest("g", gen, follower, protocol_name="roundrobin"))
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_member_leaving_during_completing_rebalance_fails_pending_syncs():
    s = Shell()
    leader, follower, gen = two_joined(s)
    tf = s.sync("g", follower, gen)
    s.leave("g", (leader, None))
    assert s.reply(tf).error_code == E.REBALANCE_IN_PROGRESS


# -- GroupHeartbeat ------------------------------------------------------------------------


def test_heartbeat_codes_across_states():
    s = Shell()
    leader, follower, gen = two_joined(s)
    assert s.heartbeat("g", follower, gen) == 0  # CompletingRebalance: fine
    assert s.heartbeat("g", follower, gen - 1) == E.ILLEGAL_GENERATION
    assert s.heartbeat("g", "ghost", gen) == E.UNKNOWN_MEMBER_ID
    assert s.heartbeat("nope", follower, gen) == E.UNKNOWN_MEMBER_ID
    s.sync("g", follower, gen)
    s.sync("g", leader, gen, {})
    assert s.heartbeat("g", follower, gen) == 0  # Stable
    s.join("g", leader)  # leader rejoin -> PreparingRebalance
    assert s.heartbeat("g", follower, gen) == E.REBALANCE_IN_PROGRESS


def test_heartbeats_keep_a_member_alive_past_its_session_timeout():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    for _ in range(10):
        s.advance(SESSION // 2)
        for m in members:
            assert s.heartbeat("g", m, gen) == 0
    assert s.group().state == GroupState.STABLE and len(s.group().members) == 2


# -- session expiry ------------------------------------------------------------------------


def test_session_expiry_removes_member_and_triggers_rebalance():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    a, b = members
    s.advance(SESSION - 1)
    assert s.heartbeat("g", a, gen) == 0
    s.advance(1)  # b's session ends now
    assert list(s.group().members) == [a]
    assert s.group().state == GroupState.PREPARING_REBALANCE
    assert s.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    assert s.heartbeat("g", b, gen) == E.UNKNOWN_MEMBER_ID
    r = s.reply(s.join("g", a))
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [a]
    assert s.coord.stats.members_expired == 1


def test_member_blocked_in_join_is_not_expired():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    a, b = members
    t = s.join("g", a, rebalance=60_000)  # a waits in JoinGroup far beyond its session
    for _ in range(5):
        s.advance(SESSION // 2)
        assert s.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS
    assert a in s.group().members and s.reply(t) is None
    s.join("g", b)
    assert s.reply(t).error_code == 0


def test_last_member_expiring_leaves_an_empty_group_with_bumped_generation():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    s.advance(SESSION)
    g = s.group()
    assert g.state == GroupState.EMPTY and g.generation_id == gen + 1 and not g.members
    assert g.protocol is None and g.leader is None


def test_pending_member_id_expires():
    s = Shell()
    member_id = s.new_member_id("g")
    s.advance(SESSION - 1)
    assert member_id in s.group("g").pending_members
    s.advance(1)
    assert s.group("g") is None  # nothing left: the empty group is dropped too
    assert s.call(_join_req("g", member_id)).error_code == E.UNKNOWN_MEMBER_ID


# -- LeaveGroup ----------------------------------------------------------------------------


def test_leave_triggers_rebalance_and_reports_per_member_errors():
    s = Shell()
    members, gen, _ = s.form_group("g", 3)
    a, b, c = members
    r = s.leave("g", (b, None), ("ghost", None))
    assert r.error_code == 0
    assert [(m.member_id, m.error_code) for m in r.members] == [(b, 0), ("ghost", E.UNKNOWN_MEMBER_ID)]
    assert s.group().state == GroupState.PREPARING_REBALANCE and b not in s.group().members
    ta, tc = s.join("g", a), s.join("g", c)
    assert s.reply(ta).generation_id == s.reply(tc).generation_id == gen + 1


def test_everyone_leaving_makes_the_group_empty():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    s.leave("g", *[(m, None) for m in members])
    assert s.group().state == GroupState.EMPTY and s.group().generation_id == gen + 1


def test_leave_of_unknown_group_and_pending_member():
    s = Shell()
    r = s.leave("nope", ("m", None))
    assert r.members[0].error_code == E.UNKNOWN_MEMBER_ID
    pending = s.new_member_id("g")
    assert s.leave("g", (pending, None)).members[0].error_code == 0
    assert pending not in s.group().pending_members


def test_leave_while_awaiting_join_answers_the_join():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    a, b = members
    ta = s.join("g", a)
    s.leave("g", (a, None))
    assert s.reply(ta).error_code == E.UNKNOWN_MEMBER_ID


# -- static membership (KIP-345) -----------------------------------------------------------


def test_static_member_joins_without_member_id_required():
    s = Shell()
    (r,) = s.settle(s.join("g", instance="i1"))
    assert r.error_code == 0 and r.generation_id == 1
    assert s.group().static_members == {"i1": r.member_id}


def test_static_restart_in_stable_keeps_generation_and_assignment_and_fences_old_id():
    s = Shell(auto_persist=False)
    members, gen, assigned = s.form_group("g", 2, instances=["i1", "i2"], partitions={"t": 4})
    old = s.group().static_members["i2"]
    t = s.join("g", "", instance="i2")  # restarted process: no member id
    assert s.reply(t) is None and len(s.pending) == 1  # acknowledged once persisted
    s.complete()
    r = s.reply(t)
    new = r.member_id
    assert r.error_code == 0 and new != old and r.generation_id == gen
    assert s.group().state == GroupState.STABLE and s.group().generation_id == gen
    assert s.coord.stats.rebalances == 1
    sync = s.reply(s.sync("g", new, gen, instance="i2"))
    assert Assignment.decode(sync.assignment) == assigned[old]
    # the old incarnation is fenced everywhere
    assert s.heartbeat("g", old, gen, instance="i2") == E.FENCED_INSTANCE_ID
    assert s.reply(s.sync("g", old, gen, instance="i2")).error_code == E.FENCED_INSTANCE_ID
    assert s.reply(s.join("g", old, instance="i2")).error_code == E.FENCED_INSTANCE_ID
    commit = s.reply(s.commit("g", {("t", 0): 1}, gen, old, group_instance_id="i2"))
    assert commit.topics["t"][0] == E.FENCED_INSTANCE_ID
    assert s.heartbeat("g", new, gen, instance="i2") == 0


def test_static_leader_restart_is_not_told_it_leads():
    s = Shell()
    s.form_group("g", 2, instances=["i1", "i2"])
    old_leader = s.group().leader
    instance = next(i for i, m in s.group().static_members.items() if m == old_leader)
    r = s.reply(s.join("g", "", instance=instance))
    assert r.leader == old_leader != r.member_id and r.members == []
    assert s.group().leader == r.member_id  # internally the new id leads


def test_static_restart_during_rebalance_joins_the_rebalance_and_fences_old_join():
    s = Shell()
    members, gen, _ = s.form_group("g", 3, instances=["i1", "i2", "i3"])
    m1, m2, m3 = (s.group().static_members[i] for i in ("i1", "i2", "i3"))
    t1 = s.join("g", m1, instance="i1", topics=["t", "u"])  # the leader: PreparingRebalance
    t_old = s.join("g", m2, instance="i2")
    t_new = s.join("g", "", instance="i2")  # i2 restarted while its old self waits
    assert s.reply(t_old).error_code == E.FENCED_INSTANCE_ID
    assert s.reply(t_new) is None
    t3 = s.join("g", m3, instance="i3")
    r1, r_new, r3 = s.reply(t1), s.reply(t_new), s.reply(t3)
    assert r_new.generation_id == r1.generation_id == r3.generation_id == gen + 1
    assert {m.member_id for m in r1.members} == {m1, r_new.member_id, m3}


def test_static_restart_during_completing_rebalance_starts_a_new_rebalance():
    s = Shell()
    (a,) = s.settle(s.join("g", instance="i1"))
    gen = a.generation_id
    assert s.group().state == GroupState.COMPLETING_REBALANCE
    t = s.join("g", "", instance="i1")
    r = s.reply(t)
    assert r.generation_id == gen + 1 and r.member_id != a.member_id


def test_static_member_not_rejoining_is_kept_but_session_expiry_removes_it():
    s = Shell()
    members, gen, _ = s.form_group("g", 2, instances=["i1", "i2"])
    m1, m2 = s.group().static_members["i1"], s.group().static_members["i2"]
    t1 = s.join("g", m1, instance="i1", rebalance=5_000, session=SESSION)
    s.advance(REBALANCE)  # m2 neither rejoins nor heartbeats
    # m2's session (10 s) ended before the rebalance timeout: it is gone
    r = s.reply(t1)
    assert r.generation_id == gen + 1 and [m.member_id for m in r.members] == [m1]
    assert "i2" not in s.group().static_members


def test_static_member_surviving_a_rebalance_it_missed():
    s = Shell()
    s.form_group("g", 2, instances=["i1", "i2"])
    gen = s.group().generation_id
    m1, m2 = s.group().static_members["i1"], s.group().static_members["i2"]
    t1 = s.join("g", m1, instance="i1")
    # m2 heartbeats (so it is alive) but does not rejoin within the rebalance timeout
    for _ in range(REBALANCE // 5_000):
        s.advance(5_000)
        s.heartbeat("g", m2, gen, instance="i2")
    r = s.reply(t1)
    assert r.error_code == 0 and {m.member_id for m in r.members} == {m1, m2}


def test_leave_by_instance_id_alone():
    s = Shell()
    s.form_group("g", 2, instances=["i1", "i2"])
    r = s.leave("g", ("", "i2"), ("", "i9"))
    assert [m.error_code for m in r.members] == [0, E.UNKNOWN_MEMBER_ID]
    assert "i2" not in s.group().static_members


def test_leave_with_fenced_member_id():
    s = Shell()
    s.form_group("g", 1, instances=["i1"])
    old = s.group().static_members["i1"]
    s.reply(s.join("g", "", instance="i1"))
    assert s.leave("g", (old, "i1")).members[0].error_code == E.FENCED_INSTANCE_ID


# -- Dead groups ---------------------------------------------------------------------------


def test_requests_for_a_group_being_deleted_get_coordinator_not_available():
    from kcoord.protocol.group import DeleteGroupsRequest

    s = Shell(auto_persist=False)
    s.commit("g", {("t", 0): 5})
    s.complete()
    s.send(DeleteGroupsRequest(["g"]))
    assert s.group().state == GroupState.DEAD
    assert s.call(_join_req("g")).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert s.reply(s.commit("g", {("t", 0): 6})).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert s.heartbeat("g", "m", 0) == E.COORDINATOR_NOT_AVAILABLE
    assert s.leave("g", ("m", None)).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert s.reply(s.sync("g", "m", 0)).error_code == E.COORDINATOR_NOT_AVAILABLE


# -- end to end ----------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "sticky"])
def test_four_members_split_twelve_partitions_without_overlap_or_gap(assignor):
    s = Shell(dataclasses.replace(FAST, group_initial_rebalance_delay_ms=3_000))
    members, gen, assigned = s.form_group("g", 4, partitions={"events": 12}, assignor=assignor, topics=["events"])
    assert gen == 1 and len(members) == 4
    owned = [tp for a in assigned.values() for tp in a.topic_partitions()]
    assert sorted(owned) == [("events", p) for p in range(12)]  # no gap, no overlap
    assert all(len(a.topic_partitions()) == 3 for a in assigned.values())
    assert s.group().state == GroupState.STABLE
    # what the coordinator stored is what the members got
    stored = {m: Assignment.decode(s.group().members[m].assignment) for m in members}
    assert stored == assigned


def test_member_leaves_and_its_partitions_move_under_sticky():
    s = Shell()
    members, gen, assigned = s.form_group("g", 3, partitions={"t": 9}, assignor="sticky")
    gone = members[1]
    s.leave("g", (gone, None))
    stay = [m for m in members if m != gone]
    tokens = {
        m: s.join("g", m, names=["sticky"], owned=assigned[m].partitions) for m in stay
    }
    responses = {m: s.reply(t) for m, t in tokens.items()}
    leader = next(r for r in responses.values() if r.leader == r.member_id)
    from kcoord.group import get_assignor

    subs = {m.member_id: Subscription.decode(m.metadata) for m in leader.members}
    plan = get_assignor("sticky").assign({"t": 9}, subs)
    for m in stay:
        assert set(assigned[m].topic_partitions()) <= set(plan[m].topic_partitions())
    moved = set(plan[stay[0]].topic_partitions()) | set(plan[stay[1]].topic_partitions())
    assert moved == {("t", p) for p in range(9)}


def test_unknown_request_type_is_a_programming_error():
    s = Shell()
    with pytest.raises(TypeError):
        s.coord.handle(OffsetCommitPartition(1), 1, s.now)


def test_commit_request_needs_no_group_for_find_coordinator():
    from kcoord.protocol.group import FindCoordinatorRequest

    s = Shell(num_partitions=1)
    assert s.call(FindCoordinatorRequest("g")).coordinator == 0


def test_join_to_other_coordinators_group_is_not_coordinator():
    from kcoord.group import coordinator_for

    s = Shell(partition=0, num_partitions=4)
    foreign = next(f"g{i}" for i in range(100) if coordinator_for(f"g{i}", 4) != 0)
    assert s.call(_join_req(foreign)).error_code == E.NOT_COORDINATOR
    r = s.call(OffsetCommitRequest(foreign, topics={"t": {0: OffsetCommitPartition(1)}}))
    assert r.error_code == E.NOT_COORDINATOR and r.topics == {"t": {0: E.NOT_COORDINATOR}}


def test_config_validation():
    with pytest.raises(ValueError):
        GroupConfig(group_min_session_timeout_ms=10, group_max_session_timeout_ms=5)
    with pytest.raises(ValueError):
        GroupConfig(group_max_size=0)


def test_leader_that_never_syncs_expires_and_waiting_followers_are_told_to_rejoin():
    s = Shell()
    leader, follower, gen = two_joined(s)
    tf = s.sync("g", follower, gen)  # blocked: alive while it waits
    s.advance(SESSION)  # the leader neither syncs nor heartbeats
    assert s.reply(tf).error_code == E.REBALANCE_IN_PROGRESS
    assert list(s.group().members) == [follower]
    assert s.group().state == GroupState.PREPARING_REBALANCE


def test_member_id_handed_out_holds_the_join_phase_until_it_rejoins():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    (a,) = members
    newcomer = s.new_member_id("g")  # got its id, has not rejoined yet
    assert s.group().state == GroupState.STABLE  # handing out an id changes nothing
    ta = s.join("g", a)  # leader rejoin starts a rebalance
    s.advance(1_000)
    assert s.reply(ta) is None  # waits for the pending member
    tn = s.join("g", newcomer)
    ra, rn = s.reply(ta), s.reply(tn)
    assert ra.generation_id == rn.generation_id == gen + 1 and len(ra.members) == 2


def test_pending_member_that_never_rejoins_stops_holding_the_join_phase_at_its_session_end():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    s.new_member_id("g", session=5_000)
    ta = s.join("g", members[0])
    s.advance(4_999)
    assert s.reply(ta) is None
    s.advance(1)
    assert s.reply(ta).generation_id == gen + 1


def test_illegal_transitions_are_refused():
    from kcoord.group.metadata import GroupMetadata, IllegalStateTransition

    g = GroupMetadata("g")
    with pytest.raises(IllegalStateTransition):
        g.transition(GroupState.STABLE, 0)
    with pytest.raises(IllegalStateTransition):
        g.transition(GroupState.COMPLETING_REBALANCE, 0)
    g.transition(GroupState.PREPARING_REBALANCE, 5)
    assert g.state_timestamp_ms == 5


def test_next_deadline_tracks_sessions_and_the_join_phase():
    s = Shell()
    assert s.coord.next_deadline(s.now) is None
    t = s.join("g", s.new_member_id("g"))
    assert s.coord.next_deadline(s.now) == s.now + FAST.group_initial_rebalance_delay_ms
    s.settle(t)
    assert s.coord.next_deadline(s.now) == s.now + SESSION
