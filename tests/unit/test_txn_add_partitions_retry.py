"""A retried AddPartitionsToTxn takes along the partitions registered while it waited
(issue 34's benchmark: a producer's next transaction often starts while the coordinator still
writes the previous one's markers, answering CONCURRENT_TRANSACTIONS; retrying only the
first partition cost a second round trip to the coordinator for the others, ~20 ms per
transaction). Kafka's client likewise sends every partition pending when it sends."""

from __future__ import annotations

import asyncio
import time

from kcoord.client.cluster import ClusterClient
from kcoord.client.producer.transaction_manager import TransactionManager, Verdict
from kcoord.client.producer.transactions import Transactions
from kcoord.client.types import TopicPartition
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.txn import AddPartitionsToTxnResponse, TxnInitProducerIdResponse

TP0, TP1, TP2 = TopicPartition("out", 0), TopicPartition("out", 1), TopicPartition("out", 2)


def in_txn() -> TransactionManager:
    m = TransactionManager("etl-1", 60_000)
    m.init_request()
    assert m.on_init(TxnInitProducerIdResponse(producer_id=7, producer_epoch=0)) is Verdict.DONE
    m.begin_transaction()
    return m


def append(m: TransactionManager, tp: TopicPartition) -> None:
    m.check_append()
    m.register(tp)


def test_a_retry_after_concurrent_transactions_adds_the_partitions_registered_meanwhile():
    m = in_txn()
    append(m, TP0)
    t = Transactions(object.__new__(ClusterClient), m, flush=lambda s: None, retry_backoff_ms=1, max_block_ms=2000, request_timeout_ms=1000)
    sent = []

    async def txn_call(request, remaining_s):
        sent.append({tp: ps for tp, ps in request.topics.items()})
        if len(sent) == 1:
            append(m, TP1)  # the application keeps sending while the first attempt is answered
            append(m, TP2)
            return AddPartitionsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS)
        return AddPartitionsToTxnResponse(results={topic: {p: 0 for p in ps} for topic, ps in request.topics.items()})

    t._txn_call = txn_call

    async def run():
        assert await t.before_send(TP0, time.monotonic() + 5) is None
        # the other partitions were added by the same retry: their batches go at once
        assert await t.before_send(TP1, time.monotonic() + 5) is None
        assert await t.before_send(TP2, time.monotonic() + 5) is None

    asyncio.run(run())
    assert sent == [{"out": [0]}, {"out": [0, 1, 2]}]
    assert m.partitions == {TP0, TP1, TP2}
