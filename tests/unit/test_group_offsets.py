"""GroupCoordinatorState: OffsetCommit / OffsetFetch checks, durability before acknowledgement,
and retention. Explicit clock, no Ray."""

from __future__ import annotations

import dataclasses

import pytest

from kcoord.group import GroupState
from kcoord.group.records import GroupKey, OffsetKey, decode_record
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.group import OffsetCommitPartition, OffsetCommitRequest, OffsetFetchRequest

try:
    from .test_group_harness import FAST, SESSION, Shell
except ImportError:
    from test_group_harness import FAST, SESSION, Shell

HOUR = 3_600_000  # FAST keeps offsets for 60 minutes


def decoded_log(s: Shell):
    return [decode_record(k, v) for k, v in s.log]


# -- simple (standalone) commits ------------------------------------------------------------


def test_simple_commit_then_fetch():
    s = Shell()
    r = s.reply(s.commit("g", {("t", 0): 10, ("t", 1): 20, ("u", 0): 5}))
    assert r.error_code == 0 and r.topics == {"t": {0: 0, 1: 0}, "u": {0: 0}}
    assert s.fetch("g", {"t": [0, 1, 2]}) == {("t", 0): 10, ("t", 1): 20, ("t", 2): -1}
    assert s.fetch("g") == {("t", 0): 10, ("t", 1): 20, ("u", 0): 5}
    assert s.group().state == GroupState.EMPTY and s.group().generation_id == 0


def test_fetch_of_unknown_group_returns_no_offsets():
    s = Shell()
    assert s.fetch("nope", {"t": [0]}) == {("t", 0): -1}
    assert s.fetch("nope") == {}


def test_fetch_returns_metadata_and_leader_epoch():
    s = Shell()
    s.send(OffsetCommitRequest("g", topics={"t": {0: OffsetCommitPartition(7, "ckpt", leader_epoch=3)}}))
    r = s.call(OffsetFetchRequest("g", {"t": [0]}))
    p = r.offsets["t"][0]
    assert (p.offset, p.metadata, p.leader_epoch, p.error_code) == (7, "ckpt", 3, 0)


def test_simple_commit_refused_while_group_has_members():
    s = Shell()
    s.form_group("g", 2)
    r = s.reply(s.commit("g", {("t", 0): 1}))
    assert r.error_code == E.UNKNOWN_MEMBER_ID and r.topics == {"t": {0: E.UNKNOWN_MEMBER_ID}}
    assert "active members" in r.error_message


def test_simple_commit_allowed_again_once_group_is_empty():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    s.leave("g", (members[0], None))
    assert s.reply(s.commit("g", {("t", 0): 42})).error_code == 0
    assert s.fetch("g", {"t": [0]}) == {("t", 0): 42}


def test_metadata_too_large_is_per_partition():
    s = Shell(dataclasses.replace(FAST, offset_metadata_max_bytes=8))
    r = s.reply(
        s.send(
            OffsetCommitRequest(
                "g", topics={"t": {0: OffsetCommitPartition(1, "x" * 9), 1: OffsetCommitPartition(2, "x" * 8)}}
            )
        )
    )
    assert r.topics == {"t": {0: E.OFFSET_METADATA_TOO_LARGE, 1: 0}}
    assert s.fetch("g", {"t": [0, 1]}) == {("t", 0): -1, ("t", 1): 2}


def test_metadata_limit_counts_utf8_bytes():
    s = Shell(dataclasses.replace(FAST, offset_metadata_max_bytes=4))
    r = s.reply(s.send(OffsetCommitRequest("g", topics={"t": {0: OffsetCommitPartition(1, "éé€")}})))
    assert r.topics["t"][0] == E.OFFSET_METADATA_TOO_LARGE


def test_all_partitions_rejected_writes_nothing():
    s = Shell(dataclasses.replace(FAST, offset_metadata_max_bytes=0), auto_persist=False)
    r = s.reply(s.send(OffsetCommitRequest("g", topics={"t": {0: OffsetCommitPartition(1, "m")}})))
    assert r.topics["t"][0] == E.OFFSET_METADATA_TOO_LARGE and not s.pending


# -- member commits: generation checks -----------------------------------------------------


def test_member_commit_in_stable_generation():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    r = s.reply(s.commit("g", {("t", 0): 100}, gen, members[0]))
    assert r.error_code == 0 and r.topics == {"t": {0: 0}}
    assert s.fetch("g", {"t": [0]}) == {("t", 0): 100}


