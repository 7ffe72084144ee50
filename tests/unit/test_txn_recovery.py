"""KIP-360 recovery end to end without Ray: kcoord's transactional client state machine
(TransactionManager) talking to the real transaction coordinator core (the txn_harness
shell). What each side does alone is tested in test_transaction_manager.py and
test_txn_init.py / test_txn_expiry.py; here they must agree: a producer whose transactional
id expired, or whose batches lost their sequence state, aborts and carries on under an
identity the coordinator granted, and an older instance stays fenced."""

from __future__ import annotations

import pytest
from txn_harness import FAST, Shell

import kcoord
from kcoord.client.producer.transaction_manager import TransactionManager, TransactionState, Verdict
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.errors import KafkaError
from kcoord.protocol.txn import EndTxnRequest, TxnInitProducerIdRequest
from kcoord.txn.state import TransactionState as TS

S = TransactionState
TP = TopicPartition("out", 0)
EXPIRY = FAST.transactional_id_expiration_ms


def _init(s: Shell, m: TransactionManager) -> None:
    assert m.on_init(s.ask(m.init_request())) is Verdict.DONE


def _send(s: Shell, m: TransactionManager, tp: TopicPartition = TP) -> None:
    m.check_append()
    m.register(tp)
    request = m.add_partitions_request()
    if request is not None:
        m.on_add_partitions(s.ask(request))


def _end(s: Shell, m: TransactionManager, commit: bool) -> None:
    if commit:
        m.begin_commit()
    else:
        m.begin_abort()
    request = m.end_request(commit)
    if request is None:
        m.complete()
        return
    if isinstance(request, EndTxnRequest):
        assert m.on_end(s.ask(request)) is Verdict.DONE
        request = m.recovery_request()
    if request is not None:
        assert isinstance(request, TxnInitProducerIdRequest)
        assert m.on_recovered(s.ask(request)) is Verdict.DONE


def test_a_producer_whose_transactional_id_expired_recovers_under_a_new_producer_id():
    s = Shell()
    m = TransactionManager("t", 10_000)
    _init(s, m)
    m.begin_transaction()
    _send(s, m)
    _end(s, m, commit=True)
    old = m.identity
    s.advance(EXPIRY + 1)  # idle past transactional.id.expiration.ms: tombstoned
    assert s.core.transaction("t") is None
    m.begin_transaction()
    with pytest.raises(kcoord.InvalidProducerIdMappingError):
        _send(s, m)
    assert m.state is S.ABORTABLE_ERROR
    _end(s, m, commit=False)  # InitProducerId(old id, old epoch): the coordinator starts over
    assert m.state is S.READY and m.identity[0] != old[0] and m.identity[1] == 0
    assert (s.state().producer_id, s.state().producer_epoch) == m.identity
    m.begin_transaction()
    _send(s, m)
    _end(s, m, commit=True)
    assert s.state().state == TS.COMPLETE_COMMIT
    s.assert_replay_equal()


@pytest.mark.parametrize("code", [E.OUT_OF_ORDER_SEQUENCE_NUMBER, E.UNKNOWN_PRODUCER_ID, E.REQUEST_TIMED_OUT])
def test_lost_sequence_state_is_recovered_by_the_aborts_epoch_bump_and_the_markers_carry_it(code):
    s = Shell(auto_markers=False)
    m = TransactionManager("t", 10_000)
    _init(s, m)
    pid, epoch = m.identity
    m.begin_transaction()
    _send(s, m)
    m.on_batch_failed(KafkaError(code, "lost"))
    m.begin_abort()
    end = m.end_request(False)
    assert isinstance(end, EndTxnRequest) and end.bump_epoch
    assert m.on_end(s.ask(end)) is Verdict.DONE
    assert m.identity == (pid, epoch + 1) == (s.state().producer_id, s.state().producer_epoch)
    assert {(mk.request.producer_epoch, mk.request.commit) for mk in s.markers} == {(epoch + 1, False)}
    s.ack_markers()
    # the old epoch is fenced at the coordinator; the producer carries on at the new one
    assert s.add("t", pid, epoch).error_code == E.PRODUCER_FENCED
    m.begin_transaction()
    _send(s, m)
    _end(s, m, commit=True)
    s.ack_markers()
    assert m.identity == (pid, epoch + 2)
    s.assert_replay_equal()


def test_a_recovery_after_another_instance_took_over_is_fenced():
    s = Shell()
    m = TransactionManager("t", 10_000)
    _init(s, m)
    s.advance(EXPIRY + 1)
    newer = s.init("t")  # another instance starts over after the expiry
    m.begin_transaction()
    with pytest.raises(kcoord.InvalidProducerIdMappingError):
        _send(s, m)
    m.begin_abort()
    request = m.end_request(False)
    with pytest.raises(kcoord.ProducerFencedError):
        m.on_recovered(s.ask(request))
    assert m.state is S.FATAL_ERROR
    assert (s.state().producer_id, s.state().producer_epoch) == (newer.producer_id, newer.producer_epoch)
