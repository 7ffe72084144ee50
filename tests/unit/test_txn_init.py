"""InitProducerId with a transactional id: new ids, epoch bumps that fence older instances,
aborting an older instance's open transaction, KIP-360 recovery, producer id rotation when
epochs run out, KIP-939 two-phase instances, producer ids from the controller, and bad input
-- each with Kafka's error code."""

from __future__ import annotations

from dataclasses import replace

import pytest
from txn_harness import FAST, FIRST_PID, T0, TIMEOUT, Shell, began

from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import AddPartitionsToTxnRequest, TxnInitProducerIdRequest, TxnInitProducerIdResponse
from kcoord.txn import AllocateProducerIds, TxnConfig, coordinator_for
from kcoord.txn.init_producer import TWO_PHASE_TIMEOUT_MS
from kcoord.txn.records import decode_record, txn_record
from kcoord.txn.state import MAX_PRODUCER_EPOCH, TransactionState

S = TransactionState


def test_a_new_id_gets_a_fresh_producer_id_at_epoch_0_persisted_before_the_answer():
    s = Shell(auto_persist=False)
    token = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    assert s.reply(token) is None and s.core.snapshot() == {}
    (append,) = s.appends
    (key, value), = append.records
    k, v = decode_record(key, value)
    assert k.transactional_id == "t" and v.state == S.EMPTY and (v.producer_id, v.producer_epoch) == (FIRST_PID, 0)
    assert v.timeout_ms == TIMEOUT and v.last_update_ms == T0 and v.last_producer_epoch == -1
    s.complete()
    assert s.reply(token) == TxnInitProducerIdResponse(producer_id=FIRST_PID, producer_epoch=0)
    s.assert_replay_equal()


def test_each_init_bumps_the_epoch_and_fences_the_older_instance():
    s = Shell()
    first = s.init("t")
    second = s.init("t")
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, first.producer_epoch + 1)
    assert s.state().last_producer_epoch == -1  # a new instance: no retry of the old one passes
    # the older instance is fenced from every request
    assert s.add("t", first.producer_id, first.producer_epoch).error_code == E.PRODUCER_FENCED
    assert s.end("t", first.producer_id, first.producer_epoch).error_code == E.PRODUCER_FENCED
    # and different ids get different producer ids
    other = s.init("u")
    assert other.producer_id != first.producer_id and other.producer_epoch == 0
    s.assert_replay_equal()


def test_an_ongoing_transaction_of_the_older_instance_is_aborted_first():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0, 1]})
    r = s.init("t")
    # the abort is persisted at a bumped epoch; the caller retries
    assert r.error_code == E.CONCURRENT_TRANSACTIONS
    v = s.state()
    assert v.state == S.PREPARE_ABORT and v.producer_epoch == epoch + 1 and v.last_producer_epoch == -1
    assert {(m.request.topic, m.request.partition, m.request.commit, m.request.producer_epoch) for m in s.markers} == {
        ("out", 0, False, epoch + 1),
        ("out", 1, False, epoch + 1),
    }
    # while the markers are written, the new instance keeps hearing CONCURRENT_TRANSACTIONS
    assert s.init("t").error_code == E.CONCURRENT_TRANSACTIONS
    # the zombie can no longer end its transaction
    assert s.end("t", pid, epoch, commit=True).error_code == E.PRODUCER_FENCED
    s.ack_markers()
    assert s.state().state == S.COMPLETE_ABORT
    r = s.init("t")
    assert r.error_code == E.NONE and (r.producer_id, r.producer_epoch) == (pid, epoch + 2)
    assert s.core.stats.fenced_transactions == 1 and s.core.stats.transactions_aborted == 1
    s.assert_replay_equal()


def test_a_transaction_being_completed_makes_init_wait():
    s = Shell(auto_markers=False)
    pid, epoch = began(s)
    assert s.end("t", pid, epoch, commit=True).error_code == E.NONE
    assert s.init("t").error_code == E.CONCURRENT_TRANSACTIONS
    s.ack_markers()
    r = s.init("t")
    assert r.error_code == E.NONE and r.producer_epoch == epoch + 2  # one bump by EndTxn, one by init
    assert s.state().state == S.EMPTY