def test_member_commit_errors():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    assert s.reply(s.commit("g", {("t", 0): 1}, gen, "ghost")).topics["t"][0] == E.UNKNOWN_MEMBER_ID
    assert s.reply(s.commit("g", {("t", 0): 1}, gen + 1, members[0])).topics["t"][0] == E.ILLEGAL_GENERATION
    assert s.reply(s.commit("g", {("t", 0): 1}, gen - 1, members[0])).topics["t"][0] == E.ILLEGAL_GENERATION
    assert s.reply(s.commit("nope", {("t", 0): 1}, 3, "m")).topics["t"][0] == E.ILLEGAL_GENERATION
    assert s.fetch("g", {"t": [0]}) == {("t", 0): -1}


def test_commit_during_completing_rebalance_is_rebalance_in_progress():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    tokens = [s.join("g", m) for m in [s.group().leader] + [m for m in members if m != s.group().leader]]
    new_gen = s.reply(tokens[0]).generation_id
    assert s.group().state == GroupState.COMPLETING_REBALANCE
    r = s.reply(s.commit("g", {("t", 0): 1}, new_gen, members[0]))
    assert r.topics["t"][0] == E.REBALANCE_IN_PROGRESS


def test_commit_during_preparing_rebalance_is_allowed_for_current_generation():
    # Members commit what they processed before they rejoin (on partitions revoked).
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    s.join("g", s.group().leader)
    assert s.group().state == GroupState.PREPARING_REBALANCE
    follower = next(m for m in members if m != s.group().leader)
    assert s.reply(s.commit("g", {("t", 0): 9}, gen, follower)).error_code == 0


def test_commit_resets_the_session_timer():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    for _ in range(5):
        s.advance(SESSION - 1)
        assert s.reply(s.commit("g", {("t", 0): 1}, gen, members[0])).error_code == 0
    assert s.group().state == GroupState.STABLE


def test_commit_from_fenced_generation_cannot_move_offsets_backwards():
    """Invariant 6: a member of generation N that was removed cannot overwrite what
    generation N+1 committed."""
    s2 = Shell()
    members, gen, _ = s2.form_group("g", 2)
    a, b = members
    assert s2.reply(s2.commit("g", {("t", 0): 50}, gen, b)).error_code == 0
    s2.advance(SESSION - 1)
    assert s2.heartbeat("g", a, gen) == 0
    s2.advance(1)  # b's session ends -> rebalance; a rejoins
    (ra,) = s2.settle(s2.join("g", a))
    s2.reply(s2.sync("g", a, ra.generation_id, {a: b""}))
    assert s2.reply(s2.commit("g", {("t", 0): 80}, ra.generation_id, a)).error_code == 0
    zombie = s2.reply(s2.commit("g", {("t", 0): 60}, gen, b))
    assert zombie.topics["t"][0] == E.UNKNOWN_MEMBER_ID
    stale_gen = s2.reply(s2.commit("g", {("t", 0): 60}, gen, a))
    assert stale_gen.topics["t"][0] == E.ILLEGAL_GENERATION
    assert s2.fetch("g", {"t": [0]}) == {("t", 0): 80}


# -- durability: acknowledged only after the write ------------------------------------------


def test_commit_acknowledged_only_after_persist():
    s = Shell(auto_persist=False)
    t = s.commit("g", {("t", 0): 10})
    assert s.reply(t) is None and len(s.pending) == 1
    assert s.fetch("g", {"t": [0]}) == {("t", 0): -1}  # not committed yet
    persist = s.complete()
    assert s.reply(t).error_code == 0
    assert s.fetch("g", {"t": [0]}) == {("t", 0): 10}
    (key, value), = persist.records
    k, v = decode_record(key, value)
    assert k == OffsetKey("g", "t", 0) and v.offset == 10 and v.commit_timestamp_ms == s.now


@pytest.mark.parametrize(
    "append_error, expected",
    [
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE),
        (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR),
        (E.MESSAGE_TOO_LARGE, E.INVALID_COMMIT_OFFSET_SIZE),
        (E.UNKNOWN_SERVER_ERROR, E.UNKNOWN_SERVER_ERROR),
    ],
)
def test_failed_commit_write_maps_the_error_and_commits_nothing(append_error, expected):
    s = Shell(auto_persist=False)
    s.reply(s.commit("g", {("t", 0): 10}))
    s.complete()
    t = s.commit("g", {("t", 0): 20, ("t", 1): 5})
    s.complete(error=append_error)
    r = s.reply(t)
    assert r.topics == {"t": {0: expected, 1: expected}}
    assert s.fetch("g", {"t": [0, 1]}) == {("t", 0): 10, ("t", 1): -1}
    assert s.coord.stats.persist_failures == 1


