"""GroupCoordinatorState: transactional offset commits (KIP-447), their markers, require_stable,
and replay of pending offsets. Explicit clock, no Ray (docs/transactions.md, section 3)."""

from __future__ import annotations

import dataclasses
import random

import msgpack
import pytest

from kcoord.group import GroupCoordinatorState, GroupState
from kcoord.group.records import (
    OffsetKey,
    OffsetValue,
    TxnOffsetKey,
    TxnProducerKey,
    TxnProducerValue,
    decode_record,
    decode_txn_producer_value,
    encode_key,
)
from kcoord.protocol.errors import DecodeError
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.group import DeleteGroupsRequest, OffsetCommitPartition, OffsetFetchRequest
from kcoord.protocol.txn import TxnOffsetCommitRequest, TxnOffsetMarkerRequest

try:
    from .test_group_harness import FAST, T0, Shell
except ImportError:
    from test_group_harness import FAST, T0, Shell

PID = 7000


def txn_commit(s: Shell, group: str, offsets: dict, pid: int = PID, epoch: int = 0, generation: int = -1, member_id: str = "", instance=None, **kw) -> int:
    topics: dict = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, {})[p] = OffsetCommitPartition(o, kw.pop("metadata", ""))
    return s.send(TxnOffsetCommitRequest("tx", group, pid, epoch, generation, member_id, instance, topics, **kw))


def marker(s: Shell, commit: bool, pid: int = PID, epoch: int = 1, coordinator_epoch: int = 0, partition: int = 0) -> int:
    return s.send(TxnOffsetMarkerRequest(pid, epoch, coordinator_epoch, commit, partition, "tx"))


def fetch(s: Shell, group: str, topics, require_stable: bool = False) -> dict:
    r = s.call(OffsetFetchRequest(group, topics, require_stable=require_stable))
    assert r.error_code == 0
    return {(t, p): (v.offset if v.error_code == 0 else E(v.error_code).name) for t, parts in r.offsets.items() for p, v in parts.items()}


def replayed(s: Shell) -> GroupCoordinatorState:
    fresh = GroupCoordinatorState(s.config, s.coord.partition, s.coord.num_partitions)
    fresh.load(s.log, s.now)
    return fresh


def txn_state(core: GroupCoordinatorState, group_id: str) -> dict:
    group = core.group(group_id)
    return {} if group is None else {pid: dict(offsets) for pid, offsets in group.txn_offsets.items()}


def assert_replay_matches(s: Shell, *groups: str) -> None:
    """Memory equals what a replay of the log rebuilds (the durability rule)."""
    fresh = replayed(s)
    for g in groups:
        assert fresh.committed_offsets(g) == s.coord.committed_offsets(g), g
        assert txn_state(fresh, g) == txn_state(s.coord, g), g
    assert fresh.txn_producers() == s.coord.txn_producers()


# -- TxnOffsetCommit then the marker ---------------------------------------------------------


def test_pending_offsets_become_committed_only_with_a_commit_marker():
    s = Shell()
    assert s.reply(s.commit("g", {("t", 0): 3})).error_code == 0
    r = s.reply(txn_commit(s, "g", {("t", 0): 10, ("t", 1): 20}))
    assert r.error_code == 0 and r.topics == {"t": {0: 0, 1: 0}}
    assert fetch(s, "g", {"t": [0, 1]}) == {("t", 0): 3, ("t", 1): -1}  # not yet visible
    assert s.coord.pending_txn_offsets("g")[PID].keys() == {("t", 0), ("t", 1)}
    assert_replay_matches(s, "g")
    assert s.reply(marker(s, commit=True)).error_code == 0
    assert fetch(s, "g", {"t": [0, 1]}) == {("t", 0): 10, ("t", 1): 20}
    assert s.coord.pending_txn_offsets("g") == {}
    assert_replay_matches(s, "g")


