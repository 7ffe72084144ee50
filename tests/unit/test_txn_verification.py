"""KIP-890 part 1 on the partition leader (docs/transactions.md section 1, "Verification"): a
transactional batch that would start a transaction is appended only after its transaction
coordinator said the partition is in the producer's ongoing transaction, and only with the
verification guard taken before asking -- which a marker or another epoch drops, so a late
write of an ended transaction can never open a transaction no marker will end."""

from __future__ import annotations

import pytest
from replication_helpers import TOPIC, call, lai, leader_and_isr, make_replica, of_type, replies

from kcoord import records as R
from kcoord.log.producer_state import NO_GUARD, ProducerStateManager
from kcoord.protocol.errors import ErrorCode as E
from kcoord.record.control import read_control
from kcoord.protocol.replication import READ_COMMITTED, FetchRequest, ProduceRequest
from kcoord.protocol.txn import AddPartitionsToTxnResponse, WriteTxnMarkerRequest
from kcoord.replication.actions import VerifyTxn
from kcoord.replication.config import ReplicationConfig

T = 1000
PID = 7
TID = "tx-7"


def leader(**config):
    r = make_replica(0, ReplicationConfig(min_insync_replicas=1, **config))
    resp, _ = leader_and_isr(r, lai(0, 1, (0,), replicas=(0,)), 0)
    assert resp.error_code == 0
    return r


def txn(seq, n=1, epoch=0, pid=PID):
    return R.build_batch([(b"k", b"%d-%d" % (pid, seq + i)) for i in range(n)], producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=T, transactional=True)


def send(r, data, tid=TID, now=0):
    """Produce ``data``: (the immediate answer or None, the VerifyTxn asked for or None)."""
    resp, actions = call(r, ProduceRequest(TOPIC, 0, data, acks=1, transactional_id=tid), now)
    verifies = of_type(actions, VerifyTxn)
    assert len(verifies) <= 1
    return resp, (verifies[0] if verifies else None)


def answer(r, verify, code=E.NONE, now=0):
    """The coordinator's answer to ``verify`` (None: no answer); the produce's reply."""
    response = None if code is None else AddPartitionsToTxnResponse(results={TOPIC: {0: code}})
    got = list(replies(r.on_txn_verified(verify.verify_id, response, now)).values())
    assert len(got) == 1, got
    return got[0]


def marker(r, commit=False, epoch=0, pid=PID):
    resp, _ = call(r, WriteTxnMarkerRequest(pid, epoch, 0, commit, TOPIC, 0))
    assert resp.error_code == 0, resp
    return resp


def lso(r):
    resp, _ = call(r, FetchRequest(TOPIC, 0, 0, max_wait_ms=0, isolation_level=READ_COMMITTED))
    return resp.last_stable_offset


def test_the_first_batch_is_verified_then_appended_and_the_next_ones_go_straight_in():
    r = leader()
    resp, verify = send(r, txn(0))
    assert resp is None and verify is not None, "nothing lands before the coordinator answers"
    assert verify.request.verify_only and verify.request.transactional_id == TID
    assert (verify.request.producer_id, verify.request.producer_epoch, verify.request.topics) == (PID, 0, {TOPIC: [0]})
    assert r.log.log_end_offset == 0
    assert answer(r, verify).error_code == 0
    assert r.log.log_end_offset == 1 and r.log.producer_state.ongoing_transactions() == {PID: 0}
    resp, verify = send(r, txn(1))
    assert verify is None and resp.error_code == 0, "its transaction is ongoing here: no check"
    marker(r, commit=True)
    assert lso(r) == r.log.log_end_offset


def test_a_late_write_after_the_marker_is_refused_and_the_lso_does_not_hang():
    """The hang KIP-890 closes: a retried or zombie write of a transaction that ended here."""
    r = leader()
    _, verify = send(r, txn(0))
    answer(r, verify)
    marker(r, commit=False)  # the coordinator aborted it (a timeout, say)
    end = r.log.log_end_offset
    resp, verify = send(r, txn(1))  # the same epoch, the next sequence: a late write
    assert resp is None and verify is not None
    refused = answer(r, verify, E.TRANSACTION_ABORTABLE)  # the coordinator: not in a transaction
    assert refused.error_code == E.INVALID_TXN_STATE, refused
    assert r.log.log_end_offset == end and r.log.producer_state.ongoing_transactions() == {}
    assert lso(r) == end


