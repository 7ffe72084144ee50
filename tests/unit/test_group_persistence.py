"""GroupCoordinatorState and __consumer_offsets: group metadata is written before SyncGroup
is answered, failed writes surface as errors, and load() rebuilds the same offsets and
generation after a restart."""

from __future__ import annotations

import random

import pytest

from kcoord.group import GroupCoordinatorState, GroupState, Reply
from kcoord.group.records import GroupKey, OffsetKey, OffsetValue, decode_record, encode_key, offset_record
from kcoord.protocol.errors import DecodeError
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.group import Assignment, JoinGroupResponse, OffsetCommitResponse, SyncGroupResponse

try:
    from .test_group_harness import FAST, REBALANCE, SESSION, T0, Shell
except ImportError:
    from test_group_harness import FAST, REBALANCE, SESSION, T0, Shell


def restart(s: Shell, advance_ms: int = 0) -> Shell:
    """A new coordinator instance replaying the old one's log (what the actor does after
    Ray restarts it)."""
    fresh = Shell(s.config, auto_persist=s.auto_persist, now=s.now + advance_ms)
    fresh.log = list(s.log)
    fresh.coord.load(fresh.log, fresh.now)
    return fresh


def two_joined(s: Shell) -> tuple[str, str, int]:
    a, b = s.new_member_id("g"), s.new_member_id("g")
    ra, rb = s.settle(s.join("g", a), s.join("g", b))
    return ra.leader, (b if ra.leader == a else a), ra.generation_id


# -- SyncGroup is durable before it is answered ---------------------------------------------


def test_sync_group_writes_group_metadata_before_answering():
    s = Shell(auto_persist=False)
    leader, follower, gen = two_joined(s)
    tf = s.sync("g", follower, gen)
    tl = s.sync("g", leader, gen, {leader: b"L", follower: b"F"})
    assert s.reply(tl) is None and s.reply(tf) is None
    (persist,) = s.pending
    (key, value), = persist.records
    k, v = decode_record(key, value)
    assert k == GroupKey("g") and v.generation_id == gen and v.leader == leader
    assert {m.member_id: m.assignment for m in v.members} == {leader: b"L", follower: b"F"}
    s.complete()
    assert s.reply(tl).assignment == b"L" and s.reply(tf).assignment == b"F"


@pytest.mark.parametrize(
    "append_error, expected",
    [
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    ],
)
def test_failed_sync_write_fails_every_waiting_member_and_rebalances(append_error, expected):
    s = Shell(auto_persist=False)
    leader, follower, gen = two_joined(s)
    tf = s.sync("g", follower, gen)
    tl = s.sync("g", leader, gen, {leader: b"L", follower: b"F"})
    s.complete(error=append_error)
    assert s.reply(tl).error_code == expected and s.reply(tf).error_code == expected
    g = s.group()
    assert g.state == GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in g.members.values())
    # both rejoin and the next generation works
    ra, rb = s.settle(s.join("g", leader), s.join("g", follower))
    assert ra.generation_id == gen + 1


def test_sync_write_completing_after_the_generation_moved_on_is_ignored():
    s = Shell(auto_persist=False)
    leader, follower, gen = two_joined(s)
    tf = s.sync("g", follower, gen)
    tl = s.sync("g", leader, gen, {leader: b"L", follower: b"F"})
    s.leave("g", (follower, None))  # rebalance while the write is in flight
    assert s.reply(tf).error_code == E.UNKNOWN_MEMBER_ID
    assert s.reply(tl).error_code == E.REBALANCE_IN_PROGRESS
    s.complete()
    assert s.group().state == GroupState.PREPARING_REBALANCE


def test_repeated_leader_sync_writes_once():
    s = Shell(auto_persist=False)
    leader, follower, gen = two_joined(s)
    t1 = s.sync("g", leader, gen, {leader: b"L"})
    t2 = s.sync("g", leader, gen, {leader: b"L"})
    assert s.reply(t1).error_code == E.REBALANCE_IN_PROGRESS  # superseded
    assert len(s.pending) == 1
    s.complete()
    assert s.reply(t2).assignment == b"L"


def test_failed_static_rejoin_write_is_an_error_for_the_joiner():
    s = Shell()
    s.form_group("g", 1, instances=["i1"])
    s.auto_persist = False
    t = s.join("g", "", instance="i1")
    s.complete(error=E.NOT_ENOUGH_REPLICAS)
    r = s.reply(t)
    assert isinstance(r, JoinGroupResponse) and r.error_code == E.COORDINATOR_NOT_AVAILABLE