def test_the_marker_is_one_batch_of_committed_offsets_and_tombstones():
    s = Shell(auto_persist=False)
    txn_commit(s, "g", {("t", 0): 10})
    s.complete()
    token = marker(s, commit=True, epoch=1, coordinator_epoch=4)
    assert s.reply(token) is None  # answered only once the append is acknowledged
    assert len(s.pending) == 1
    records = [decode_record(k, v) for k, v in s.pending[0].records]
    assert records[0][0] == OffsetKey("g", "t", 0) and records[0][1].offset == 10
    assert records[1] == (TxnOffsetKey("g", "t", 0, PID), None)
    assert records[2][0] == TxnProducerKey(PID) and (records[2][1].producer_epoch, records[2][1].coordinator_epoch) == (1, 4)
    s.complete()
    assert s.reply(token).error_code == 0


def test_an_abort_marker_drops_pending_offsets():
    s = Shell()
    s.reply(s.commit("g", {("t", 0): 3}))
    s.reply(txn_commit(s, "g", {("t", 0): 10}))
    assert s.reply(marker(s, commit=False)).error_code == 0
    assert fetch(s, "g", {"t": [0]}, require_stable=True) == {("t", 0): 3}
    assert_replay_matches(s, "g")


def test_a_retried_marker_with_nothing_pending_answers_none_and_changes_nothing():
    s = Shell()
    s.reply(txn_commit(s, "g", {("t", 0): 10}))
    assert s.reply(marker(s, commit=True)).error_code == 0
    log_len = len(s.log)
    assert s.reply(marker(s, commit=True)).error_code == 0
    assert len(s.log) == log_len  # nothing written
    assert fetch(s, "g", {"t": [0]}) == {("t", 0): 10}


def test_a_marker_for_a_producer_never_seen_answers_none():
    s = Shell()
    assert s.reply(marker(s, commit=False, pid=99)).error_code == 0


def test_markers_resolve_only_their_own_producer():
    s = Shell()
    s.reply(txn_commit(s, "g", {("t", 0): 10}, pid=1))
    s.reply(txn_commit(s, "g", {("t", 1): 20}, pid=2))
    s.reply(marker(s, commit=False, pid=1))
    assert fetch(s, "g", {"t": [0, 1]}, require_stable=True) == {("t", 0): -1, ("t", 1): "UNSTABLE_OFFSET_COMMIT"}
    s.reply(marker(s, commit=True, pid=2))
    assert fetch(s, "g", {"t": [0, 1]}, require_stable=True) == {("t", 0): -1, ("t", 1): 20}


def test_one_marker_resolves_every_group_of_the_producer():
    s = Shell()
    s.reply(txn_commit(s, "a", {("t", 0): 1}))
    s.reply(txn_commit(s, "b", {("t", 0): 2}))
    s.reply(marker(s, commit=True))
    assert fetch(s, "a", {"t": [0]}) == {("t", 0): 1} and fetch(s, "b", {"t": [0]}) == {("t", 0): 2}
    assert_replay_matches(s, "a", "b")


def test_a_committed_marker_supersedes_other_producers_pending_offsets_in_memory_as_in_replay():
    s = Shell()
    s.reply(txn_commit(s, "g", {("t", 0): 10}, pid=1))
    s.reply(txn_commit(s, "g", {("t", 0): 20}, pid=2))
    s.reply(marker(s, commit=True, pid=2))
    assert_replay_matches(s, "g")
    s.reply(marker(s, commit=True, pid=1))  # its pending offset is older than the committed 20
    assert fetch(s, "g", {"t": [0]}) == {("t", 0): 20}
    assert_replay_matches(s, "g")


def test_a_plain_commit_after_the_transactional_one_wins_as_in_kafka():
    s = Shell()
    s.reply(txn_commit(s, "g", {("t", 0): 10}))
    s.reply(s.commit("g", {("t", 0): 50}))
    assert_replay_matches(s, "g")
    s.reply(marker(s, commit=True))
    assert fetch(s, "g", {"t": [0]}) == {("t", 0): 50}
    assert_replay_matches(s, "g")