def test_without_verification_the_late_write_opens_a_transaction_no_marker_ends():
    """What the test above guards against, shown with verification off (kcoord before
    KIP-890 at the leader, Kafka before 3.6): the LSO is pinned at the late write for good."""
    r = leader(transaction_partition_verification=False)
    send(r, txn(0))
    marker(r, commit=False)
    late = r.log.log_end_offset
    resp, verify = send(r, txn(1))
    assert verify is None and resp.error_code == 0
    assert r.log.producer_state.ongoing_transactions() == {PID: late}
    r.handle(ProduceRequest(TOPIC, 0, R.build_batch([(b"k", b"later")], timestamp_ms=T), acks=1), "p", 0)
    assert lso(r) == late < r.log.log_end_offset


def test_a_write_whose_check_passed_before_the_marker_landed_is_refused():
    """The race the listener's pre-check left open: verified, then the marker, then the
    append. The guard taken before asking is gone, so the append is refused."""
    r = leader()
    _, first = send(r, txn(0))
    answer(r, first)
    marker(r, commit=True)
    _, verify = send(r, txn(1))
    marker(r, commit=False)  # lands while the coordinator's (stale) yes is on its way
    refused = answer(r, verify, E.NONE)
    assert refused.error_code == E.INVALID_TXN_STATE and "ended" in refused.error_message
    assert r.log.producer_state.ongoing_transactions() == {}
    assert lso(r) == r.log.log_end_offset


def test_concurrent_first_batches_share_the_guard_and_only_one_starts_the_transaction():
    r = leader()
    _, a = send(r, txn(0))
    _, b = send(r, txn(0))  # the client's retry while the first check is out
    assert r.log.producer_state.verification_guard(PID) is not None
    assert answer(r, a).error_code == 0
    dup = answer(r, b)
    assert dup.error_code == 0 and dup.duplicate and dup.base_offset == 0
    assert r.log.producer_state.verification_guard(PID) is None, "the first write dropped it"
    assert r.log.log_end_offset == 1


def test_a_batch_at_another_epoch_needs_its_own_check_and_fences_the_older_guard():
    r = leader()
    _, old = send(r, txn(0, epoch=0))
    _, new = send(r, txn(0, epoch=1))  # a new instance (or KIP-890 part 2's next transaction)
    assert old.request.producer_epoch == 0 and new.request.producer_epoch == 1
    assert answer(r, old).error_code == E.INVALID_TXN_STATE, "its guard was replaced by epoch 1's"
    assert answer(r, new).error_code == 0
    assert r.log.producer_state.get(PID).epoch == 1


def test_an_ongoing_transaction_at_an_older_epoch_does_not_let_a_newer_epoch_in_unchecked():
    r = leader()
    _, v = send(r, txn(0, epoch=0))
    answer(r, v)
    resp, verify = send(r, txn(0, epoch=1))
    assert resp is None and verify is not None and verify.request.producer_epoch == 1
    assert answer(r, verify, E.PRODUCER_FENCED).error_code == E.INVALID_PRODUCER_EPOCH


@pytest.mark.parametrize(
    "code, expected",
    [
        (E.CONCURRENT_TRANSACTIONS, E.NOT_ENOUGH_REPLICAS),
        (E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_ENOUGH_REPLICAS),
        (E.NOT_COORDINATOR, E.NOT_ENOUGH_REPLICAS),
        (E.COORDINATOR_NOT_AVAILABLE, E.NOT_ENOUGH_REPLICAS),
        (None, E.NOT_ENOUGH_REPLICAS),  # no answer
        (E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH),
        (E.TRANSACTION_ABORTABLE, E.INVALID_TXN_STATE),
        (E.INVALID_PRODUCER_ID_MAPPING, E.INVALID_PRODUCER_ID_MAPPING),
    ],
)
def test_the_coordinators_answers_become_kafkas_produce_errors(code, expected):
    r = leader()
    _, verify = send(r, txn(0))
    assert answer(r, verify, code).error_code == expected
    assert r.log.log_end_offset == 0
    # a retriable refusal leaves nothing behind: the retry is checked again and lands
    _, again = send(r, txn(0))
    assert again is not None and answer(r, again).error_code == 0


