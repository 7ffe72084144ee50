"""AddPartitionsToTxn / AddOffsetsToTxn held while their transactional id is busy (the
previous transaction's markers being written, or another transition in flight): served
again, every check included, once the id settles; CONCURRENT_TRANSACTIONS when the hold runs
out; answered when the coordinator closes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from txn_harness import FAST, Shell

from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import AddOffsetsToTxnRequest, AddPartitionsToTxnRequest
from kcoord.txn.partitions import MAX_HELD_PER_ID

HOLD = 1_000
CONFIG = replace(FAST, concurrent_transactions_hold_ms=HOLD)


def _committing(offsets: bool = False):
    """A Shell whose producer's transaction is PREPARE_COMMIT, its markers not written yet;
    returns (shell, producer id, the epoch of the next transaction)."""
    s = Shell(CONFIG, auto_markers=False)
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    assert s.add("t", pid, epoch, {"out": [0, 1]}).error_code == E.NONE
    if offsets:
        assert s.add_offsets("t", pid, epoch).error_code == E.NONE
    end = s.end("t", pid, epoch, commit=True)
    assert end.error_code == E.NONE and s.state().state.value == "PrepareCommit"
    return s, pid, end.producer_epoch


@pytest.mark.parametrize("offsets", [False, True], ids=["AddPartitions", "AddOffsets"])
def test_the_next_transactions_add_waits_for_the_markers_then_is_answered(offsets):
    s, pid, epoch = _committing()
    req = AddOffsetsToTxnRequest("t", pid, epoch, "g") if offsets else AddPartitionsToTxnRequest("t", pid, epoch, {"out": [2]})
    token = s.request(req)
    assert s.reply(token) is None  # held, not CONCURRENT_TRANSACTIONS
    s.advance(HOLD - 1)
    assert s.reply(token) is None
    s.ack_markers()  # the markers land: COMPLETE_COMMIT, then the held request is served
    assert s.reply(token).error_code == E.NONE
    v = s.state()
    assert v.state.value == "Ongoing" and v.producer_epoch == epoch
    assert len(v.partitions) == 1 and s.core.held_ids() == []


def test_a_held_add_still_waiting_when_its_hold_runs_out_is_concurrent_transactions():
    s, pid, epoch = _committing()
    token = s.request(AddPartitionsToTxnRequest("t", pid, epoch, {"out": [2]}))
    s.advance(HOLD - 1)
    assert s.reply(token) is None
    s.advance(1)
    assert s.reply(token).error_code == E.CONCURRENT_TRANSACTIONS
    assert s.core.stats.holds_expired == 1 and s.core.held_ids() == []
    s.ack_markers()  # nothing left to serve: the transaction completes, nothing starts
    assert s.state().state.value == "CompleteCommit"


def test_a_held_add_is_checked_again_when_served():
    """Held before any id check (KAFKA-18660's order); once the id settles an identity that
    is not the current one is refused, never answered NONE."""
    s, pid, epoch = _committing()
    stale = s.request(AddPartitionsToTxnRequest("t", pid, epoch - 1, {"out": [2]}))
    other = s.request(AddPartitionsToTxnRequest("t", pid + 7, 0, {"out": [2]}))
    assert s.reply(stale) is None and s.reply(other) is None
    s.ack_markers()
    assert s.reply(stale).error_code == E.PRODUCER_FENCED
    assert s.reply(other).error_code == E.INVALID_PRODUCER_ID_MAPPING
    assert s.state().state.value == "CompleteCommit"


def test_requests_behind_an_append_in_flight_are_served_in_order_with_their_first_deadline():
    s = Shell(CONFIG)
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    s.auto_persist = False
    t1 = s.request(AddPartitionsToTxnRequest("t", pid, epoch, {"out": [0]}))
    t2 = s.request(AddPartitionsToTxnRequest("t", pid, epoch, {"out": [1]}))
    t3 = s.request(AddOffsetsToTxnRequest("t", pid, epoch, "g"))
    assert [s.reply(t) for t in (t1, t2, t3)] == [None, None, None]
    s.complete()  # t1 lands; t2 is served (its append in flight), t3 held again behind it
    assert s.reply(t1).error_code == E.NONE and s.reply(t2) is None and s.reply(t3) is None
    s.advance(HOLD)  # t3's first deadline, though it was held again later
    assert s.reply(t3).error_code == E.CONCURRENT_TRANSACTIONS and s.reply(t2) is None
    s.complete()
    assert s.reply(t2).error_code == E.NONE
    assert s.state().partitions == (("out", 0), ("out", 1))


def test_at_most_max_held_per_id_the_rest_answered_at_once():
    s, pid, epoch = _committing()
    tokens = [s.request(AddPartitionsToTxnRequest("t", pid, epoch, {"out": [2]})) for _ in range(MAX_HELD_PER_ID + 1)]
    assert all(s.reply(t) is None for t in tokens[:-1])
    assert s.reply(tokens[-1]).error_code == E.CONCURRENT_TRANSACTIONS
    s.ack_markers()
    assert all(s.reply(t).error_code == E.NONE for t in tokens[:-1])  # the first adds; the rest find it in


def test_closing_answers_held_requests_not_coordinator():
    s, pid, epoch = _committing()
    token = s.request(AddPartitionsToTxnRequest("t", pid, epoch, {"out": [2]}))
    s.run(s.core.close(s.now))
    assert s.reply(token).error_code == E.NOT_COORDINATOR


def test_hold_zero_answers_at_once_as_kafka_does():
    s = Shell(replace(FAST, concurrent_transactions_hold_ms=0), auto_markers=False)
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    assert s.add("t", pid, epoch).error_code == E.NONE
    end = s.end("t", pid, epoch)
    assert s.add("t", pid, end.producer_epoch).error_code == E.CONCURRENT_TRANSACTIONS


def test_a_negative_hold_is_refused():
    with pytest.raises(ValueError, match="concurrent_transactions_hold_ms"):
        replace(FAST, concurrent_transactions_hold_ms=-1)


# -- the held add served in the same append as the completion -----------------------------


@pytest.mark.parametrize("offsets", [False, True], ids=["AddPartitions", "AddOffsets"])
def test_the_held_add_goes_in_the_completions_append_and_a_replay_rebuilds_its_transaction(offsets):
    """The next transaction's first add waited for the markers: its ONGOING record follows
    COMPLETE_COMMIT in one append (one write to __transaction_state before its batches may
    go, not two in sequence); memory and a replay of the log both end ONGOING."""
    s, pid, epoch = _committing()
    s.auto_persist = False
    req = AddOffsetsToTxnRequest("t", pid, epoch, "g") if offsets else AddPartitionsToTxnRequest("t", pid, epoch, {"out": [2]})
    token = s.request(req)
    s.ack_markers()
    assert len(s.appends) == 1 and len(s.appends[0].records) == 2  # COMPLETE_COMMIT, then ONGOING
    assert s.reply(token) is None and s.core.held_ids() == []
    s.complete()
    assert s.reply(token).error_code == E.NONE
    v = s.state()
    assert v.state.value == "Ongoing" and v.producer_epoch == epoch and len(v.partitions) == 1
    assert s.core.stats.transactions_committed == 1 and s.core.stats.adds_with_completion == 1
    s.assert_replay_equal()
    states = [r.state.value for r in _values(s.log)]
    assert states[-2:] == ["CompleteCommit", "Ongoing"]


def test_a_failed_completion_with_the_add_answers_it_retriable_and_completes_again_alone():
    s, pid, epoch = _committing()
    s.auto_persist = False
    token = s.request(AddPartitionsToTxnRequest("t", pid, epoch, {"out": [2]}))
    s.ack_markers()
    s.complete(E.NOT_LEADER_OR_FOLLOWER)  # neither record landed
    assert s.reply(token).error_code in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE)  # the client retries
    assert s.state().state.value == "PrepareCommit"
    s.advance(FAST.append_retry_backoff_ms)
    assert len(s.appends) == 1 and len(s.appends[0].records) == 1  # COMPLETE_COMMIT alone now
    s.complete()
    assert s.state().state.value == "CompleteCommit"
    s.assert_replay_equal()


def test_a_held_add_that_would_be_refused_is_not_appended_with_the_completion():
    s, pid, epoch = _committing()
    s.auto_persist = False
    stale = s.request(AddPartitionsToTxnRequest("t", pid, epoch - 1, {"out": [2]}))
    s.ack_markers()
    assert len(s.appends) == 1 and len(s.appends[0].records) == 1
    s.complete()
    assert s.reply(stale).error_code == E.PRODUCER_FENCED
    assert s.state().state.value == "CompleteCommit" and s.core.stats.adds_with_completion == 0


def _values(log):
    from kcoord.txn.records import decode_record

    out = []
    for key, value in log:
        decoded = decode_record(key, value)
        if decoded is not None and decoded[1] is not None:
            out.append(decoded[1])
    return out