def test_a_transition_in_flight_makes_init_wait():
    s = Shell(auto_persist=False)
    t1 = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    t2 = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    assert s.reply(t2).error_code == E.CONCURRENT_TRANSACTIONS
    s.complete()
    assert s.reply(t1).error_code == E.NONE


# -- KIP-360 ---------------------------------------------------------------------------------


def test_kip360_a_producer_presenting_its_current_epoch_continues_at_the_next():
    s = Shell()
    r = s.init("t")
    again = s.init("t", pid=r.producer_id, epoch=r.producer_epoch)
    assert (again.producer_id, again.producer_epoch) == (r.producer_id, r.producer_epoch + 1)
    assert s.state().last_producer_epoch == r.producer_epoch
    # a retry of that call (the answer was lost) gets the same answer, no second bump
    retry = s.init("t", pid=r.producer_id, epoch=r.producer_epoch)
    assert (retry.error_code, retry.producer_epoch) == (E.NONE, r.producer_epoch + 1)
    s.assert_replay_equal()


def test_kip360_a_producer_presenting_an_epoch_someone_else_moved_past_is_fenced():
    s = Shell()
    r = s.init("t")
    s.init("t")  # another instance
    stale = s.init("t", pid=r.producer_id, epoch=r.producer_epoch)
    assert stale.error_code == E.PRODUCER_FENCED and stale.producer_id == -1
    # Kafka clients before InitProducerId v4 hear INVALID_PRODUCER_EPOCH instead
    old = s.ask(TxnInitProducerIdRequest("t", TIMEOUT, r.producer_id, r.producer_epoch, wire_version=3))
    assert old.error_code == E.INVALID_PRODUCER_EPOCH


def test_kip360_another_producer_id_is_fenced():
    s = Shell()
    r = s.init("t")
    assert s.init("t", pid=r.producer_id + 77, epoch=0).error_code == E.PRODUCER_FENCED


def test_kip360_recovery_with_an_ongoing_transaction_aborts_it_like_a_new_instance():
    s = Shell()
    pid, epoch = began(s)
    assert s.init("t", pid=pid, epoch=epoch).error_code == E.CONCURRENT_TRANSACTIONS
    assert s.state().state == S.COMPLETE_ABORT  # markers acknowledged at once here
    # the abort fenced epoch `epoch`: presenting it again is fenced
    assert s.init("t", pid=pid, epoch=epoch).error_code == E.PRODUCER_FENCED


# -- epochs running out ----------------------------------------------------------------------


def _at_epoch(s: Shell, epoch: int) -> int:
    """``t`` initialised at ``epoch``: what some 32,000 InitProducerIds leave, in a record
    loaded by a restart (so memory and log stay one)."""
    r = s.init("t")
    s.log.append(txn_record("t", replace(s.state(), producer_epoch=epoch)))
    s.reload()
    return r.producer_id


def test_the_producer_id_rotates_when_the_epoch_runs_out():
    s = Shell()
    old = _at_epoch(s, MAX_PRODUCER_EPOCH - 2)
    r = s.init("t")
    assert (r.producer_id, r.producer_epoch) == (old, MAX_PRODUCER_EPOCH - 1)
    r2 = s.init("t")
    assert r2.producer_id not in (old, -1) and r2.producer_epoch == 0
    v = s.state()
    assert v.prev_producer_id == old and v.last_producer_epoch == -1
    s.assert_replay_equal()


def test_kip360_retry_of_a_rotation_gets_the_new_id_again():
    s = Shell()
    old = _at_epoch(s, MAX_PRODUCER_EPOCH - 1)
    r = s.init("t", pid=old, epoch=MAX_PRODUCER_EPOCH - 1)
    assert r.producer_id != old and r.producer_epoch == 0
    assert s.state().last_producer_epoch == MAX_PRODUCER_EPOCH - 1
    again = s.init("t", pid=old, epoch=MAX_PRODUCER_EPOCH - 1)
    assert (again.error_code, again.producer_id, again.producer_epoch) == (E.NONE, r.producer_id, 0)