def test_outcomes_are_applied_in_emission_order():
    s = Shell(auto_persist=False)
    t1 = s.commit("g", {("t", 0): 1})
    t2 = s.commit("g", {("t", 0): 2})
    s.complete(index=1)  # the second append's ack arrives first
    assert s.reply(t2) is None and s.fetch("g", {"t": [0]}) == {("t", 0): -1}
    s.complete()
    assert s.reply(t1).error_code == 0 and s.reply(t2).error_code == 0
    assert s.fetch("g", {"t": [0]}) == {("t", 0): 2}  # log order, not ack order


def test_unknown_persist_id_is_ignored():
    s = Shell()
    assert s.coord.on_persisted(12345, 0, s.now) == []


# -- retention -----------------------------------------------------------------------------


def test_standalone_offsets_expire_retention_after_their_commit():
    s = Shell()
    s.reply(s.commit("g", {("t", 0): 1}))
    s.advance(HOUR // 2)
    s.reply(s.commit("g", {("t", 1): 2}))
    s.advance(HOUR // 2 - 1)
    assert s.fetch("g") == {("t", 0): 1, ("t", 1): 2}
    s.advance(1)
    assert s.fetch("g") == {("t", 1): 2}
    s.advance(HOUR // 2)
    assert s.fetch("g") == {} and s.group("g") is None
    tombstones = [k for k, v in decoded_log(s)[2:] if v is None]
    assert tombstones == [OffsetKey("g", "t", 0), OffsetKey("g", "t", 1)]
    assert s.coord.stats.offsets_expired == 2


def test_consumer_group_offsets_live_while_members_exist_and_expire_after_it_empties():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    s.reply(s.commit("g", {("t", 0): 7}, gen, members[0]))
    for _ in range(3 * HOUR // 2 // 5_000):  # past the retention period, but active
        s.advance(5_000)
        assert s.heartbeat("g", members[0], gen) == 0
    assert s.fetch("g") == {("t", 0): 7}
    s.leave("g", (members[0], None))
    became_empty = s.now
    assert s.group().state == GroupState.EMPTY
    s.advance(HOUR - 1)
    assert s.fetch("g") == {("t", 0): 7}
    s.advance(1)
    assert s.fetch("g") == {} and s.group("g") is None
    assert s.now - became_empty == HOUR
    last = decoded_log(s)[-2:]
    assert last == [(OffsetKey("g", "t", 0), None), (GroupKey("g"), None)]


def test_members_joining_before_expiry_keep_standalone_offsets():
    s = Shell()
    s.reply(s.commit("g", {("t", 0): 7}))
    s.advance(HOUR - 10_000)
    members, gen, _ = s.form_group("g", 1)
    for _ in range(HOUR // 5_000):
        s.advance(5_000)
        assert s.heartbeat("g", members[0], gen) == 0
    assert s.fetch("g", {"t": [0]}) == {("t", 0): 7}


def test_offsets_of_active_group_survive_retention():
    s = Shell()
    s.reply(s.commit("g", {("t", 0): 7}))
    members, gen, _ = s.form_group("g", 1)
    for _ in range(2 * HOUR // 5_000):
        s.advance(5_000)
        assert s.heartbeat("g", members[0], gen) == 0
    assert s.fetch("g") == {("t", 0): 7}


def test_explicit_retention_time_overrides_the_default():
    s = Shell()
    s.reply(s.commit("g", {("t", 0): 1}, retention_time_ms=5_000))
    s.advance(4_999)
    assert s.fetch("g") == {("t", 0): 1}
    s.advance(1)
    assert s.fetch("g") == {}


def test_partition_with_a_commit_in_flight_is_not_expired():
    s = Shell(auto_persist=False)
    s.commit("g", {("t", 0): 1})
    s.complete()
    s.advance(HOUR - 1)
    t = s.commit("g", {("t", 0): 2})  # in flight while the old value's retention ends
    s.advance(1)
    assert not any(p.reason.startswith("retention") for p in s.pending)
    s.complete()
    assert s.reply(t).error_code == 0 and s.fetch("g") == {("t", 0): 2}


def test_empty_group_without_offsets_is_dropped_after_the_check_interval():
    s = Shell()
    members, gen, _ = s.form_group("g", 1)
    s.leave("g", (members[0], None))
    s.advance(FAST.offsets_retention_check_interval_ms - 1)
    assert s.group("g") is not None
    s.advance(1)
    assert s.group("g") is None
    assert decoded_log(s)[-1] == (GroupKey("g"), None)


def test_next_deadline_reports_the_retention_timer():
    s = Shell()
    assert s.coord.next_deadline(s.now) is None
    s.reply(s.commit("g", {("t", 0): 1}))
    assert s.coord.next_deadline(s.now) == s.now + HOUR
