"""A batch that expires while its partition waits to join the transaction makes the
transaction abortable (Kafka's Sender.failBatch -> TransactionManager.handleFailedBatch).

The suite's chaos run 839016 lost an acknowledged transaction (w1-0/15): the coordinator
answered CONCURRENT_TRANSACTIONS for ~30 s (the previous transaction's markers waited for a
killed __consumer_offsets leader), every batch of the transaction expired at its
delivery_timeout_ms in ``before_send`` (still waiting for AddPartitionsToTxn), and the add,
its own task with the longer max_block_ms, then succeeded. Failing those batches did not
make the transaction abortable, so commit_transaction() flushed (the batches were done:
failed), committed the partitions and the offsets, and none of the 200 records was ever
written."""

from __future__ import annotations

import asyncio
import time

from kcoord.client.cluster import ClusterClient
from kcoord.client.metrics import RequestStats
from kcoord.client.producer.accumulator import RecordAccumulator
from kcoord.client.producer.batch import ProducerBatch
from kcoord.client.producer.sender import Sender, Wakeup
from kcoord.client.producer.transaction_manager import TransactionManager, TransactionState, Verdict
from kcoord.client.producer.transactions import TransactionalIdentity, Transactions
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode, KafkaError
from kcoord.protocol.txn import AddPartitionsToTxnResponse, TxnInitProducerIdResponse

import pytest

TP = TopicPartition("out", 0)


def in_txn() -> TransactionManager:
    m = TransactionManager("etl-1", 10_000)
    m.init_request()
    assert m.on_init(TxnInitProducerIdResponse(producer_id=7, producer_epoch=0)) is Verdict.DONE
    m.begin_transaction()
    return m


def sender_for(m: TransactionManager, t: Transactions, delivery_timeout_ms: int) -> Sender:
    cluster = object.__new__(ClusterClient)
    loop = asyncio.get_running_loop()
    acc = RecordAccumulator(cluster, batch_size=16384, max_request_size=1 << 20, buffer_memory=1 << 24, max_block_ms=2000,
                            partitioner="default", wake=lambda: None, metrics={})
    return Sender(cluster, acc, TransactionalIdentity(m), {"batches_sent": 0, "requests": 0, "retries": 0, "duplicates": 0, "records_sent": 0},
                  RequestStats("l", "e"), Wakeup(loop), acks=-1, retries=5, retry_backoff_ms=1, delivery_timeout_ms=delivery_timeout_ms,
                  request_timeout_ms=1000, compression=0, linger_ms=0, max_in_flight=5, metadata_refresh_ms=100, transactions=t)


def test_a_batch_expiring_before_its_partition_joins_the_transaction_makes_the_commit_fail():
    m = in_txn()
    t = Transactions(object.__new__(ClusterClient), m, flush=lambda s: None, retry_backoff_ms=1, max_block_ms=5000, request_timeout_ms=1000)
    answers = {"concurrent_until": time.monotonic() + 0.3}

    async def txn_call(request, remaining_s):
        if time.monotonic() < answers["concurrent_until"]:  # the previous transaction's markers
            return AddPartitionsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS)
        return AddPartitionsToTxnResponse(results={topic: {p: 0 for p in ps} for topic, ps in request.topics.items()})

    t._txn_call = txn_call

    async def run():
        m.check_append()
        m.register(("out", 0))
        t.add_soon(asyncio.get_running_loop())
        while t._adding is None:  # send() started the add (bounded by max_block_ms) ...
            await asyncio.sleep(0.001)
        # ... and the batch drains after linger_ms: it waits for that add, up to its own deadline
        s = sender_for(m, t, delivery_timeout_ms=100)
        batch = ProducerBatch("out", 0, time.monotonic())
        batch.append(b"v", None, None, 0, 10)
        s.accumulator.incomplete.add(batch)
        ps = type("PS", (), {"topic": "out", "partition": 0})()
        await s._deliver(ps, batch)
        assert batch.done.is_set() and batch.error is not None and batch.error.code == ErrorCode.REQUEST_TIMED_OUT
        # the add goes on (its deadline is max_block_ms) and succeeds after the batch expired
        deadline = time.monotonic() + 5
        while TP not in m.partitions and m.state is TransactionState.IN_TRANSACTION:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)

    asyncio.run(run())
    assert m.state is TransactionState.ABORTABLE_ERROR, f"a failed batch must make the transaction abortable: {m!r} {m.last_error!r} {m.partitions}"
    # commit_transaction() starts here: it must refuse
    with pytest.raises(KafkaError) as info:
        m.begin_commit()
    assert info.value.code == ErrorCode.REQUEST_TIMED_OUT