def test_empty_group_record_is_written_when_the_last_member_leaves():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    s.leave("g", (members[0], None))
    k, v = decode_record(*s.log[-1])
    assert k == GroupKey("g") and v.generation_id == gen + 1 and v.members == [] and v.protocol is None


# -- load() -----------------------------------------------------------------------------------


def test_restart_serves_the_same_offsets_and_generation():
    s = Shell()
    members, gen, assigned = s.form_group("g", 2, partitions={"t": 4})
    a, b = members
    s.reply(s.commit("g", {("t", 0): 10, ("t", 1): 11}, gen, a))
    s.reply(s.commit("g", {("t", 0): 12}, gen, a))
    s.reply(s.commit("solo", {("u", 3): 99}))
    r = restart(s, advance_ms=1_000)
    assert r.fetch("g") == {("t", 0): 12, ("t", 1): 11}
    assert r.fetch("solo") == {("u", 3): 99}
    g = r.group("g")
    assert g.state == GroupState.STABLE and g.generation_id == gen and set(g.members) == {a, b}
    assert g.leader == s.group("g").leader and g.protocol == "range"
    # live members carry on in their generation as if nothing happened
    assert r.heartbeat("g", a, gen) == 0
    assert r.reply(r.commit("g", {("t", 0): 13}, gen, b)).error_code == 0
    assert Assignment.decode(r.reply(r.sync("g", b, gen)).assignment) == assigned[b]


def test_restored_members_that_are_dead_expire():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    r = restart(s)
    a, b = members
    r.advance(SESSION - 1)
    assert r.heartbeat("g", a, gen) == 0
    r.advance(1)
    assert list(r.group().members) == [a] and r.group().state == GroupState.PREPARING_REBALANCE
    (ra,) = r.settle(r.join("g", a))
    assert ra.generation_id == gen + 1


def test_restart_keeps_an_empty_group_generation_and_deleted_groups_stay_deleted():
    from kcoord.protocol.group import DeleteGroupsRequest

    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    s.reply(s.commit("g", {("t", 0): 5}, gen, members[0]))
    s.leave("g", (members[0], None))
    s.reply(s.commit("gone", {("t", 0): 1}))
    assert s.call(DeleteGroupsRequest(["gone"])).results == {"gone": 0}
    r = restart(s)
    assert r.group("g").state == GroupState.EMPTY and r.group("g").generation_id == gen + 1
    assert r.fetch("g") == {("t", 0): 5}
    assert r.group("gone") is None and r.fetch("gone") == {}
    # the next generation continues the numbering
    members, gen2, _ = r.form_group("g", 1)
    assert gen2 == gen + 2


def test_restart_after_static_replacement_knows_the_new_member_id():
    s = Shell()
    s.form_group("g", 1, instances=["i1"])
    new = s.reply(s.join("g", "", instance="i1")).member_id
    r = restart(s)
    assert r.group().static_members == {"i1": new}


def test_restored_retention_counts_from_when_the_group_became_empty():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    s.reply(s.commit("g", {("t", 0): 5}, gen, members[0]))
    s.leave("g", (members[0], None))
    empty_at = s.now
    r = restart(s, advance_ms=1_000)
    assert r.coord.next_deadline(r.now) == empty_at + FAST.offsets_retention_ms


def test_load_skips_unknown_key_versions_and_rejects_garbage():
    import msgpack

    coord = GroupCoordinatorState(FAST)
    future = (msgpack.packb([9, "g", "whatever"]), b"\x01")
    good = offset_record(OffsetKey("g", "t", 0), OffsetValue(4, "", -1, T0))
    coord.load([future, good], T0)
    assert coord.committed_offsets("g")[("t", 0)].offset == 4
    with pytest.raises(DecodeError):
        GroupCoordinatorState(FAST).load([(b"\xc1garbage", None)], T0)
    with pytest.raises(DecodeError):
        GroupCoordinatorState(FAST).load([(encode_key(OffsetKey("g", "t", 0)), b"\x93\x01\x02\x03")], T0)