# -- require_stable ----------------------------------------------------------------------------


def test_require_stable_answers_unstable_while_pending_and_the_last_commit_without_it():
    s = Shell(auto_persist=False)
    s.commit("g", {("t", 0): 3})
    s.complete()
    txn_commit(s, "g", {("t", 0): 10})
    # in flight already counts as pending (Kafka reads uncommitted state for require_stable)
    assert fetch(s, "g", {"t": [0, 1]}, require_stable=True) == {("t", 0): "UNSTABLE_OFFSET_COMMIT", ("t", 1): -1}
    s.complete()
    assert fetch(s, "g", {"t": [0]}, require_stable=True) == {("t", 0): "UNSTABLE_OFFSET_COMMIT"}
    assert fetch(s, "g", None, require_stable=True) == {("t", 0): "UNSTABLE_OFFSET_COMMIT"}
    assert fetch(s, "g", {"t": [0]}) == {("t", 0): 3}
    marker(s, commit=True)
    s.complete()
    assert fetch(s, "g", {"t": [0]}, require_stable=True) == {("t", 0): 10}


def test_unstable_offset_commit_is_retriable():
    from kcoord.protocol.errors import RETRIABLE

    assert E.UNSTABLE_OFFSET_COMMIT in RETRIABLE


# -- the checks (Kafka's validateTransactionalOffsetCommit) ------------------------------------


def test_unknown_group_with_a_generation_is_illegal_generation():
    s = Shell()
    r = s.reply(txn_commit(s, "nope", {("t", 0): 1}, generation=3, member_id="m"))
    assert r.topics == {"t": {0: E.ILLEGAL_GENERATION}}
    assert s.coord.group("nope") is None


def test_unknown_group_without_a_generation_is_created_simple():
    s = Shell()
    assert s.reply(txn_commit(s, "new", {("t", 0): 1})).topics == {"t": {0: 0}}
    assert s.coord.group("new").state == GroupState.EMPTY


def test_member_checks_of_a_stable_group():
    s = Shell()
    members, gen, _ = s.form_group("g", 2)
    assert s.reply(txn_commit(s, "g", {("t", 0): 1}, generation=gen + 1, member_id=members[0])).topics == {"t": {0: E.ILLEGAL_GENERATION}}
    assert s.reply(txn_commit(s, "g", {("t", 0): 1}, generation=gen, member_id="stranger")).topics == {"t": {0: E.UNKNOWN_MEMBER_ID}}
    assert s.reply(txn_commit(s, "g", {("t", 0): 1}, generation=gen, member_id=members[0])).topics == {"t": {0: 0}}
    # no member id and no generation: accepted although the group has members (unlike OffsetCommit)
    assert s.reply(txn_commit(s, "g", {("t", 1): 1}, pid=PID + 1)).topics == {"t": {1: 0}}


def test_fenced_static_member():
    s = Shell()
    members, gen, _ = s.form_group("g", 1, instances=["i-1"])
    assert s.reply(txn_commit(s, "g", {("t", 0): 1}, generation=gen, member_id="other", instance="i-1")).topics == {"t": {0: E.FENCED_INSTANCE_ID}}
    assert s.reply(txn_commit(s, "g", {("t", 0): 1}, generation=gen, member_id=members[0], instance="i-1")).topics == {"t": {0: 0}}


def test_metadata_too_large_is_per_partition():
    s = Shell(dataclasses.replace(FAST, offset_metadata_max_bytes=4))
    topics = {"t": {0: OffsetCommitPartition(1, "xxxxx"), 1: OffsetCommitPartition(2, "ok")}}
    r = s.reply(s.send(TxnOffsetCommitRequest("tx", "g", PID, 0, topics=topics)))
    assert r.topics == {"t": {0: E.OFFSET_METADATA_TOO_LARGE, 1: 0}}


def test_a_commit_without_a_producer_is_invalid_request():
    s = Shell()
    assert s.reply(txn_commit(s, "g", {("t", 0): 1}, pid=-1)).topics == {"t": {0: E.INVALID_REQUEST}}


