"""The transactional producer's state machine (kcoord.client.producer.transaction_manager),
without Ray: kafka-python's states and misuse errors, which answers are retried, which make
the transaction abortable and which end the producer, partitions batched into
AddPartitionsToTxn, the epoch bumped by every EndTxn, KIP-939's prepared transactions."""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest

import kcoord
from kcoord.client.cluster import ClusterClient
from kcoord.client.errors import IllegalStateError, TransactionAbortedError
from kcoord.client.producer import Producer
from kcoord.client.producer.transaction_manager import (
    PreparedTxnState,
    TransactionManager,
    TransactionState,
    Verdict,
    classify,
)
from kcoord.client.producer.transactions import Transactions, _group_metadata, _offsets_by_topic
from kcoord.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError, for_code
from kcoord.protocol.group import OffsetCommitPartition
from kcoord.protocol.txn import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnInitProducerIdRequest,
    TxnInitProducerIdResponse,
    TxnOffsetCommitResponse,
)

S = TransactionState
TP0, TP1, TP2 = TopicPartition("out", 0), TopicPartition("out", 1), TopicPartition("other", 0)


def ready(pid: int = 7, epoch: int = 0, **kw) -> TransactionManager:
    m = TransactionManager("etl-1", 60_000, **kw)
    request = m.init_request()
    assert request.transactional_id == "etl-1" and request.transaction_timeout_ms == 60_000
    assert m.on_init(TxnInitProducerIdResponse(producer_id=pid, producer_epoch=epoch)) is Verdict.DONE
    return m


def in_txn(*tps: TopicPartition, **kw) -> TransactionManager:
    m = ready(**kw)
    m.begin_transaction()
    for tp in tps:
        m.check_append()
        m.register(tp)
    return m


def added(*tps: TopicPartition, **kw) -> TransactionManager:
    m = in_txn(*tps, **kw)
    request = m.add_partitions_request()
    m.on_add_partitions(AddPartitionsToTxnResponse(results={t: {p: 0 for p in ps} for t, ps in request.topics.items()}))
    return m


# -- init ----------------------------------------------------------------------------------


def test_init_takes_the_coordinators_identity_and_a_second_init_does_nothing():
    m = ready(pid=42, epoch=3)
    assert m.state is S.READY and m.identity == (42, 3)
    assert m.init_request() is None  # kafka-python: retrying after a successful init does nothing


@pytest.mark.parametrize(
    "code",
    [ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE],
)
def test_coordinator_busy_answers_are_retried(code):
    assert classify(code) == "retriable"
    m = TransactionManager("etl-1", 60_000)
    m.init_request()
    assert m.on_init(TxnInitProducerIdResponse(error_code=code)) is Verdict.RETRY
    assert m.state is S.INITIALIZING
    assert m.init_request() is not None  # a call after a timeout asks again
    m = added(TP0)
    m.begin_commit()
    request = m.end_request(True)
    assert m.on_end(EndTxnResponse(error_code=code)) is Verdict.RETRY
    assert m.state is S.COMMITTING_TRANSACTION and m.end_request(True) == request  # the same request again


@pytest.mark.parametrize(
    "code, cls",
    [
        (ErrorCode.PRODUCER_FENCED, "ProducerFencedError"),
        (ErrorCode.INVALID_PRODUCER_EPOCH, "ProducerFencedError"),  # an old-version fence is a fence (Kafka)
        (ErrorCode.INVALID_TRANSACTION_TIMEOUT, "InvalidTransactionTimeoutError"),
        (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "TransactionalIdAuthorizationFailedError"),
    ],
)
def test_a_fatal_init_answer_ends_the_producer_and_every_call_raises_it(code, cls):
    m = TransactionManager("etl-1", 60_000)
    m.init_request()
    with pytest.raises(getattr(kcoord, cls)):
        m.on_init(TxnInitProducerIdResponse(error_code=code))
    assert m.state is S.FATAL_ERROR
    for call in (m.init_request, m.begin_transaction, m.check_append, m.begin_commit, m.begin_abort):
        with pytest.raises(getattr(kcoord, cls), match="failed earlier"):
            call()


# -- misuse --------------------------------------------------------------------------------