def test_an_ongoing_transaction_at_the_last_epoch_is_still_fenced():
    s = Shell()
    pid = _at_epoch(s, MAX_PRODUCER_EPOCH - 1)
    assert s.add("t", pid, MAX_PRODUCER_EPOCH - 1).error_code == E.NONE
    assert s.init("t").error_code == E.CONCURRENT_TRANSACTIONS
    v = s.state()
    assert v.state == S.COMPLETE_ABORT and v.producer_epoch == MAX_PRODUCER_EPOCH
    r = s.init("t")
    assert r.producer_id != pid and r.producer_epoch == 0


# -- producer ids from the controller --------------------------------------------------------


def test_producer_ids_come_in_blocks_and_a_request_waits_for_one_retriably():
    s = Shell(auto_ids=False)
    r = s.init("t")
    assert r.error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert s.allocations == [AllocateProducerIds(FAST.producer_id_block_size)]
    # asked once, not once per request
    assert s.init("u").error_code == E.COORDINATOR_LOAD_IN_PROGRESS and len(s.allocations) == 1
    s.allocate()
    ids = [s.init(f"id-{i}").producer_id for i in range(FAST.producer_id_block_size)]
    assert ids == list(range(FIRST_PID, FIRST_PID + FAST.producer_id_block_size))
    # the next block was asked for before this one ran out
    assert len(s.allocations) == 1
    assert s.init("more").error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    s.allocate()
    assert s.init("more").producer_id == FIRST_PID + FAST.producer_id_block_size


def test_a_failed_allocation_is_asked_again_and_an_unanswered_one_after_its_timeout():
    s = Shell(auto_ids=False)
    s.init("t")
    s.allocate(error=E.NOT_CONTROLLER)
    assert s.init("t").error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert len(s.allocations) == 1  # asked again
    s.allocations.clear()  # this answer never comes
    assert s.init("t").error_code == E.COORDINATOR_LOAD_IN_PROGRESS and not s.allocations
    s.advance(FAST.producer_id_request_timeout_ms)
    assert s.init("t").error_code == E.COORDINATOR_LOAD_IN_PROGRESS and len(s.allocations) == 1
    s.allocate()
    assert s.init("t").error_code == E.NONE