def test_group_of_another_coordinator_is_not_coordinator():
    s = Shell(partition=0, num_partitions=8)
    other = next(g for g in (f"g{i}" for i in range(100)) if not s.coord.owns(g))
    r = s.reply(txn_commit(s, other, {("t", 0): 1}))
    assert r.error_code == E.NOT_COORDINATOR and r.topics == {"t": {0: E.NOT_COORDINATOR}}
    assert s.reply(marker(s, commit=True, partition=3)).error_code == E.NOT_COORDINATOR


# -- fencing -----------------------------------------------------------------------------------


def test_an_older_producer_epoch_is_fenced():
    s = Shell()
    s.reply(txn_commit(s, "g", {("t", 0): 1}, epoch=5))
    assert s.reply(txn_commit(s, "g", {("t", 0): 2}, epoch=4)).topics == {"t": {0: E.PRODUCER_FENCED}}
    old_client = TxnOffsetCommitRequest("tx", "g", PID, 4, topics={"t": {0: OffsetCommitPartition(2)}}, wire_version=2)
    assert s.reply(s.send(old_client)).topics == {"t": {0: E.INVALID_PRODUCER_EPOCH}}
    assert s.reply(marker(s, commit=False, epoch=4)).error_code == E.INVALID_PRODUCER_EPOCH
    assert s.coord.pending_txn_offsets("g")[PID][("t", 0)].offset == 1  # untouched
    assert s.reply(marker(s, commit=True, epoch=6)).error_code == 0
    # after the marker's bump (KIP-890 part 2) the previous transaction's epoch is fenced
    assert s.reply(txn_commit(s, "g", {("t", 0): 3}, epoch=5)).topics == {"t": {0: E.PRODUCER_FENCED}}


def test_a_marker_of_an_older_coordinator_epoch_is_fenced_also_after_a_failover():
    s = Shell()
    s.reply(txn_commit(s, "g", {("t", 0): 1}))
    assert s.reply(marker(s, commit=True, coordinator_epoch=3)).error_code == 0
    s.reply(txn_commit(s, "g", {("t", 0): 2}, epoch=1))
    assert s.reply(marker(s, commit=False, coordinator_epoch=2)).error_code == E.TRANSACTION_COORDINATOR_FENCED
    fresh = replayed(s)
    assert fresh.txn_producers() == {PID: (1, 3)}
    token = object()
    actions = fresh.handle(TxnOffsetMarkerRequest(PID, 2, 2, False, 0), token, s.now)
    assert actions[0].response.error_code == E.TRANSACTION_COORDINATOR_FENCED
    assert fresh.pending_txn_offsets("g")[PID][("t", 0)].offset == 2


# -- ordering with appends in flight ---------------------------------------------------------


def test_a_marker_waits_for_a_commit_in_flight_then_resolves_it():
    s = Shell(auto_persist=False)
    c = txn_commit(s, "g", {("t", 0): 10})
    m = marker(s, commit=True)
    assert len(s.pending) == 1 and s.reply(m) is None  # queued behind the commit
    s.complete()
    assert s.reply(c).topics == {"t": {0: 0}}
    assert len(s.pending) == 1
    s.complete()
    assert s.reply(m).error_code == 0
    assert fetch(s, "g", {"t": [0]}, require_stable=True) == {("t", 0): 10}


def test_a_failed_commit_that_may_have_landed_is_tombstoned_by_the_marker_never_committed():
    s = Shell(auto_persist=False)
    c = txn_commit(s, "g", {("t", 0): 10})
    p = s.complete(error=E.REQUEST_TIMED_OUT)
    s.log.extend(p.records)  # it landed all the same
    assert s.reply(c).topics == {"t": {0: E.COORDINATOR_NOT_AVAILABLE}}
    assert fetch(s, "g", {"t": [0]}, require_stable=True) == {("t", 0): "UNSTABLE_OFFSET_COMMIT"}
    marker(s, commit=True)
    s.complete()
    assert fetch(s, "g", {"t": [0]}, require_stable=True) == {("t", 0): -1}
    assert_replay_matches(s, "g")


