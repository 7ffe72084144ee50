"""EndTxn: commit and abort, markers to every partition, the epoch bumped per transaction
(KIP-890 part 2), retries recognised and idempotent, delayed EndTxns that must not end a
later transaction (KAFKA-17754) or pass for a retry of an abort the coordinator decided
(KAFKA-20785), the epochs running out, failed appends -- and every refusal with its Kafka
error code."""

from __future__ import annotations

from dataclasses import replace

import pytest
from txn_harness import OFFSETS_PARTITIONS, Shell, began

from kcoord.group.placement import coordinator_for as group_coordinator_for
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import EndTxnRequest, EndTxnResponse, TxnOffsetMarkerRequest, WriteTxnMarkerRequest
from kcoord.txn.records import decode_record, txn_record
from kcoord.txn.state import MAX_PRODUCER_EPOCH, TransactionState

S = TransactionState


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_end_persists_the_decision_answers_then_writes_every_marker_then_completes(commit):
    s = Shell(auto_persist=False, auto_markers=False)
    s.auto_persist = True
    pid, epoch = began(s, topics={"out": [0, 3], "side": [1]})
    assert s.add_offsets("t", pid, epoch, "grp").error_code == E.NONE
    s.auto_persist = False
    token = s.request(EndTxnRequest("t", pid, epoch, commit, bump_epoch=True))
    assert s.reply(token) is None and not s.markers  # nothing before the decision is durable
    (append,) = s.appends
    _, v = decode_record(*append.records[0])
    assert v.state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT) and v.producer_epoch == epoch + 1
    s.complete()
    assert s.reply(token) == EndTxnResponse(producer_id=pid, producer_epoch=epoch + 1)
    group_partition = group_coordinator_for("grp", OFFSETS_PARTITIONS)
    sent = sorted(s.markers, key=lambda m: m.marker_id)
    assert [m.request for m in sent] == [
        TxnOffsetMarkerRequest(pid, epoch + 1, 5, commit, group_partition, "t"),
        WriteTxnMarkerRequest(pid, epoch + 1, 5, commit, "out", 0, "t"),
        WriteTxnMarkerRequest(pid, epoch + 1, 5, commit, "out", 3, "t"),
        WriteTxnMarkerRequest(pid, epoch + 1, 5, commit, "side", 1, "t"),
    ]
    assert s.core.pending_markers("t") == {("__consumer_offsets", group_partition), ("out", 0), ("out", 3), ("side", 1)}
    s.ack_markers(topic="out")
    s.ack_markers(topic="side")
    assert not s.appends and s.state().state.is_prepare  # one marker still missing
    s.ack_markers()
    (append,) = s.appends
    s.complete()
    v = s.state()
    assert v.state == (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT) and v.partitions == ()
    assert (v.producer_id, v.producer_epoch) == (pid, epoch + 1)
    stats = s.core.stats
    assert (stats.transactions_committed, stats.transactions_aborted) == ((1, 0) if commit else (0, 1))
    s.assert_replay_equal()


def test_without_bump_epoch_one_epoch_serves_every_transaction():
    s = Shell()
    pid, epoch = began(s)
    assert s.end("t", pid, epoch, commit=True, bump=False) == EndTxnResponse(producer_id=pid, producer_epoch=epoch)
    assert s.written[-1].producer_epoch == epoch
    assert s.add("t", pid, epoch).error_code == E.NONE
    assert s.end("t", pid, epoch, commit=False, bump=False).error_code == E.NONE
    assert s.state().state == S.COMPLETE_ABORT and s.state().producer_epoch == epoch


def test_with_bump_epoch_the_next_transaction_uses_the_new_epoch_only():
    s = Shell()
    pid, epoch = began(s)
    assert s.end("t", pid, epoch).producer_epoch == epoch + 1
    assert s.add("t", pid, epoch).error_code == E.PRODUCER_FENCED
    assert s.add("t", pid, epoch + 1).error_code == E.NONE
    assert s.end("t", pid, epoch + 1).producer_epoch == epoch + 2


# -- retries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bump", [True, False], ids=["bump", "no-bump"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_retried_end_is_concurrent_while_completing_none_after_and_the_other_result_invalid(bump, commit):
    s = Shell(auto_markers=False)
    pid, epoch = began(s)
    first = s.end("t", pid, epoch, commit, bump)
    assert first.error_code == E.NONE
    assert s.end("t", pid, epoch, commit, bump).error_code == E.CONCURRENT_TRANSACTIONS
    assert s.end("t", pid, epoch, not commit, bump).error_code == E.INVALID_TXN_STATE
    s.ack_markers()
    again = s.end("t", pid, epoch, commit, bump)
    assert again == EndTxnResponse(producer_id=first.producer_id, producer_epoch=first.producer_epoch)
    assert s.end("t", pid, epoch, not commit, bump).error_code == E.INVALID_TXN_STATE
    assert s.core.stats.transactions_committed + s.core.stats.transactions_aborted == 1  # ended once