def test_load_refuses_to_run_on_a_serving_coordinator():
    s = Shell()
    s.form_group("g", 1)
    with pytest.raises(RuntimeError):
        s.coord.load([], s.now)


def test_random_histories_replay_to_the_same_state():
    """After any mix of joins, syncs, commits, leaves, expiries and failed writes, a
    coordinator rebuilt from the log serves the same offsets, generations and members."""
    for seed in range(40):
        rng = random.Random(seed)
        s = Shell(auto_persist=False)
        live: dict[str, int] = {}  # member -> generation it knows
        waiting: dict[int, str] = {}
        for _ in range(120):
            op = rng.random()
            if op < 0.15:
                m = s.new_member_id("g")
                waiting[s.join("g", m)] = m
            elif op < 0.25 and live:
                m = rng.choice(sorted(live))
                waiting[s.join("g", m)] = m
            elif op < 0.45:
                members = sorted(s.group("g").members) if s.group("g") else []
                if members and rng.random() < 0.7:
                    m = rng.choice(members)
                    s.commit("g", {("t", rng.randrange(3)): rng.randrange(1000)}, live.get(m, 0), m)
                else:
                    s.commit(rng.choice(["g", "h"]), {("t", rng.randrange(3)): rng.randrange(1000)})
            elif op < 0.55 and live:
                m = rng.choice(sorted(live))
                s.leave("g", (m, None))
                live.pop(m)
            elif op < 0.75 and s.pending:
                s.complete(error=0 if rng.random() < 0.8 else E.NOT_ENOUGH_REPLICAS, index=0)
            else:
                s.advance(rng.choice([1, 50, 500, 3_000, 11_000]))
            # members answered by a join go on to sync (the leader with an assignment)
            for token, m in list(waiting.items()):
                resp = s.replies.pop(token, None)
                if resp is None:
                    continue
                del waiting[token]
                if resp.error_code == 0:
                    live[m] = resp.generation_id
                    plan = {x.member_id: x.member_id.encode() for x in resp.members} if resp.members else None
                    s.sync("g", m, resp.generation_id, plan)
            for token in [t for t, r in s.replies.items() if isinstance(r, (SyncGroupResponse, OffsetCommitResponse))]:
                s.replies.pop(token)
        s.complete_all()
        s.replies.clear()
        r = restart(s)
        for gid in ("g", "h"):
            before, after = s.group(gid), r.group(gid)
            assert s.coord.committed_offsets(gid) == r.coord.committed_offsets(gid), seed
            if before is None or before.state == GroupState.DEAD:
                continue
            assert after is not None, seed
            if before.state == GroupState.STABLE:
                assert after.state == GroupState.STABLE and after.generation_id == before.generation_id, seed
                assert {m: x.assignment for m, x in before.members.items()} == {
                    m: x.assignment for m, x in after.members.items()
                }, seed
            elif before.state == GroupState.EMPTY and before.has_persisted_metadata:
                assert after.state == GroupState.EMPTY and after.generation_id == before.generation_id, seed
        # Then everyone goes silent: the group empties at a new generation, which must
        # survive a restart too.
        for _ in range(3):
            s.complete_all()
            s.advance(REBALANCE + SESSION)
        s.complete_all()
        if s.group("g") is not None:
            assert s.group("g").state == GroupState.EMPTY, seed
            r = restart(s)
            assert r.group("g").generation_id == s.group("g").generation_id, seed
            assert r.coord.committed_offsets("g") == s.coord.committed_offsets("g"), seed


# -- close() --------------------------------------------------------------------------------


def test_close_answers_every_waiting_request():
    s = Shell(auto_persist=False)
    members, gen, _ = s.form_group("g", 2)
    a, b = members
    join = s.join("g", a)  # long-polling
    commit = s.commit("solo", {("t", 0): 1})  # waiting on its write
    actions = s.coord.close(s.now)
    answered = {x.token: x.response for x in actions if isinstance(x, Reply)}
    assert answered[join].error_code == E.NOT_COORDINATOR
    assert answered[commit].topics == {"t": {0: E.NOT_COORDINATOR}}
    assert s.coord.next_deadline(s.now) is None
    after = s.coord.handle(s_join_request(), 99, s.now)
    assert after[0].response.error_code == E.NOT_COORDINATOR


def s_join_request():
    from kcoord.protocol.group import JoinGroupRequest

    return JoinGroupRequest("g", SESSION, REBALANCE)