def test_misuse_raises_illegal_state_at_once():
    m = TransactionManager("etl-1", 60_000)
    for call in (m.begin_transaction, m.check_append, m.begin_commit, m.begin_abort):
        with pytest.raises(IllegalStateError, match="init_transactions|UNINITIALIZED"):
            call()
    m = ready()
    with pytest.raises(IllegalStateError, match="outside a transaction"):
        m.check_append()
    with pytest.raises(IllegalStateError, match="commit_transaction"):
        m.begin_commit()
    with pytest.raises(IllegalStateError, match="abort_transaction"):
        m.begin_abort()
    with pytest.raises(IllegalStateError, match="send_offsets_to_transaction"):
        m.add_offsets_request("g")
    m.begin_transaction()
    with pytest.raises(IllegalStateError, match="begin_transaction"):
        m.begin_transaction()
    assert m.state is S.IN_TRANSACTION and m.last_error is None  # misuse changes nothing
    err = IllegalStateError("x")
    assert isinstance(err, KafkaError) and err.code == ErrorCode.INVALID_TXN_STATE and not isinstance(err, kcoord.InvalidTxnStateError)
    assert type(pickle.loads(pickle.dumps(err))) is IllegalStateError


def test_a_commit_under_way_can_only_be_retried_not_aborted():
    m = added(TP0)
    m.begin_commit()
    with pytest.raises(IllegalStateError):
        m.begin_abort()
    with pytest.raises(IllegalStateError):
        m.check_append()
    m.begin_commit()  # a retry after a timeout
    assert m.state is S.COMMITTING_TRANSACTION


def test_bad_settings_are_refused_with_a_value_error_naming_them():
    with pytest.raises(ValueError, match="transactional_id"):
        TransactionManager("", 60_000)
    with pytest.raises(ValueError, match="transaction_timeout_ms"):
        TransactionManager("etl-1", 0)
    fake = object.__new__(ClusterClient)  # the settings are checked before the cluster is used
    with pytest.raises(ValueError, match="transactional_id='etl-1' with producer_id=5"):
        Producer(fake, transactional_id="etl-1", producer_id=5)
    with pytest.raises(ValueError, match="acks='all'"):
        Producer(fake, transactional_id="etl-1", acks=1)
    with pytest.raises(ValueError, match="enable_idempotence"):
        Producer(fake, transactional_id="etl-1", enable_idempotence=False)
    with pytest.raises(ValueError, match="enable_two_phase_commit needs a transactional_id"):
        Producer(fake, enable_two_phase_commit=True)


# -- partitions ----------------------------------------------------------------------------


def test_new_partitions_are_batched_into_one_add_partitions_request():
    m = in_txn(TP0, TP1, TP2, TP0)
    request = m.add_partitions_request()
    assert request.topics == {"other": [0], "out": [0, 1]} and (request.producer_id, request.producer_epoch) == (7, 0)
    assert m.add_partitions_request() is None  # nothing new meanwhile
    m.check_append()
    m.register(TP1)  # pending already: not registered again
    assert not m.new_partitions
    assert m.on_add_partitions(AddPartitionsToTxnResponse(results={"out": {0: 0, 1: 0}, "other": {0: 0}})) is Verdict.DONE
    assert m.partitions == {TP0, TP1, TP2} and m.started
    m.check_append()
    m.register(TP0)
    assert m.add_partitions_request() is None  # already in the transaction


def test_a_batch_drained_before_its_send_registered_the_partition_adds_it_all_the_same():
    m = in_txn()
    m.check_append()  # send() has queued the record; the sender drains it before register
    request = m.add_partitions_request(TP1)
    assert request.topics == {"out": [1]}
    m.register(TP1)  # pending: not registered twice
    assert not m.new_partitions
    m.on_add_partitions(AddPartitionsToTxnResponse(results={"out": {1: 0}}))
    m.begin_commit()  # batches still being flushed during the commit are added too
    assert m.add_partitions_request(TP0).topics == {"out": [0]}
    m = ready()
    assert m.add_partitions_request(TP0) is None  # never outside a transaction


