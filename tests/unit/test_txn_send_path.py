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

from waiting import wait_until


def in_txn() -> TransactionManager:
    m = TransactionManager("etl-1", 60_000)
    m.init_request()
    assert m.on_init(TxnInitProducerIdResponse(producer_id=7, producer_epoch=0)) is Verdict.DONE
    m.begin_transaction()
    return m


def test_register_reports_a_partition_new_to_the_transaction_once():
    m = in_txn()
    m.check_append()
    assert m.register(("out", 0)) is True  # new: the caller starts AddPartitionsToTxn
    for _ in range(3):
        m.check_append()
        assert m.register(("out", 0)) is False  # known: a set lookup, nothing registered
    assert m.new_partitions == {TopicPartition("out", 0)}
    assert all(type(tp) is TopicPartition for tp in m.new_partitions)
    assert m.add_partitions_request().topics == {"out": [0]}
    m.check_append()
    assert m.register(("out", 0)) is False  # pending: not registered again


def test_the_registered_set_restarts_with_every_transaction_and_an_abort_drops_the_unsent():
    m = in_txn()
    m.check_append()
    m.register(("out", 0), ("out", 1))
    m.add_partitions_request()  # both pending
    m.check_append()
    assert m.register(("out", 2)) is True
    m.begin_abort()  # out-2 was never sent to the coordinator: dropped
    assert not m.new_partitions
    m.complete()
    m.begin_transaction()
    m.check_append()
    assert m.register(("out", 0)) is True  # a new transaction adds its partitions again


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
        m.check_append()
        assert m.register(("out", 0))
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
        m.check_append()
        m.register(("out", 0))
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
        m.check_append()
        assert m.register(("out", 0))
        t.add_soon(loop)
        for _ in range(3):  # the sender's loop runs the callback, and the task its first steps
            await asyncio.sleep(0)
        for p in (1, 2):  # the caller's next sends, within the window
            m.check_append()
            assert m.register(("out", p))
            t.add_soon(loop)
        deadline = time.monotonic() + 5
        while len(m.partitions) < 3:
            assert time.monotonic() < deadline, sent
            await asyncio.sleep(0.001)

    asyncio.run(run())
    assert sent == [{"out": [0, 1, 2]}]
    assert txn_module.ADD_COALESCE_S > 0


# -- send() through the accumulator's gate (one lock round per record) -----------------------


class _Metadata:
    def topic(self, name: str, refresh: bool = False):
        from kcoord.protocol.controller import PartitionMetadata, TopicMetadata

        return TopicMetadata(name, partitions=[PartitionMetadata(i, leader=0) for i in range(3)])


def _txn_producer(batch_size: int = 16384, buffer_memory: int = 1 << 30):
    """A transactional Producer whose send() runs as in production, without its sender
    thread (nothing is delivered); the accumulator wired as Producer.__init__ wires it."""
    from kcoord.client.metrics import RequestStats
    from kcoord.client.producer import Producer
    from kcoord.client.producer.accumulator import RecordAccumulator
    from kcoord.client.producer.partitioner import ROUND_ROBIN

    m = in_txn()
    t = Transactions(object.__new__(ClusterClient), m, flush=lambda s: None, retry_backoff_ms=1, max_block_ms=2000, request_timeout_ms=1000)
    loop = asyncio.new_event_loop()  # never run: add_soon only queues a callback on it
    t.sender_loop = loop
    p = object.__new__(Producer)
    p.value_serializer = p.key_serializer = None
    p._txn = t
    p._stats = RequestStats("request_latency", "request_error")
    p._accumulator = RecordAccumulator(
        _Metadata(), batch_size=batch_size, max_request_size=1 << 20, buffer_memory=buffer_memory, max_block_ms=2000,
        partitioner=ROUND_ROBIN, wake=lambda: None, metrics={}, gate=m, on_new_batch=t.batch_opened,
    )
    return p, m, loop


