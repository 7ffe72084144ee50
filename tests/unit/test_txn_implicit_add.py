"""KIP-890 part 2's implicit AddPartitionsToTxn (docs/transactions.md, "Verification"):
kcoord's producer sends no AddPartitionsToTxn for produce partitions; its batches carry
``implicit_add`` and the partition leader's call to the coordinator *adds* the partition
(``implicit``), with every check of a producer's own add. The leader keeps KIP-890 part 1's
guard; a marker landing between its ask and the answer makes it ask again. A late write of an
ended transaction, at the epoch the EndTxn bumped past, is fenced."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from replication_helpers import TOPIC, call, lai, leader_and_isr, make_replica, of_type, replies
from txn_harness import FAST, Shell

from kcoord import records as R
from kcoord.client.errors import TransactionAbortedError
from kcoord.client.producer.transaction_manager import TransactionManager, TransactionState, Verdict
from kcoord.client.producer.transactions import Transactions
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.replication import ProduceRequest
from kcoord.protocol.txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnInitProducerIdResponse,
    WriteTxnMarkerRequest,
)
from kcoord.replication.actions import VerifyTxn
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.leader import txn_verification

PID = 7
TID = "tx-7"
HOLD = 1_000
CONFIG = replace(FAST, concurrent_transactions_hold_ms=HOLD)


# -- the coordinator ---------------------------------------------------------------------------


def implicit(pid: int, epoch: int, topics: dict[str, list[int]], tid: str = "t") -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(tid, pid, epoch, topics, implicit=True)


def test_an_implicit_add_starts_the_transaction_as_the_producers_own_add_would():
    s = Shell(CONFIG)
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    assert s.state().state.value == "Empty"
    assert s.ask(implicit(pid, epoch, {"out": [0]})).error_code == E.NONE
    v = s.state()
    assert v.state.value == "Ongoing" and v.producer_epoch == epoch and len(v.partitions) == 1
    assert s.ask(implicit(pid, epoch, {"out": [1]})).error_code == E.NONE
    assert len(s.state().partitions) == 2 and s.core.stats.implicit_adds == 2
    s.assert_replay_equal()


def test_an_implicit_add_waits_for_the_previous_transactions_markers_then_adds():
    s = Shell(CONFIG, auto_markers=False)
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    assert s.ask(implicit(pid, epoch, {"out": [0]})).error_code == E.NONE
    end = s.end("t", pid, epoch, commit=True)
    assert end.error_code == E.NONE and end.producer_epoch == epoch + 1
    token = s.request(implicit(pid, end.producer_epoch, {"out": [0]}))
    assert s.reply(token) is None, "held while the previous transaction completes"
    s.ack_markers()
    assert s.reply(token).error_code == E.NONE
    v = s.state()
    assert v.state.value == "Ongoing" and v.producer_epoch == epoch + 1


def test_a_late_implicit_add_at_the_epoch_of_an_ended_transaction_is_fenced():
    """The rule that makes implicit adds safe: EndTxn bumps the epoch, so a write of
    transaction N arriving after N ended cannot be added to N+1 (nor start a transaction)."""
    s = Shell(CONFIG)
    r = s.init("t")
    pid, epoch = r.producer_id, r.producer_epoch
    assert s.ask(implicit(pid, epoch, {"out": [0]})).error_code == E.NONE
    assert s.end("t", pid, epoch, commit=False).error_code == E.NONE
    assert s.state().state.value == "CompleteAbort"
    late = s.ask(implicit(pid, epoch, {"out": [0]}))
    assert late.error_code == E.PRODUCER_FENCED
    assert s.state().state.value == "CompleteAbort" and s.state().partitions == ()


def test_implicit_and_verify_only_together_are_an_invalid_request():
    s = Shell(CONFIG)
    r = s.init("t")
    req = replace(implicit(r.producer_id, r.producer_epoch, {"out": [0]}), verify_only=True)
    assert s.ask(req).error_code == E.INVALID_REQUEST
    assert s.state().state.value == "Empty"


# -- the partition leader ----------------------------------------------------------------------


def leader():
    r = make_replica(0, ReplicationConfig(min_insync_replicas=1))
    resp, _ = leader_and_isr(r, lai(0, 1, (0,), replicas=(0,)), 0)
    assert resp.error_code == 0
    return r


def txn(seq, epoch=0, pid=PID):
    return R.build_batch([(b"k", b"%d-%d" % (epoch, seq))], producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp_ms=1000, transactional=True)


def send(r, data, implicit_add=True):
    resp, actions = call(r, ProduceRequest(TOPIC, 0, data, acks=1, transactional_id=TID, implicit_add=implicit_add), 0)
    verifies = of_type(actions, VerifyTxn)
    assert len(verifies) <= 1
    return resp, (verifies[0] if verifies else None)


def answer(r, verify, code=E.NONE):
    """The coordinator's answer (a code, or its response); (the produce's reply or None, the
    next VerifyTxn or None)."""
    response = code if isinstance(code, AddPartitionsToTxnResponse) else AddPartitionsToTxnResponse(results={TOPIC: {0: code}})
    actions = r.on_txn_verified(verify.verify_id, response, 0)
    got = list(replies(actions).values())
    verifies = of_type(actions, VerifyTxn)
    return (got[0] if got else None), (verifies[0] if verifies else None)


def marker(r, epoch, commit=True):
    resp, _ = call(r, WriteTxnMarkerRequest(PID, epoch, 0, commit, TOPIC, 0))
    assert resp.error_code == 0, resp


def test_an_implicit_add_produce_asks_the_coordinator_to_add_then_appends():
    r = leader()
    resp, verify = send(r, txn(0))
    assert resp is None and verify is not None
    req = verify.request
    assert req.implicit and not req.verify_only and (req.transactional_id, req.producer_id, req.producer_epoch, req.topics) == (TID, PID, 0, {TOPIC: [0]})
    got, again = answer(r, verify)
    assert again is None and got.error_code == 0
    assert r.log.log_end_offset == 1 and r.log.producer_state.ongoing_transactions() == {PID: 0}  # from offset 0
    assert r.metrics["txn_implicit_adds"] == 1


def test_an_implicit_add_is_made_with_verification_turned_off():
    # the producer sends no AddPartitionsToTxn of its own: without the leader's add the
    # coordinator would never know the partition (its marker never written, the LSO stuck)
    r = make_replica(0, ReplicationConfig(min_insync_replicas=1, transaction_partition_verification=False))
    assert leader_and_isr(r, lai(0, 1, (0,), replicas=(0,)), 0)[0].error_code == 0
    resp, verify = send(r, txn(0))
    assert resp is None and verify is not None and verify.request.implicit
    assert answer(r, verify)[0].error_code == 0 and r.log.log_end_offset == 1
    _, verify = send(r, txn(0, pid=PID + 1), implicit_add=False)  # a wire producer: appended unasked
    assert verify is None and r.log.log_end_offset == 2


def test_a_wire_produce_still_only_verifies():
    r = leader()
    _, verify = send(r, txn(0), implicit_add=False)
    assert verify.request.verify_only and not verify.request.implicit


def test_the_previous_transactions_marker_between_the_add_and_its_answer_makes_the_leader_ask_again():
    """Transaction N (epoch 0) is ongoing here; its commit bumped the epoch to 1 and N+1's
    first batch arrives before N's marker (at epoch 1). The coordinator answers the add once
    N completed, so the marker always lands first and drops the guard: the leader asks again
    (a verification now) with a fresh guard instead of refusing the batch."""
    r = leader()
    _, verify = send(r, txn(0, epoch=0))
    assert answer(r, verify)[0].error_code == 0
    resp, verify = send(r, txn(0, epoch=1))
    assert resp is None and verify.request.implicit
    marker(r, epoch=1)  # N's commit marker, at the bumped epoch
    got, again = answer(r, verify)
    assert got is None and again is not None, "asked again, not refused"
    assert again.request.verify_only and not again.request.implicit and again.request.producer_epoch == 1
    got, _ = answer(r, again)
    assert got.error_code == 0 and got.base_offset == 2  # after N's batch and marker
    assert r.log.producer_state.ongoing_transactions() == {PID: 2}  # N+1, from offset 2


def test_a_late_write_of_an_ended_transaction_is_refused_end_to_end():
    """Leader and coordinator cores together. Transaction N writes partition 0 through an
    implicit add and is aborted (the epoch bumped); N's delayed batch to partition 1 then
    reaches a leader that never saw this producer (a fresh replica, standing for a partition N
    had not written yet): its implicit add is at the old epoch, the coordinator fences it, and
    nothing lands (no transaction without a marker)."""
    s = Shell(CONFIG, topics={TOPIC: 2})
    init = s.init(TID)
    pid, epoch = init.producer_id, init.producer_epoch
    p0, p1 = leader(), leader()
    _, verify = send(p0, txn(0, epoch, pid))
    assert verify.request.topics == {TOPIC: [0]}
    added = s.ask(verify.request)
    assert added.error_code == E.NONE and s.state(TID).state.value == "Ongoing"
    got, _ = answer(p0, verify, added)
    assert got.error_code == 0
    end = s.end(TID, pid, epoch, commit=False)
    assert end.error_code == E.NONE and end.producer_epoch == epoch + 1
    assert s.state(TID).state.value == "CompleteAbort"
    _, late = send(p1, txn(0, epoch, pid))  # N's batch, delayed
    refused = s.ask(late.request)
    assert refused.error_code == E.PRODUCER_FENCED
    got, again = answer(p1, late, refused)
    assert again is None and got.error_code == E.INVALID_PRODUCER_EPOCH
    assert p1.log.log_end_offset == 0 and p1.log.producer_state.ongoing_transactions() == {}
    assert s.state(TID).state.value == "CompleteAbort" and s.state(TID).partitions == ()


def test_an_add_whose_guard_keeps_being_dropped_is_answered_retriable():
    r = leader()
    _, verify = send(r, txn(0, epoch=0))
    assert answer(r, verify)[0].error_code == 0
    _, verify = send(r, txn(0, epoch=1))
    for epoch in range(1, txn_verification.MAX_ASKS + 1):
        # another verification at a newer epoch replaces the guard each round (a new instance)
        r.log.producer_state.start_verification(PID, epoch + 1)
        got, verify = answer(r, verify)
        if verify is None:
            break
    assert got is not None and got.error_code == E.NOT_ENOUGH_REPLICAS
    assert r.log.producer_state.ongoing_transactions() == {PID: 0}


# -- the client ---------------------------------------------------------------------------------


def client(implicit_adds=True) -> TransactionManager:
    m = TransactionManager("etl-1", 60_000, implicit_adds=implicit_adds)
    m.init_request()
    assert m.on_init(TxnInitProducerIdResponse(producer_id=7, producer_epoch=3)) is Verdict.DONE
    return m


def test_the_client_sends_no_add_partitions_and_its_commit_ends_what_the_leaders_added():
    m = client()
    m.begin_transaction()
    m.register(("out", 0))
    assert m.add_partitions_request(TopicPartition("out", 0)) is None, "nothing to add: the leader adds it"
    assert m.end_request(commit=False) is None, "nothing sent: the coordinator holds nothing"
    assert m.implicit_add(("out", 0)) and m.implicit_add(("out", 1))
    assert m.is_added(TopicPartition("out", 1)) and m.maybe_started and not m.started
    m.begin_commit()
    assert m.implicit_add(("out", 2)), "the commit's flush still sends"
    end = m.end_request(commit=True)
    assert isinstance(end, EndTxnRequest) and end.commit and end.bump_epoch and (end.producer_id, end.producer_epoch) == (7, 3)
    assert m.on_end(EndTxnResponse(producer_id=7, producer_epoch=4)) is Verdict.DONE
    assert m.state is TransactionState.READY and m.identity == (7, 4) and not m.partitions
    assert not m.implicit_add(("out", 0)), "outside a transaction"


def test_an_explicit_client_still_commits_nothing_it_did_not_add():
    m = client(implicit_adds=False)
    m.begin_transaction()
    m.begin_commit()
    assert m.end_request(commit=True) is None


def test_before_send_lets_a_batch_go_at_once_with_implicit_adds():
    m = client()
    m.begin_transaction()
    txns = Transactions.__new__(Transactions)  # before_send reads only the manager
    txns.manager = m
    assert asyncio.run(txns.before_send(TopicPartition("out", 0), 0.0)) is None
    assert m.maybe_started
    m.begin_abort()
    assert isinstance(asyncio.run(txns.before_send(TopicPartition("out", 1), 0.0)), TransactionAbortedError)


def test_a_producers_later_batches_wait_while_its_first_is_being_added():
    """The producer pipelines a transaction's batches; its first waits for the coordinator
    (held while the previous transaction's markers are written, possibly longer than the
    out-of-order wait): the later ones stay parked until it lands, then follow it."""
    r = leader()
    _, verify = send(r, txn(0))
    resp, again = send(r, txn(1))
    assert resp is None and again is None, "parked behind sequence 0"
    wait = ReplicationConfig().out_of_order_wait_ms
    for now in (wait, 2 * wait, 5 * wait):
        assert not replies(r.tick(now)), "no OUT_OF_ORDER_SEQUENCE_NUMBER while sequence 0 is being added"
    got, _ = answer(r, verify)
    assert got.error_code == 0
    assert r.log.log_end_offset == 2, "sequence 1 followed sequence 0"