def test_commits_of_a_producer_whose_marker_is_in_flight_are_concurrent_transactions():
    s = Shell(auto_persist=False)
    txn_commit(s, "g", {("t", 0): 10})
    s.complete()
    m1 = marker(s, commit=True)
    m2 = marker(s, commit=True)  # a retry joins the write in flight
    assert s.reply(txn_commit(s, "g", {("t", 0): 11}, epoch=1)).topics == {"t": {0: E.CONCURRENT_TRANSACTIONS}}
    assert s.reply(marker(s, commit=False)).error_code == E.CONCURRENT_TRANSACTIONS
    s.complete()
    assert s.reply(m1).error_code == 0 and s.reply(m2).error_code == 0


def test_a_failed_marker_append_keeps_the_offsets_pending_for_its_retry():
    s = Shell(auto_persist=False)
    txn_commit(s, "g", {("t", 0): 10})
    s.complete()
    m = marker(s, commit=True)
    s.complete(error=E.NOT_ENOUGH_REPLICAS)
    assert s.reply(m).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert s.coord.pending_txn_offsets("g")[PID][("t", 0)].offset == 10
    marker(s, commit=True)
    s.complete()
    assert fetch(s, "g", {"t": [0]}) == {("t", 0): 10}


def test_close_answers_commits_and_markers_in_flight():
    s = Shell(auto_persist=False)
    c = txn_commit(s, "g", {("t", 0): 10})
    m = marker(s, commit=True)
    s.run(s.coord.close(s.now, E.NOT_COORDINATOR))
    assert s.reply(c).error_code == E.NOT_COORDINATOR and s.reply(m).error_code == E.NOT_COORDINATOR


# -- retention and deletion --------------------------------------------------------------------


def test_retention_keeps_an_offset_with_a_pending_transaction_and_the_group():
    s = Shell()
    s.reply(s.commit("g", {("t", 0): 3}))
    s.reply(txn_commit(s, "g", {("t", 0): 10}))
    s.advance(FAST.offsets_retention_ms + FAST.offsets_retention_check_interval_ms + 1)
    assert s.coord.group("g") is not None and s.coord.committed_offsets("g")[("t", 0)].offset == 3
    s.reply(marker(s, commit=False))
    s.advance(FAST.offsets_retention_ms + FAST.offsets_retention_check_interval_ms + 1)
    assert s.coord.group("g") is None
    assert replayed(s).group("g") is None


def test_delete_groups_tombstones_pending_offsets():
    s = Shell()
    s.reply(txn_commit(s, "g", {("t", 0): 10}))
    r = s.reply(s.send(DeleteGroupsRequest(["g"])))
    assert r.results == {"g": 0}
    assert replayed(s).group("g") is None
    assert s.reply(marker(s, commit=True)).error_code == 0
    assert s.coord.group("g") is None


# -- replay ------------------------------------------------------------------------------------