def test_an_end_while_its_decision_is_being_appended_is_concurrent():
    s = Shell()
    pid, epoch = began(s)
    s.auto_persist = False
    t1 = s.request(EndTxnRequest("t", pid, epoch, True, bump_epoch=True))
    t2 = s.request(EndTxnRequest("t", pid, epoch, True, bump_epoch=True))
    assert s.reply(t2).error_code == E.CONCURRENT_TRANSACTIONS
    s.complete()
    assert s.reply(t1).error_code == E.NONE


def test_a_producer_that_moved_on_to_its_next_epoch_waits_for_the_completion():
    s = Shell(auto_markers=False)
    pid, epoch = began(s)
    s.end("t", pid, epoch)
    # it begins and aborts an empty transaction at the new epoch before the markers are in
    assert s.end("t", pid, epoch + 1, commit=False).error_code == E.CONCURRENT_TRANSACTIONS
    s.ack_markers()
    assert s.end("t", pid, epoch + 1, commit=False).producer_epoch == epoch + 2


# -- KAFKA-17754 and KAFKA-20785 -------------------------------------------------------------


def test_a_delayed_end_of_transaction_n_cannot_end_transaction_n_plus_1():
    s = Shell()
    pid, epoch = began(s)
    delayed = EndTxnRequest("t", pid, epoch, True, bump_epoch=True)
    assert s.ask(delayed).error_code == E.NONE  # (its retry went through)
    assert s.add("t", pid, epoch + 1, {"side": [0]}).error_code == E.NONE  # transaction N+1
    late = s.ask(delayed)  # the original arrives now
    assert late.error_code == E.PRODUCER_FENCED
    assert s.state().state == S.ONGOING and s.state().partitions == (("side", 0),)
    # nor after N+1 ended one way or the other
    assert s.end("t", pid, epoch + 1, commit=False).error_code == E.NONE
    assert s.ask(delayed).error_code == E.PRODUCER_FENCED


def test_without_bump_epoch_a_delayed_end_does_end_the_next_transaction_kafkas_window():
    """Wire clients up to EndTxn v4 keep one epoch per instance: Kafka cannot tell a delayed
    EndTxn from a new one (docs/kafka-wire.md). Pinned so a change is noticed."""
    s = Shell()
    pid, epoch = began(s)
    delayed = EndTxnRequest("t", pid, epoch, True)
    assert s.ask(delayed).error_code == E.NONE
    assert s.add("t", pid, epoch, {"side": [0]}).error_code == E.NONE
    assert s.ask(delayed).error_code == E.NONE
    assert s.state().state == S.COMPLETE_COMMIT


@pytest.mark.parametrize("bump", [True, False], ids=["bump", "no-bump"])
def test_a_commit_after_the_coordinator_aborted_on_timeout_is_fenced_not_a_retry(bump):
    s = Shell()
    pid, epoch = began(s)
    if bump:  # a previous transaction left bump_epoch set
        epoch = s.end("t", pid, epoch).producer_epoch
        assert s.add("t", pid, epoch).error_code == E.NONE
    s.advance(s.state().timeout_ms + 1)
    v = s.state()
    assert v.state == S.COMPLETE_ABORT and v.producer_epoch == epoch + 1
    r = s.end("t", pid, epoch, commit=True, bump=bump)
    assert r.error_code == E.PRODUCER_FENCED  # recoverable, not INVALID_TXN_STATE (KAFKA-20785)


# -- no transaction --------------------------------------------------------------------------


def test_end_without_a_transaction():
    s = Shell()
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    assert s.end("t", pid, epoch, commit=True).error_code == E.INVALID_TXN_STATE
    assert s.end("t", pid, epoch, commit=False, bump=False).error_code == E.INVALID_TXN_STATE
    assert s.state().state == S.EMPTY and s.state().producer_epoch == epoch


def test_an_empty_abort_with_bump_epoch_ends_at_the_next_epoch_without_markers():
    s = Shell()
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    e = s.end("t", pid, epoch, commit=False)
    assert e == EndTxnResponse(producer_id=pid, producer_epoch=epoch + 1)
    assert s.state().state == S.COMPLETE_ABORT and not s.sent
    # after a completed transaction too; a commit there has nothing to commit
    assert s.end("t", pid, epoch + 1, commit=True).error_code == E.INVALID_TXN_STATE
    assert s.end("t", pid, epoch + 1, commit=False).producer_epoch == epoch + 2
    # and its retry is recognised
    assert s.end("t", pid, epoch + 1, commit=False).producer_epoch == epoch + 2
    s.assert_replay_equal()