def test_an_unknown_topic_is_retried_and_the_others_are_not_added_meanwhile():
    m = in_txn(TP0, TP2)
    m.add_partitions_request()
    answer = AddPartitionsToTxnResponse(results={"out": {0: ErrorCode.OPERATION_NOT_ATTEMPTED}, "other": {0: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}})
    assert m.on_add_partitions(answer) is Verdict.RETRY
    assert not m.partitions and m.pending_partitions == {TP0, TP2} and not m.started and m.maybe_started


def test_an_abortable_answer_allows_only_abort():
    m = in_txn(TP0)
    m.add_partitions_request()
    with pytest.raises(kcoord.TransactionAbortableError):
        m.on_add_partitions(AddPartitionsToTxnResponse(error_code=ErrorCode.TRANSACTION_ABORTABLE, results={"out": {0: 120}}))
    assert m.state is S.ABORTABLE_ERROR
    for call in (m.check_append, m.begin_commit, m.begin_transaction, lambda: m.add_offsets_request("g")):
        with pytest.raises(kcoord.TransactionAbortableError, match="abort_transaction"):
            call()
    m.begin_abort()
    request = m.end_request(False)  # something may have landed: EndTxn all the same
    assert request is not None and not request.commit and request.bump_epoch
    assert m.on_end(EndTxnResponse(producer_id=7, producer_epoch=1)) is Verdict.DONE
    assert m.state is S.READY and m.identity == (7, 1)
    m.begin_transaction()  # usable again


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TXN_STATE])
def test_fenced_or_in_a_state_the_coordinator_refuses_ends_the_producer(code):
    m = in_txn(TP0)
    m.add_partitions_request()
    with pytest.raises(KafkaError) as raised:
        m.on_add_partitions(AddPartitionsToTxnResponse(error_code=code, results={"out": {0: code}}))
    expected = ErrorCode.PRODUCER_FENCED if code == ErrorCode.INVALID_PRODUCER_EPOCH else code
    assert raised.value.code == expected and m.state is S.FATAL_ERROR
    with pytest.raises(type(raised.value)):
        m.begin_abort()


# -- batches -------------------------------------------------------------------------------


def test_a_failed_batch_makes_the_transaction_abortable_and_a_fenced_one_fatal():
    m = added(TP0)
    m.on_batch_failed(KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "x"))
    assert m.state is S.ABORTABLE_ERROR
    with pytest.raises(kcoord.NotEnoughReplicasError, match="abort_transaction"):
        m.begin_commit()
    m.begin_abort()
    m.on_batch_failed(KafkaError(ErrorCode.REQUEST_TIMED_OUT, "late"))  # while aborting: no change
    assert m.state is S.ABORTING_TRANSACTION
    m = added(TP0)
    m.on_batch_failed(KafkaError(ErrorCode.PRODUCER_FENCED, "newer instance"))
    assert m.state is S.FATAL_ERROR
    with pytest.raises(kcoord.ProducerFencedError):
        m.check_append()


def test_a_commit_that_finds_a_failed_batch_after_its_flush_raises_it():
    m = added(TP0)
    m.begin_commit()
    m.on_batch_failed(KafkaError(ErrorCode.MESSAGE_TOO_LARGE, "too big"))
    with pytest.raises(kcoord.MessageSizeTooLargeError):
        m.end_request(True)
    assert m.state is S.ABORTABLE_ERROR


# -- ending --------------------------------------------------------------------------------


def test_every_transaction_ends_with_a_bumped_epoch_from_the_coordinator():
    m = ready(pid=7, epoch=0)
    for n in range(1, 4):
        m.begin_transaction()
        m.check_append()
        m.register(TP0)
        request = m.add_partitions_request()
        assert (request.producer_id, request.producer_epoch) == (7, n - 1)
        m.on_add_partitions(AddPartitionsToTxnResponse(results={"out": {0: 0}}))
        m.begin_commit()
        end = m.end_request(True)
        assert end.commit and end.bump_epoch and (end.producer_id, end.producer_epoch) == (7, n - 1)
        m.on_end(EndTxnResponse(producer_id=7, producer_epoch=n))
        assert m.state is S.READY and m.identity == (7, n) and not m.partitions and not m.started
    # the epochs ran out: the coordinator answers a new producer id at epoch 0
    m.begin_transaction()
    m.check_append()
    m.register(TP0)
    m.add_partitions_request()
    m.on_add_partitions(AddPartitionsToTxnResponse(results={"out": {0: 0}}))
    m.begin_commit()
    m.end_request(True)
    m.on_end(EndTxnResponse(producer_id=8, producer_epoch=0))
    assert m.identity == (8, 0)


