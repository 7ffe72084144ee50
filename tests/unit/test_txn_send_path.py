"""The transactional ``send()``'s bookkeeping (issue 34: it cost more per record than the
whole idempotent ``send()``): a partition is registered with the transaction once, keyed by
the plain ``(topic, partition)`` tuple (no TopicPartition per record), and the first record
to a new partition starts its AddPartitionsToTxn at once instead of at the batch's drain
(Kafka's client adds a partition when ``send()`` first meets it, maybeAddPartition)."""

from __future__ import annotations

import asyncio
import time

from kcoord.client.cluster import ClusterClient
from kcoord.client.producer.transaction_manager import TransactionManager, TransactionState, Verdict
from kcoord.client.producer.transactions import Transactions
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.txn import AddPartitionsToTxnResponse, TxnInitProducerIdResponse


def in_txn() -> TransactionManager:
    m = TransactionManager("etl-1", 60_000)
    m.init_request()
    assert m.on_init(TxnInitProducerIdResponse(producer_id=7, producer_epoch=0)) is Verdict.DONE
    m.begin_transaction()
    return m


def test_after_append_reports_a_partition_new_to_the_transaction_once():
    m = in_txn()
    m.before_append()
    assert m.after_append(("out", 0)) is True  # new: the caller starts AddPartitionsToTxn
    for _ in range(3):
        m.before_append()
        assert m.after_append(("out", 0)) is False  # known: a set lookup, nothing registered
    assert m.new_partitions == {TopicPartition("out", 0)}
    assert all(type(tp) is TopicPartition for tp in m.new_partitions)
    m.before_append()
    assert m.after_append(None) is False
    assert m.add_partitions_request().topics == {"out": [0]}
    m.before_append()
    assert m.after_append(("out", 0)) is False  # pending: not registered again
    assert m.wait_appends(0.01)


def test_the_registered_set_restarts_with_every_transaction_and_an_abort_drops_the_unsent():
    m = in_txn()
    m.before_append()
    m.after_append(("out", 0), ("out", 1))
    m.add_partitions_request()  # both pending
    m.before_append()
    assert m.after_append(("out", 2)) is True
    m.begin_abort()  # out-2 was never sent to the coordinator: dropped
    assert not m.new_partitions
    m.complete()
    m.begin_transaction()
    m.before_append()
    assert m.after_append(("out", 0)) is True  # a new transaction adds its partitions again


def test_a_new_partition_is_added_without_waiting_for_a_batch_to_drain():
    m = in_txn()
    t = Transactions(object.__new__(ClusterClient), m, flush=lambda s: None, retry_backoff_ms=1, max_block_ms=2000, request_timeout_ms=1000)
    sent = []

    async def txn_call(request, remaining_s):
        sent.append(dict(request.topics))
        if len(sent) == 1:
            return AddPartitionsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS)
        return AddPartitionsToTxnResponse(results={topic: {p: 0 for p in ps} for topic, ps in request.topics.items()})

    t._txn_call = txn_call

    async def run():
        loop = asyncio.get_running_loop()
        m.before_append()
        assert m.after_append(("out", 0))
        t.add_soon(loop)  # what send() does for a new partition, from the caller's thread
        deadline = time.monotonic() + 5
        while TopicPartition("out", 0) not in m.partitions:  # no batch was ever drained
            assert time.monotonic() < deadline, sent
            await asyncio.sleep(0.001)
        t.add_soon(loop)  # nothing new: no request
        for _ in range(3):  # its callback runs, and a task it started would take its first step
            await asyncio.sleep(0)

    asyncio.run(run())
    assert sent == [{"out": [0]}, {"out": [0]}]
    assert m.state is TransactionState.IN_TRANSACTION


def test_an_early_add_that_fails_makes_the_transaction_abortable_and_its_batches_fail():
    m = in_txn()
    t = Transactions(object.__new__(ClusterClient), m, flush=lambda s: None, retry_backoff_ms=1, max_block_ms=2000, request_timeout_ms=1000)

    async def txn_call(request, remaining_s):
        return AddPartitionsToTxnResponse(results={topic: {p: int(ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in ps} for topic, ps in request.topics.items()})

    t._txn_call = txn_call

    async def run():
        m.before_append()
        m.after_append(("out", 0))
        t.add_soon(asyncio.get_running_loop())
        deadline = time.monotonic() + 5
        while m.state is not TransactionState.ABORTABLE_ERROR:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.001)
        refused = await t.before_send(TopicPartition("out", 0), time.monotonic() + 5)
        assert refused is not None and refused.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    asyncio.run(run())


def test_partitions_met_just_after_the_first_go_in_the_same_add_partitions_request():
    """The first AddPartitionsToTxn waits a moment (ADD_COALESCE_S) for ``send()`` to meet
    the transaction's other partitions, so one request adds them all: a coordinator holding
    it while the previous transaction's markers are written answered it alone, and the
    others needed a second request (a persisted write) after it."""
    from kcoord.client.producer import transactions as txn_module

    m = in_txn()
    t = Transactions(object.__new__(ClusterClient), m, flush=lambda s: None, retry_backoff_ms=1, max_block_ms=2000, request_timeout_ms=1000)
    sent = []

    async def txn_call(request, remaining_s):
        sent.append(dict(request.topics))
        return AddPartitionsToTxnResponse(results={topic: {p: 0 for p in ps} for topic, ps in request.topics.items()})

    t._txn_call = txn_call

    async def run():
        loop = asyncio.get_running_loop()
        m.before_append()
        assert m.after_append(("out", 0))
        t.add_soon(loop)
        for _ in range(3):  # the sender's loop runs the callback, and the task its first steps
            await asyncio.sleep(0)
        for p in (1, 2):  # the caller's next sends, within the window
            m.before_append()
            assert m.after_append(("out", p))
            t.add_soon(loop)
        deadline = time.monotonic() + 5
        while len(m.partitions) < 3:
            assert time.monotonic() < deadline, sent
            await asyncio.sleep(0.001)

    asyncio.run(run())
    assert sent == [{"out": [0, 1, 2]}]
    assert txn_module.ADD_COALESCE_S > 0