# -- persistence -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "append_error, expected",
    [
        (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
        (E.REQUEST_TIMED_OUT, E.COORDINATOR_NOT_AVAILABLE),
        (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
        (E.INVALID_PRODUCER_EPOCH, E.NOT_COORDINATOR),  # this coordinator was replaced
        (E.MESSAGE_TOO_LARGE, E.UNKNOWN_SERVER_ERROR),
    ],
)
def test_a_failed_append_answers_a_coordinator_error_and_changes_nothing(append_error, expected):
    s = Shell(auto_persist=False)
    token = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    s.complete(error=append_error)
    assert s.reply(token).error_code == expected
    assert s.core.transaction("t") is None and s.core.snapshot() == {}
    # an existing id keeps its epoch
    token = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    s.complete()
    epoch = s.reply(token).producer_epoch
    token = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    s.complete(error=append_error)
    assert s.reply(token).error_code == expected and s.state().producer_epoch == epoch
    s.assert_replay_equal()


def test_a_failed_fencing_abort_leaves_the_transaction_ongoing_and_a_retry_fences_it():
    s = Shell(auto_persist=False)
    token = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    s.complete()
    r = s.reply(token)
    token = s.request(AddPartitionsToTxnRequest("t", r.producer_id, 0, {"out": [0]}))
    s.complete()
    token = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    s.complete(error=E.NOT_ENOUGH_REPLICAS)
    assert s.reply(token).error_code == E.COORDINATOR_NOT_AVAILABLE
    assert s.state().state == S.ONGOING and s.state().producer_epoch == 0 and not s.sent
    token = s.request(TxnInitProducerIdRequest("t", TIMEOUT))
    s.complete()
    assert s.reply(token).error_code == E.CONCURRENT_TRANSACTIONS and s.state().producer_epoch == 1
    s.complete()  # the completion record
    assert s.state().state == S.COMPLETE_ABORT
    s.assert_replay_equal()


# -- KIP-939 two-phase instances -------------------------------------------------------------


def test_two_phase_instances_have_no_timeout_and_are_refused_when_disabled():
    s = Shell()
    r = s.init("t", timeout_ms=10**9, enable_two_phase=True)  # the timeout is not checked
    assert r.error_code == E.NONE
    v = s.state()
    assert v.two_phase and v.timeout_ms == TWO_PHASE_TIMEOUT_MS
    off = Shell(TxnConfig(transaction_two_phase_commit_enable=False))
    assert off.init("t", enable_two_phase=True).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert off.core.snapshot() == {}


def test_keep_prepared_keeps_an_ongoing_two_phase_transaction_for_the_new_instance():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0, 2]}, enable_two_phase=True)
    r = s.init("t", enable_two_phase=True, keep_prepared=True)
    assert r.error_code == E.NONE
    assert (r.producer_id, r.producer_epoch) == (pid, epoch + 1)
    assert (r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (pid, epoch)
    v = s.state()
    assert v.state == S.ONGOING and v.partitions == (("out", 0), ("out", 2)) and not s.sent
    # the old instance is fenced; a retry of the keep names the same prepared identity
    assert s.end("t", pid, epoch, commit=False).error_code == E.PRODUCER_FENCED
    again = s.init("t", enable_two_phase=True, keep_prepared=True)
    assert (again.ongoing_txn_producer_id, again.ongoing_txn_producer_epoch) == (pid, epoch)
    # the new instance commits it
    e = s.end("t", pid, again.producer_epoch, commit=True)
    assert e.error_code == E.NONE
    assert {(m.request.partition, m.request.commit) for m in s.markers} == {(0, True), (2, True)}
    assert all(m.request.producer_epoch > epoch for m in s.markers)
    s.ack_markers()
    assert s.state().state == S.COMPLETE_COMMIT
    s.assert_replay_equal()


def test_keep_prepared_without_an_ongoing_transaction_is_a_plain_init():
    s = Shell()
    s.init("t", enable_two_phase=True)
    r = s.init("t", enable_two_phase=True, keep_prepared=True)
    assert r.error_code == E.NONE and (r.ongoing_txn_producer_id, r.ongoing_txn_producer_epoch) == (-1, -1)


def test_keep_prepared_does_not_keep_a_transaction_that_was_not_two_phase():
    s = Shell()
    began(s)
    assert s.init("t", enable_two_phase=True, keep_prepared=True).error_code == E.CONCURRENT_TRANSACTIONS
    assert s.state().state == S.COMPLETE_ABORT


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_, code",
    [
        (TxnInitProducerIdRequest("t", 0), E.INVALID_TRANSACTION_TIMEOUT),
        (TxnInitProducerIdRequest("t", -5), E.INVALID_TRANSACTION_TIMEOUT),
        (TxnInitProducerIdRequest("t", FAST.transaction_max_timeout_ms + 1), E.INVALID_TRANSACTION_TIMEOUT),
        (TxnInitProducerIdRequest("t", TIMEOUT, producer_id=5), E.INVALID_REQUEST),
        (TxnInitProducerIdRequest("t", TIMEOUT, producer_epoch=5), E.INVALID_REQUEST),
        (TxnInitProducerIdRequest("t", TIMEOUT, 5, MAX_PRODUCER_EPOCH + 1), E.INVALID_REQUEST),
        (TxnInitProducerIdRequest("t", TIMEOUT, keep_prepared=True), E.INVALID_REQUEST),
        (TxnInitProducerIdRequest("", TIMEOUT), E.INVALID_REQUEST),
    ],
)
def test_bad_requests_are_refused_with_kafkas_code_and_change_nothing(request_, code):
    s = Shell()
    r = s.ask(request_)
    assert r.error_code == code and r.error_message and (r.producer_id, r.producer_epoch) == (-1, -1)
    assert s.core.snapshot() == {} and not s.log


def test_the_largest_timeout_is_accepted():
    s = Shell()
    assert s.init("t", timeout_ms=FAST.transaction_max_timeout_ms).error_code == E.NONE


def test_an_id_of_another_coordinator_is_not_coordinator():
    s = Shell(partition=0, num_partitions=4)
    theirs = next(f"id-{i}" for i in range(100) if coordinator_for(f"id-{i}", 4) != 0)
    r = s.init(theirs)
    assert r.error_code == E.NOT_COORDINATOR and "belongs to coordinator" in r.error_message