def test_a_transaction_the_coordinator_never_heard_of_ends_without_end_txn():
    m = ready()
    m.begin_transaction()
    m.begin_commit()
    assert m.end_request(True) is None  # nothing to commit (Kafka's client skips EndTxn too)
    m.complete()
    assert m.state is S.READY and m.identity == (7, 0)
    m.begin_transaction()
    m.begin_abort()
    assert m.end_request(False) is None


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_TXN_STATE])
def test_a_fatal_end_txn_answer_raises_its_class(code):
    m = added(TP0)
    m.begin_commit()
    m.end_request(True)
    with pytest.raises(for_code(code)) as raised:
        m.on_end(EndTxnResponse(error_code=code))
    assert raised.value.code == code and m.state is S.FATAL_ERROR


def test_appends_are_open_only_inside_a_transaction():
    m = TransactionManager("etl-1", 60_000)
    assert not m.appends_open
    m.init_request()
    m.on_init(TxnInitProducerIdResponse(producer_id=7, producer_epoch=0))
    assert not m.appends_open
    m.begin_transaction()
    assert m.appends_open
    m.refuse_append()  # open: nothing to refuse
    assert m.register(TP0) and m.new_partitions == {TP0}
    m.begin_commit()
    assert not m.appends_open
    with pytest.raises(IllegalStateError):
        m.check_append()


def test_an_abort_drops_partitions_not_yet_requested():
    m = added(TP0)
    m.check_append()
    m.register(TP1)
    m.begin_abort()
    assert not m.new_partitions and m.add_partitions_request() is None


# -- offsets -------------------------------------------------------------------------------


def test_send_offsets_adds_the_group_then_commits_its_offsets():
    m = in_txn()
    request = m.add_offsets_request("g")
    assert (request.group_id, request.producer_id, request.producer_epoch) == ("g", 7, 0)
    assert m.on_add_offsets(AddOffsetsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS)) is Verdict.RETRY
    assert m.on_add_offsets(AddOffsetsToTxnResponse()) is Verdict.DONE and m.started
    assert m.on_txn_offset_commit(TxnOffsetCommitResponse(topics={"in": {0: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}})) is Verdict.RETRY
    assert m.on_txn_offset_commit(TxnOffsetCommitResponse(topics={"in": {0: 0}})) is Verdict.DONE
    m.begin_commit()
    assert m.end_request(True) is not None  # the offsets alone make it a transaction


@pytest.mark.parametrize("code", [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID])
def test_offsets_of_a_consumer_whose_generation_is_over_make_the_transaction_abortable(code):
    m = in_txn()
    m.add_offsets_request("g")
    m.on_add_offsets(AddOffsetsToTxnResponse())
    with pytest.raises(KafkaError) as raised:
        m.on_txn_offset_commit(TxnOffsetCommitResponse(topics={"in": {0: code, 1: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}}))
    assert raised.value.code == code and m.state is S.ABORTABLE_ERROR


def test_offsets_and_group_metadata_are_checked_before_anything_is_sent():
    assert _offsets_by_topic({TopicPartition("in", 0): OffsetAndMetadata(42, "m"), TopicPartition("in", 1): 7}) == {
        "in": {0: OffsetCommitPartition(42, "m", -1), 1: OffsetCommitPartition(7, "", -1)}
    }
    with pytest.raises(TypeError, match="TopicPartition"):
        _offsets_by_topic({"in": OffsetAndMetadata(1, "")})
    with pytest.raises(TypeError, match="OffsetAndMetadata"):
        _offsets_by_topic({TopicPartition("in", 0): "1"})
    with pytest.raises(ValueError, match="offset"):
        _offsets_by_topic({TopicPartition("in", 0): OffsetAndMetadata(-1, "")})
    assert _group_metadata("g") == ConsumerGroupMetadata("g", -1, "", None)
    with pytest.raises(TypeError, match="ConsumerGroupMetadata"):
        _group_metadata(3)
    with pytest.raises(kcoord.InvalidGroupIdError):
        _group_metadata("")
    with pytest.raises(ValueError, match="member_id is empty"):
        _group_metadata(ConsumerGroupMetadata("g", 5, ""))