# -- refusals --------------------------------------------------------------------------------


def test_end_refusals_with_kafkas_codes():
    s = Shell()
    assert s.end("nobody", 1, 0).error_code == E.INVALID_PRODUCER_ID_MAPPING
    pid, epoch = began(s)
    assert s.end("t", pid + 1, epoch).error_code == E.INVALID_PRODUCER_ID_MAPPING
    assert s.end("t", pid, epoch + 3).error_code == E.PRODUCER_FENCED
    assert s.ask(EndTxnRequest("t", pid, epoch + 3, True, wire_version=1)).error_code == E.INVALID_PRODUCER_EPOCH
    assert s.ask(EndTxnRequest("t", pid, epoch + 3, True, wire_version=2)).error_code == E.PRODUCER_FENCED
    r = s.ask(EndTxnRequest("", pid, epoch, True))
    assert r.error_code == E.INVALID_REQUEST and (r.producer_id, r.producer_epoch) == (-1, -1)
    assert s.state().state == S.ONGOING


@pytest.mark.parametrize(
    "append_error, expected",
    [(E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, E.COORDINATOR_NOT_AVAILABLE), (E.KAFKA_STORAGE_ERROR, E.NOT_COORDINATOR)],
)
def test_a_failed_decision_answers_a_coordinator_error_sends_no_marker_and_a_retry_works(append_error, expected):
    s = Shell()
    pid, epoch = began(s)
    s.auto_persist = False
    token = s.request(EndTxnRequest("t", pid, epoch, True, bump_epoch=True))
    s.complete(error=append_error)
    r = s.reply(token)
    assert r.error_code == expected and (r.producer_id, r.producer_epoch) == (-1, -1)
    assert s.state().state == S.ONGOING and s.state().producer_epoch == epoch and not s.sent
    s.auto_persist = True
    assert s.end("t", pid, epoch).error_code == E.NONE
    assert s.state().state == S.COMPLETE_COMMIT
    s.assert_replay_equal()


# -- the epochs running out (KIP-890 part 2) -------------------------------------------------


def _ongoing_at(s: Shell, epoch: int) -> int:
    pid, _ = began(s)
    s.log.append(txn_record("t", replace(s.state(), producer_epoch=epoch, start_epoch=epoch)))
    s.reload()
    return pid


def test_ending_at_the_last_usable_epoch_moves_to_a_new_producer_id():
    s = Shell(auto_markers=False)
    pid = _ongoing_at(s, MAX_PRODUCER_EPOCH - 1)
    e = s.end("t", pid, MAX_PRODUCER_EPOCH - 1)
    assert e.error_code == E.NONE and e.producer_id not in (pid, -1) and e.producer_epoch == 0
    # the markers still go out under the old id, at the last epoch
    assert {(m.request.producer_id, m.request.producer_epoch) for m in s.markers} == {(pid, MAX_PRODUCER_EPOCH)}
    # the producer, already on its new id, waits for the completion
    assert s.add("t", e.producer_id, 0).error_code == E.CONCURRENT_TRANSACTIONS
    assert s.end("t", e.producer_id, 0, commit=False).error_code == E.CONCURRENT_TRANSACTIONS
    s.ack_markers()
    v = s.state()
    assert (v.state, v.producer_id, v.producer_epoch, v.prev_producer_id) == (S.COMPLETE_COMMIT, e.producer_id, 0, pid)
    # a retry of that EndTxn is recognised under the old id
    assert s.end("t", pid, MAX_PRODUCER_EPOCH - 1) == EndTxnResponse(producer_id=e.producer_id, producer_epoch=0)
    assert s.add("t", e.producer_id, 0).error_code == E.NONE
    s.assert_replay_equal()


def test_ending_at_the_last_epoch_waits_for_producer_ids_retriably():
    s = Shell(auto_ids=False)
    s.allocate()
    pid = _ongoing_at(s, MAX_PRODUCER_EPOCH - 1)
    # use up the block (the next one is asked for and held)
    while s.core._producer_ids.available:  # noqa: SLF001 - test reaches into the pool
        s.core._producer_ids.take(s.now)  # noqa: SLF001
    assert len(s.allocations) == 1
    assert s.end("t", pid, MAX_PRODUCER_EPOCH - 1).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert s.state().state == S.ONGOING
    s.allocate()
    assert s.end("t", pid, MAX_PRODUCER_EPOCH - 1).error_code == E.NONE


def test_an_unknown_producer_id_during_completion_is_not_taken_for_the_next_one():
    s = Shell(auto_markers=False)
    pid, epoch = began(s)
    s.end("t", pid, epoch)  # no new producer id: next_producer_id stays -1
    assert s.end("t", -1, 0, commit=False).error_code == E.INVALID_PRODUCER_ID_MAPPING