def test_pending_offsets_survive_a_failover_and_the_new_coordinator_resolves_them():
    s = Shell()
    s.reply(txn_commit(s, "g", {("t", 0): 10, ("u", 2): 5}))
    fresh = Shell()
    fresh.log = list(s.log)
    fresh.coord.load(fresh.log, fresh.now)
    assert fetch(fresh, "g", {"t": [0], "u": [2]}, require_stable=True) == {("t", 0): "UNSTABLE_OFFSET_COMMIT", ("u", 2): "UNSTABLE_OFFSET_COMMIT"}
    assert fresh.reply(marker(fresh, commit=True)).error_code == 0
    assert fetch(fresh, "g", {"t": [0], "u": [2]}, require_stable=True) == {("t", 0): 10, ("u", 2): 5}
    assert_replay_matches(fresh, "g")


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_replay_to_memory(seed):
    """Random commits, transactional commits and markers, some appends failing (a failed
    TxnOffsetCommit landing or not): memory equals the replay but for what such a failure
    leaves uncertain (pending without a value), which the next marker resolves."""
    rng = random.Random(seed)
    s = Shell(auto_persist=False)
    epochs = {1: 0, 2: 0, 3: 0}
    for _ in range(120):
        op = rng.random()
        pid = rng.choice(list(epochs))
        tp = ("t", rng.randrange(3))
        if op < 0.3:
            txn_commit(s, rng.choice("ab"), {tp: rng.randrange(1000)}, pid=pid, epoch=epochs[pid])
        elif op < 0.45:
            s.commit(rng.choice("ab"), {tp: rng.randrange(1000)})
        elif op < 0.65:
            epochs[pid] += rng.random() < 0.5
            marker(s, commit=rng.random() < 0.5, pid=pid, epoch=epochs[pid])
        elif s.pending:
            error = rng.choice([0, 0, 0, E.REQUEST_TIMED_OUT])
            p = s.pending.pop(0)
            txn_only = all(isinstance(decode_record(k, v)[0], (TxnOffsetKey, TxnProducerKey)) and v is not None for k, v in p.records)
            if error == 0 or (txn_only and rng.random() < 0.5):
                s.log.extend(p.records)
            s.run(s.coord.on_persisted(p.persist_id, error, s.now))
        if not s.pending:
            fresh = replayed(s)
            for g in "ab":
                assert fresh.committed_offsets(g) == s.coord.committed_offsets(g)
                # a failed append that did not land is known only as "may have landed"
                mine = {p: {tp: o for tp, o in offs.items() if o is not None} for p, offs in s.coord.pending_txn_offsets(g).items()}
                theirs = fresh.pending_txn_offsets(g)
                for p, offs in mine.items():
                    for tp, o in offs.items():
                        assert theirs.get(p, {}).get(tp) == o
                    uncertain = set(s.coord.pending_txn_offsets(g).get(p, {})) - set(offs)
                    assert set(theirs.get(p, {})) <= set(offs) | uncertain
                assert set(theirs) <= set(s.coord.pending_txn_offsets(g))


# -- expiry of idle producers' [5, producer_id] records --------------------------------------

HORIZON = 3_600_000
EXPIRING = dataclasses.replace(FAST, transactional_id_expiration_ms=HORIZON, offsets_retention_minutes=7 * 24 * 60)


def assert_replay_matches_values(s: Shell) -> None:
    assert replayed(s).txn_producer_values() == s.coord.txn_producer_values()


def compacted(log: list) -> list:
    """What the cleaner leaves once tombstones are past delete.retention.ms: the last record
    of each key, in log order, tombstones dropped."""
    last = {k: i for i, (k, _) in enumerate(log)}
    return [(k, v) for i, (k, v) in enumerate(log) if last[k] == i and v is not None]


def _one_transaction(s: Shell, pid: int = PID, epoch: int = 0, commit: bool = True) -> None:
    assert s.reply(txn_commit(s, "g", {("t", 0): 10 + epoch}, pid=pid, epoch=epoch)).error_code == 0
    assert s.reply(marker(s, commit=commit, pid=pid, epoch=epoch + 1)).error_code == 0


def test_an_idle_producers_record_expires_to_a_tombstone_and_a_restart_after_it_loads_the_same():
    s = Shell(EXPIRING)
    _one_transaction(s)
    marker_at = s.now
    assert s.coord.txn_producer_values()[PID].last_update_ms == marker_at
    s.advance(HORIZON - 1)
    assert PID in s.coord.txn_producers()
    s.advance(1)
    assert PID not in s.coord.txn_producers() and s.coord.stats.txn_producers_expired == 1
    k, v = decode_record(*s.log[-1])
    assert k == TxnProducerKey(PID) and v is None
    assert s.coord.committed_offsets("g")[("t", 0)].offset == 10  # the group's offsets are not the producer's
    assert_replay_matches(s, "g")
    assert_replay_matches_values(s)
    # after compaction the key is gone from the log, and a restart loads the same state
    cleaned = compacted(s.log)
    assert all(decode_record(k, v)[0] != TxnProducerKey(PID) for k, v in cleaned)
    fresh = GroupCoordinatorState(s.config, s.coord.partition, s.coord.num_partitions)
    fresh.load(cleaned, s.now)
    assert fresh.txn_producer_values() == s.coord.txn_producer_values() == {}
    assert fresh.committed_offsets("g") == s.coord.committed_offsets("g")
    # the producer id starts over here (its transaction coordinator forgot it too)
    _one_transaction(s, epoch=0)
    assert s.coord.txn_producers()[PID] == (1, 0)