def test_offsets_whose_outcome_is_unknown_leave_only_an_abort_that_sends_end_txn():
    m = in_txn()
    m.add_offsets_request("g")  # sent; no answer before max_block_ms
    m.on_unknown_outcome(KafkaError(ErrorCode.REQUEST_TIMED_OUT, "no answer"))
    assert m.state is S.ABORTABLE_ERROR and not m.started
    with pytest.raises(kcoord.RequestTimedOutError, match="abort_transaction"):
        m.begin_commit()
    m.begin_abort()
    assert m.end_request(False) is not None  # the coordinator may hold the group's partition


# -- two-phase (KIP-939) -------------------------------------------------------------------


def test_prepare_needs_two_phase_and_returns_the_transactions_identity():
    m = added(TP0)
    with pytest.raises(IllegalStateError, match="enable_two_phase_commit"):
        m.begin_prepare()
    m = added(TP0, pid=9, epoch=4, two_phase=True)
    m.begin_prepare()
    prepared = m.prepare()
    assert prepared == PreparedTxnState(9, 4) and str(prepared) == "9:4" and m.state is S.PREPARED_TRANSACTION
    with pytest.raises(IllegalStateError):
        m.check_append()
    m.begin_commit()
    assert m.end_request(True).commit


def test_a_kept_transaction_is_committed_only_when_the_decision_names_it():
    with pytest.raises(ValueError, match="enable_two_phase_commit"):
        TransactionManager("etl-1", 60_000).init_request(keep_prepared=True)
    m = TransactionManager("etl-1", 60_000, two_phase=True)
    request = m.init_request(keep_prepared=True)
    assert request.enable_two_phase and request.keep_prepared
    m.on_init(TxnInitProducerIdResponse(producer_id=9, producer_epoch=6, ongoing_txn_producer_id=9, ongoing_txn_producer_epoch=4))
    assert m.state is S.PREPARED_TRANSACTION and m.identity == (9, 6) and m.prepared == (9, 4)
    assert m.complete_decision(PreparedTxnState(9, 4)) is True
    assert m.complete_decision((9, 4)) is True
    assert m.complete_decision(PreparedTxnState(9, 3)) is False
    with pytest.raises(TypeError):
        m.complete_decision("9:4")
    m.begin_abort()
    end = m.end_request(False)
    assert (end.producer_id, end.producer_epoch, end.commit) == (9, 6, False)  # ended at the new epoch
    m.on_end(EndTxnResponse(producer_id=9, producer_epoch=7))
    with pytest.raises(IllegalStateError, match="no prepared transaction"):
        m.complete_decision(PreparedTxnState(9, 4))


def test_nothing_kept_leaves_the_producer_ready():
    m = TransactionManager("etl-1", 60_000, two_phase=True)
    m.init_request(keep_prepared=True)
    m.on_init(TxnInitProducerIdResponse(producer_id=9, producer_epoch=6))
    assert m.state is S.READY and m.prepared is None


# -- the request loop (Transactions._retrying), with a scripted coordinator -----------------


def _transactions(m: TransactionManager, max_block_ms: int = 2000) -> Transactions:
    return Transactions(object.__new__(ClusterClient), m, flush=lambda t: None, retry_backoff_ms=1, max_block_ms=max_block_ms, request_timeout_ms=1000)


def test_the_request_loop_retries_until_done_and_times_out_with_the_last_answer():
    m = added(TP0)
    m.begin_commit()
    request = m.end_request(True)
    t = _transactions(m)
    answers = [EndTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS), EndTxnResponse(error_code=ErrorCode.NOT_COORDINATOR), EndTxnResponse(producer_id=7, producer_epoch=1)]
    sent = []

    async def send(remaining_s):
        sent.append(remaining_s)
        return answers.pop(0)

    asyncio.run(t._retrying("commit", send, m.on_end, time.monotonic() + 5))
    assert len(sent) == 3 and m.state is S.READY and m.identity == (7, 1)

    m = added(TP0)
    m.begin_commit()
    m.end_request(True)

    async def busy(remaining_s):
        return EndTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS)

    with pytest.raises(kcoord.RequestTimedOutError, match="CONCURRENT_TRANSACTIONS"):
        asyncio.run(t._retrying("commit", busy, m.on_end, time.monotonic() + 0.1))
    assert m.state is S.COMMITTING_TRANSACTION  # may be called again