def test_without_a_transactional_id_a_transaction_cannot_start():
    r = leader()
    resp, verify = send(r, txn(0), tid=None)
    assert verify is None and resp.error_code == E.INVALID_TXN_STATE and "transactional_id" in resp.error_message
    assert r.log.log_end_offset == 0


def test_duplicates_and_stale_epochs_are_answered_without_asking_the_coordinator():
    r = leader()
    _, v = send(r, txn(0, epoch=1))
    answer(r, v)
    marker(r, commit=True, epoch=1)
    resp, verify = send(r, txn(0, epoch=1))  # the first batch again, after its marker
    assert verify is None and resp.error_code == 0 and resp.duplicate
    resp, verify = send(r, txn(5, epoch=0))
    assert verify is None and resp.error_code == E.INVALID_PRODUCER_EPOCH


def test_non_transactional_and_idempotent_batches_are_never_checked():
    r = leader()
    for data in (R.build_batch([(b"k", b"plain")], timestamp_ms=T), R.build_batch([(b"k", b"i")], producer_id=9, producer_epoch=0, base_sequence=0, timestamp_ms=T)):
        resp, verify = send(r, data, tid=None)
        assert verify is None and resp.error_code == 0
    assert r.log.producer_state.verification_guard(9) is None


def test_a_leader_that_steps_down_answers_its_checks_and_ignores_their_late_answers():
    r = leader()
    _, verify = send(r, txn(0))
    _, actions = leader_and_isr(r, lai(1, 2, (0, 1)), 0)  # broker 1 leads now
    failed = [a.response for a in actions if getattr(getattr(a, "response", None), "error_code", 0) == E.NOT_LEADER_OR_FOLLOWER]
    assert failed, "the produce waiting for its check was answered"
    assert replies(r.on_txn_verified(verify.verify_id, AddPartitionsToTxnResponse(results={TOPIC: {0: 0}}), 0)) == {}
    assert r.log.log_end_offset == 0


def test_a_batch_parked_behind_a_check_follows_once_the_first_lands():
    r = leader()
    _, verify = send(r, txn(0))
    resp, v2 = send(r, txn(1))  # pipelined: ahead of the one being checked, so it waits
    assert resp is None and v2 is None
    actions = r.on_txn_verified(verify.verify_id, AddPartitionsToTxnResponse(results={TOPIC: {0: 0}}), 0)
    assert [a.response.error_code for a in actions if hasattr(a, "response")] == [0, 0]
    assert r.log.log_end_offset == 2


def test_verification_off_appends_as_before():
    r = leader(transaction_partition_verification=False)
    resp, verify = send(r, txn(0), tid=None)
    assert verify is None and resp.error_code == 0


# -- the producer state's rule, alone ---------------------------------------------------------


def header(data, base_offset=0):
    return R.read_header(data)._replace(base_offset=base_offset)


def test_the_guard_survives_nothing_it_should_not():
    ps = ProducerStateManager()
    h = header(txn(0))
    assert ps.needs_verification(h)
    g = ps.start_verification(PID, 0)
    assert ps.start_verification(PID, 0) is g, "shared by concurrent checks"
    assert ps.check(h, g).ok and not ps.check(h, NO_GUARD).ok and ps.check(h, None).ok
    # another producer's marker or data leaves it; a plain batch of this producer too
    ps.update(header(txn(0, pid=8)))
    ps.update(header(R.build_batch([(b"k", b"v")], producer_id=PID, producer_epoch=0, base_sequence=0, timestamp_ms=T)))
    assert ps.verification_guard(PID) is g
    # a replay of the log (a rebuild) is no news about the transaction
    ps.rebuild([header(txn(0), 0)], read_control=lambda h: None)
    assert ps.verification_guard(PID) is g
    # a marker drops it
    ps.clear()
    g = ps.start_verification(PID, 0)
    abort = R.build_control_batch(commit=False, producer_id=PID, producer_epoch=0, coordinator_epoch=0, timestamp_ms=T, magic=1)
    ps.update(header(abort), read_control(abort))
    assert ps.verification_guard(PID) is None and not ps.check(h, g).ok
    # another epoch replaces it
    g0 = ps.start_verification(PID, 0)
    g1 = ps.start_verification(PID, 1)
    assert g1 is not g0 and not ps.check(h, g0).ok
