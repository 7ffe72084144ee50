"""Time: transactions that outlive their timeout are aborted at a bumped epoch (the zombie is
fenced), two-phase ones are not; idle ids expire to a tombstone; the coordinator's own writes
that fail are tried again after a backoff; next_deadline says when."""

from __future__ import annotations

from txn_harness import FAST, T0, TIMEOUT, Shell, began

from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.txn import AddPartitionsToTxnRequest
from kcoord.txn.records import decode_record
from kcoord.txn.state import TransactionState

S = TransactionState
EXPIRY = FAST.transactional_id_expiration_ms


def test_a_transaction_past_its_timeout_is_aborted_at_a_bumped_epoch_fencing_the_zombie():
    s = Shell(auto_markers=False)
    pid, epoch = began(s, topics={"out": [0]})
    start = s.state().start_ms
    assert s.core.next_deadline(s.now) == start + TIMEOUT + 1
    s.advance(TIMEOUT)  # start + timeout is not yet older than the timeout (Kafka's strict test)
    assert s.state().state == S.ONGOING
    s.advance(1)
    v = s.state()
    assert v.state == S.PREPARE_ABORT and v.producer_epoch == epoch + 1 and v.last_producer_epoch == -1
    (m,) = s.markers
    assert not m.request.commit and m.request.producer_epoch == epoch + 1
    s.ack_markers()
    assert s.state().state == S.COMPLETE_ABORT
    # the stalled producer wakes up: fenced everywhere
    assert s.add("t", pid, epoch, {"out": [1]}).error_code == E.PRODUCER_FENCED
    assert s.end("t", pid, epoch, commit=True).error_code == E.PRODUCER_FENCED
    assert s.core.stats.timed_out_transactions == 1 and s.core.stats.transactions_aborted == 1
    s.assert_replay_equal()


def test_the_timeout_counts_from_the_start_not_the_last_add():
    s = Shell()
    pid, epoch = began(s, topics={"out": [0]})
    s.advance(TIMEOUT - 10)
    assert s.add("t", pid, epoch, {"out": [1]}).error_code == E.NONE
    s.advance(11)
    assert s.state().state == S.COMPLETE_ABORT


def test_a_transaction_ended_in_time_is_not_aborted():
    s = Shell()
    pid, epoch = began(s)
    s.advance(TIMEOUT - 1)
    assert s.end("t", pid, epoch).error_code == E.NONE
    s.advance(10 * TIMEOUT)
    assert s.state().state == S.COMPLETE_COMMIT and s.core.stats.timed_out_transactions == 0


def test_two_phase_transactions_have_no_timeout():
    s = Shell()
    pid, epoch = began(s, enable_two_phase=True)
    s.advance(EXPIRY * 2)
    assert s.state().state == S.ONGOING
    assert s.core.next_deadline(s.now) is None


def test_a_timeout_during_a_transition_in_flight_looks_again_later():
    s = Shell()
    pid, epoch = began(s, topics={"out": [0]})
    s.advance(TIMEOUT)
    s.auto_persist = False
    token = s.request(AddPartitionsToTxnRequest("t", pid, epoch, {"out": [1]}))
    s.advance(1)  # due now, but the add is in flight
    assert len(s.appends) == 1 and s.state().state == S.ONGOING
    s.complete(n=1)
    assert s.reply(token).error_code == E.NONE
    # once the add is in, the overdue transaction is aborted at once
    (abort,) = s.appends
    assert decode_record(*abort.records[0])[1].state == S.PREPARE_ABORT
    s.complete()
    s.complete()
    assert s.state().state == S.COMPLETE_ABORT and s.state().partitions == ()


def test_a_timed_out_abort_that_fails_to_persist_is_tried_again():
    s = Shell()
    pid, epoch = began(s)
    s.auto_persist = False
    s.advance(TIMEOUT + 1)
    s.complete(error=E.NOT_ENOUGH_REPLICAS)
    assert s.state().state == S.ONGOING and s.state().producer_epoch == epoch
    s.advance(FAST.append_retry_backoff_ms - 1)
    assert not s.appends
    s.advance(1)
    s.complete()
    v = s.state()
    assert v.state == S.PREPARE_ABORT and v.producer_epoch == epoch + 1  # bumped once, not twice
    s.complete()
    assert s.state().state == S.COMPLETE_ABORT
    s.assert_replay_equal()


# -- transactional id expiration -------------------------------------------------------------


def test_an_idle_id_expires_to_a_tombstone_and_starts_over_with_a_new_producer_id():
    s = Shell()
    r = s.init("t")
    s.advance(EXPIRY - 1)
    assert s.state() is not None
    s.advance(1)
    assert s.core.transaction("t") is None and s.core.stats.expired_ids == 1
    k, v = decode_record(*s.log[-1])
    assert k.transactional_id == "t" and v is None
    s.assert_replay_equal()
    again = s.init("t")
    assert again.producer_id != r.producer_id and again.producer_epoch == 0
    # the old instance is refused
    assert s.add("t", r.producer_id, r.producer_epoch).error_code == E.INVALID_PRODUCER_ID_MAPPING


def test_activity_postpones_expiry_and_ongoing_or_deciding_ids_never_expire():
    s = Shell(auto_markers=False)
    s.init("t", enable_two_phase=True)
    s.advance(EXPIRY // 2)
    r = s.init("t", enable_two_phase=True)
    s.advance(EXPIRY // 2 + 1)
    assert s.state() is not None  # the second init counts from its own time
    assert s.add("t", r.producer_id, r.producer_epoch).error_code == E.NONE
    s.advance(3 * EXPIRY)
    assert s.state().state == S.ONGOING  # two-phase: no timeout, and ongoing: no expiry
    s.end("t", r.producer_id, r.producer_epoch)
    s.advance(3 * EXPIRY)
    assert s.state().state == S.PREPARE_COMMIT  # markers not written: never expires
    s.ack_markers()
    s.advance(EXPIRY)
    assert s.core.transaction("t") is None


def test_requests_during_the_tombstone_append_wait_and_a_failed_tombstone_is_retried():
    s = Shell()
    r = s.init("t")
    s.auto_persist = False
    s.advance(EXPIRY)
    assert s.core.transaction("t").pending == S.DEAD
    assert s.init("t").error_code == E.CONCURRENT_TRANSACTIONS
    assert s.add("t", r.producer_id, r.producer_epoch).error_code == E.CONCURRENT_TRANSACTIONS
    s.complete(error=E.REQUEST_TIMED_OUT)
    assert s.state() is not None and s.core.transaction("t").pending is None
    s.advance(FAST.append_retry_backoff_ms)
    s.complete()
    assert s.core.transaction("t") is None
    s.assert_replay_equal()


def test_next_deadline_is_the_earliest_timer():
    s = Shell()
    assert s.core.next_deadline(s.now) is None
    s.init("a")
    assert s.core.next_deadline(s.now) == T0 + EXPIRY
    s.now += 5
    began(s, "b")
    assert s.core.next_deadline(s.now) == T0 + 5 + TIMEOUT + 1