def test_the_errors_are_exported_with_kafka_pythons_names():
    for name in ("IllegalStateError", "TransactionAbortedError", "ProducerFencedError", "InvalidTxnStateError", "TransactionAbortableError", "ConsumerGroupMetadata"):
        assert name in kcoord.__all__ and getattr(kcoord, name) is not None
    assert kcoord.TransactionAbortedError is TransactionAbortedError and not TransactionAbortedError("x").retriable
    kerrors = pytest.importorskip("kafka.errors")
    assert kerrors.IllegalStateError.__name__ == IllegalStateError.__name__
    assert kerrors.TransactionAbortedError.__name__ == TransactionAbortedError.__name__


# -- KIP-360 recovery ------------------------------------------------------------------------


@pytest.mark.parametrize("code", [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.REQUEST_TIMED_OUT])
def test_a_batch_whose_sequence_state_is_lost_is_recovered_by_the_coordinators_epoch_bump(code):
    """Kafka 4.0 with transaction version 2: the abort's EndTxn bumps the epoch at the
    coordinator; the client never bumps its own epoch."""
    m = added(TP0, pid=7, epoch=3)
    m.on_batch_failed(KafkaError(code, "sequence state unknown"))
    assert m.state is S.ABORTABLE_ERROR and m.identity == (7, 3)
    m.begin_abort()
    end = m.end_request(False)
    assert (end.producer_id, end.producer_epoch, end.commit, end.bump_epoch) == (7, 3, False, True)
    m.on_end(EndTxnResponse(producer_id=7, producer_epoch=4))
    assert m.state is S.READY and m.identity == (7, 4)


def test_a_batch_refused_invalid_producer_id_mapping_by_a_leader_still_aborts_with_end_txn():
    """Only the transaction coordinator's INVALID_PRODUCER_ID_MAPPING means it forgot the id:
    an InitProducerId while it still holds the transaction would fence this producer."""
    m = added(TP0, pid=7, epoch=3)
    m.on_batch_failed(KafkaError(ErrorCode.INVALID_PRODUCER_ID_MAPPING, "from a leader"))
    m.begin_abort()
    assert isinstance(m.end_request(False), EndTxnRequest)


@pytest.mark.parametrize("where", ["add_partitions", "add_offsets", "commit"])
def test_an_unknown_producer_id_mapping_is_abortable_and_the_abort_reinitialises_with_the_current_identity(where):
    """Kafka's KIP-360: INVALID_PRODUCER_ID_MAPPING (e.g. the transactional id expired at its
    coordinator) makes the transaction abortable; the abort skips EndTxn (the coordinator
    would refuse it) and sends InitProducerId with the producer's id and epoch."""
    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
    m = in_txn(TP0, pid=7, epoch=3)
    with pytest.raises(kcoord.InvalidProducerIdMappingError, match="abort_transaction|AddPartitions|AddOffsets|EndTxn"):
        if where == "add_partitions":
            m.add_partitions_request()
            m.on_add_partitions(AddPartitionsToTxnResponse(results={"out": {0: code}}))
        elif where == "add_offsets":
            m.add_offsets_request("g")
            m.on_add_offsets(AddOffsetsToTxnResponse(error_code=code))
        else:
            m.add_partitions_request()
            m.on_add_partitions(AddPartitionsToTxnResponse(results={"out": {0: 0}}))
            m.begin_commit()
            m.end_request(True)
            m.on_end(EndTxnResponse(error_code=code))
    assert m.state is S.ABORTABLE_ERROR and m.identity == (7, 3)
    with pytest.raises(kcoord.InvalidProducerIdMappingError, match="abort_transaction"):
        m.begin_commit()
    m.begin_abort()
    request = m.end_request(False)
    assert isinstance(request, TxnInitProducerIdRequest)
    assert (request.transactional_id, request.producer_id, request.producer_epoch, request.transaction_timeout_ms) == ("etl-1", 7, 3, 60_000)
    assert m.end_request(False) == request  # a retry after a timeout sends the same
    assert m.on_recovered(TxnInitProducerIdResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS)) is Verdict.RETRY
    assert m.on_recovered(TxnInitProducerIdResponse(producer_id=9, producer_epoch=0)) is Verdict.DONE
    assert m.state is S.READY and m.identity == (9, 0) and not m.partitions and not m.started and m.last_error is None
    m.begin_transaction()  # usable again
    m.check_append()
    m.register(TP0)
    assert (m.add_partitions_request().producer_id, m.state) == (9, S.IN_TRANSACTION)