def test_a_producer_with_pending_offsets_never_expires_and_its_marker_restarts_the_clock():
    s = Shell(EXPIRING)
    assert s.reply(txn_commit(s, "g", {("t", 0): 10})).error_code == 0
    s.advance(3 * HORIZON)
    assert PID in s.coord.txn_producers() and s.coord.pending_txn_offsets("g")
    assert s.reply(marker(s, commit=True)).error_code == 0
    s.advance(HORIZON - 1)
    assert PID in s.coord.txn_producers()
    s.advance(1)
    assert PID not in s.coord.txn_producers()
    assert_replay_matches_values(s)


def test_an_uncertain_commit_or_one_in_flight_keeps_the_record():
    s = Shell(EXPIRING, auto_persist=False)
    txn_commit(s, "g", {("t", 0): 10})
    s.complete()
    marker(s, commit=True)
    s.complete()
    txn_commit(s, "g", {("t", 0): 11}, epoch=1)
    s.complete(error=E.REQUEST_TIMED_OUT)  # may have landed: pending without a value
    s.advance(2 * HORIZON)
    assert PID in s.coord.txn_producers() and not s.pending
    token = txn_commit(s, "g", {("t", 1): 12}, epoch=1)  # in flight across the deadline
    s.advance(2 * HORIZON)
    assert PID in s.coord.txn_producers() and len(s.pending) == 1
    s.complete()
    assert s.reply(token).topics["t"][1] == 0


def test_requests_during_the_tombstone_append_wait_and_a_failed_tombstone_is_retried():
    s = Shell(EXPIRING, auto_persist=False)
    txn_commit(s, "g", {("t", 0): 10})
    s.complete()
    marker(s, commit=True)
    s.complete()
    s.advance(HORIZON)
    assert len(s.pending) == 1  # the tombstone
    assert s.reply(txn_commit(s, "g", {("t", 0): 20}, epoch=1)).error_code == E.CONCURRENT_TRANSACTIONS
    assert s.reply(marker(s, commit=True, epoch=2)).error_code == E.CONCURRENT_TRANSACTIONS
    s.complete(error=E.REQUEST_TIMED_OUT)
    assert PID in s.coord.txn_producers()
    s.advance(1_000)
    s.complete()
    assert PID not in s.coord.txn_producers()
    assert_replay_matches_values(s)


def test_records_written_before_last_update_was_kept_count_from_the_load():
    s = Shell(EXPIRING)
    old_value = msgpack.packb({"v": 1, "producer_epoch": 3, "coordinator_epoch": 2})
    assert decode_txn_producer_value(old_value) == TxnProducerValue(3, 2, -1)
    s.log.append((encode_key(TxnProducerKey(PID)), old_value))
    s.coord = GroupCoordinatorState(s.config, 0, 1)
    s.run(s.coord.load(s.log, s.now))
    assert s.coord.txn_producers() == {PID: (3, 2)}
    s.advance(HORIZON - 1)
    assert PID in s.coord.txn_producers()
    s.advance(1)
    assert PID not in s.coord.txn_producers()
    with pytest.raises(DecodeError, match="last_update"):
        decode_txn_producer_value(msgpack.packb({"v": 1, "producer_epoch": 3, "coordinator_epoch": 2, "last_update": "x"}))