def test_send_registers_a_partition_when_a_batch_opens_there_not_per_record(monkeypatch):
    p, m, loop = _txn_producer()
    calls = []
    real = m.register
    monkeypatch.setattr(m, "register", lambda *tps: calls.append(tps) or real(*tps))
    try:
        for _ in range(300):
            p.send("out", b"x" * 100)
        # round robin over 3 partitions, 16 KiB batches: one registration per batch opened
        batches = sum(len(ps.ready) + (ps.open is not None) for ps in p._accumulator.topics["out"].partitions)
        assert len(calls) == batches < 300
        assert m.new_partitions == {TopicPartition("out", i) for i in range(3)}
    finally:
        loop.close()


def test_send_outside_a_transaction_or_while_committing_is_refused_and_queues_nothing():
    import pytest

    from kcoord.client.errors import IllegalStateError

    p, m, loop = _txn_producer()
    try:
        p.send("out", b"a")
        m.begin_commit()
        with pytest.raises(IllegalStateError, match="outside a transaction"):
            p.send("out", b"b")
        # the accumulator refuses too (a send() that passed the first check as the commit began)
        t = p._accumulator.topic("out")
        with pytest.raises(IllegalStateError):
            p._accumulator.append(t, 0, None, b"c", None, 0, 50)
        assert sum(len(b.values) for b in p._accumulator.incomplete) == 1
    finally:
        loop.close()


def test_a_send_waiting_for_buffer_memory_when_the_commit_begins_is_refused():
    """The wait for memory releases the accumulator's lock: the commit's flush may take it
    meanwhile, so the gate is checked again after the wait; the record must not join a
    transaction whose commit already snapshotted its batches."""
    import threading

    from kcoord.client.errors import IllegalStateError

    p, m, loop = _txn_producer(batch_size=1000, buffer_memory=1000)
    acc = p._accumulator
    try:
        while acc.buffered < acc.buffer_memory:
            p.send("out", b"x" * 100)  # the buffer is full now
        outcome = []

        def blocked_send():
            try:
                p.send("out", b"y" * 100)
                outcome.append("queued")
            except IllegalStateError as exc:
                outcome.append(exc)

        th = threading.Thread(target=blocked_send)
        th.start()
        wait_until(lambda: acc.memory_waiters, timeout=5, interval=0.001, what="the send() to wait for buffer memory")
        m.begin_commit()
        batches = acc.begin_flush()  # the commit's flush: its snapshot of what to wait for
        for b in batches:  # delivered: memory frees, the waiting send() wakes
            b.complete()
            acc.completed(b)
        th.join(5)
        assert len(outcome) == 1 and isinstance(outcome[0], IllegalStateError), outcome
        assert not acc.incomplete
    finally:
        loop.close()


def test_partitions_met_while_an_add_is_in_flight_go_next_without_the_coalescing_wait(monkeypatch):
    """They already waited for the request in flight (held by the coordinator while the
    previous transaction's markers are written): the next request goes as it is answered."""
    from kcoord.client.producer import transactions as txn_module

    monkeypatch.setattr(txn_module, "ADD_COALESCE_S", 30.0)  # a wait the test would notice
    m = in_txn()
    t = Transactions(object.__new__(ClusterClient), m, flush=lambda s: None, retry_backoff_ms=1, max_block_ms=60_000, request_timeout_ms=1000)
    sent = []

    async def run():
        release = asyncio.Event()

        async def txn_call(request, remaining_s):
            sent.append(dict(request.topics))
            if len(sent) == 1:
                await release.wait()  # held at the coordinator
            return AddPartitionsToTxnResponse(results={topic: {p: 0 for p in ps} for topic, ps in request.topics.items()})

        t._txn_call = txn_call
        first = asyncio.create_task(t.before_send(TopicPartition("out", 0), time.monotonic() + 60))
        while not sent:
            await asyncio.sleep(0.001)
        assert m.register(("out", 1))  # send() meets another partition meanwhile
        release.set()
        assert await first is None
        deadline = time.monotonic() + 5
        while TopicPartition("out", 1) not in m.partitions:
            assert time.monotonic() < deadline, sent
            await asyncio.sleep(0.001)

    asyncio.run(run())
    assert sent == [{"out": [0]}, {"out": [1]}]