def test_an_abort_whose_end_txn_finds_the_id_unknown_reinitialises_at_once():
    m = added(TP0, pid=7, epoch=3)
    m.begin_abort()
    m.end_request(False)
    assert m.on_end(EndTxnResponse(error_code=ErrorCode.INVALID_PRODUCER_ID_MAPPING)) is Verdict.DONE
    assert m.state is S.ABORTING_TRANSACTION
    request = m.recovery_request()
    assert isinstance(request, TxnInitProducerIdRequest) and (request.producer_id, request.producer_epoch) == (7, 3)
    m.on_recovered(TxnInitProducerIdResponse(producer_id=9, producer_epoch=0))
    assert m.state is S.READY and m.identity == (9, 0) and m.recovery_request() is None


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED])
def test_a_recovery_the_coordinator_refuses_ends_the_producer(code):
    m = in_txn(TP0, pid=7, epoch=3)
    m.add_offsets_request("g")
    with pytest.raises(KafkaError):
        m.on_add_offsets(AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_PRODUCER_ID_MAPPING))
    m.begin_abort()
    m.end_request(False)
    with pytest.raises(KafkaError) as raised:
        m.on_recovered(TxnInitProducerIdResponse(error_code=code))
    assert m.state is S.FATAL_ERROR
    assert raised.value.code == (ErrorCode.PRODUCER_FENCED if code == ErrorCode.INVALID_PRODUCER_EPOCH else code)
    with pytest.raises(type(raised.value)):
        m.begin_transaction()


class _Scripted(Transactions):
    """The driver with its coordinator calls answered from a script (requests recorded)."""

    def __init__(self, m: TransactionManager, answers: list) -> None:
        super().__init__(object.__new__(ClusterClient), m, flush=lambda t: None, retry_backoff_ms=1, max_block_ms=2000, request_timeout_ms=1000)
        self.answers, self.sent = answers, []

    async def _txn_call(self, request, remaining_s):
        self.sent.append(request)
        return self.answers.pop(0)

    def _run(self, coro):
        return asyncio.run(coro)


def test_the_driver_aborts_then_reinitialises_when_the_end_txn_finds_the_id_unknown():
    m = added(TP0, pid=7, epoch=3)
    t = _Scripted(m, [EndTxnResponse(error_code=ErrorCode.INVALID_PRODUCER_ID_MAPPING), TxnInitProducerIdResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), TxnInitProducerIdResponse(producer_id=9, producer_epoch=0)])
    t.end_transaction(False, sender_loop=None)
    assert [type(r).__name__ for r in t.sent] == ["EndTxnRequest", "TxnInitProducerIdRequest", "TxnInitProducerIdRequest"]
    assert (t.sent[1].producer_id, t.sent[1].producer_epoch) == (7, 3) and t.sent[1] == t.sent[2]
    assert m.state is S.READY and m.identity == (9, 0)


def test_the_driver_skips_end_txn_when_the_coordinator_already_said_it_does_not_know_the_id():
    m = in_txn(TP0, pid=7, epoch=3)
    m.add_partitions_request()
    with pytest.raises(kcoord.InvalidProducerIdMappingError):
        m.on_add_partitions(AddPartitionsToTxnResponse(results={"out": {0: ErrorCode.INVALID_PRODUCER_ID_MAPPING}}))
    t = _Scripted(m, [TxnInitProducerIdResponse(producer_id=7, producer_epoch=4)])
    t.end_transaction(False, sender_loop=None)
    assert [type(r).__name__ for r in t.sent] == ["TxnInitProducerIdRequest"] and m.identity == (7, 4) and m.state is S.READY
