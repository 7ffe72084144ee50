"""asyncio flavours of the Producer and Consumer, for code running on an event loop (async
Ray actors, asyncio services), where a blocking call would stall every other coroutine.

Names follow aiokafka: ``await start()`` / ``await stop()`` (or ``async with``),
``fut = await producer.send(...)`` then ``await fut`` (or ``await producer.send_and_wait(...)``),
``await consumer.getmany(timeout_ms=...)``, ``await consumer.getone()`` and
``async for record in consumer``.

Transactions follow aiokafka too: ``AIOProducer(cluster, transactional_id="etl-1")``,
``await start()`` initialises them (InitProducerId), then ``async with producer.transaction():``
begins one, commits it when the block ends and aborts it when the block raises;
``await producer.send_offsets_to_transaction(offsets, group_id_or_metadata)`` inside it.
``begin_transaction()``, ``await commit_transaction()`` and ``await abort_transaction()`` are
there too. The transactional logic is the blocking Producer's (one copy).

Each wraps the blocking client and runs its blocking calls on one worker thread of its own
(so calls keep the order they were made in, and the client -- the Consumer is not
thread-safe -- is only ever used by one thread at a time); delivery reports come back to
the loop through ``call_soon_threadsafe``. Settings are the blocking client's
(:class:`~kcoord.client.producer.Producer`, :class:`~kcoord.client.consumer.Consumer`).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, TypeVar

from .cluster import ClusterClient
from .producer.transaction_manager import TransactionState
from .types import ConsumerRecord, RecordMetadata, TopicPartition

T = TypeVar("T")


class _Wrapped:
    _client: Any
    _kind = "client"

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"kcoord-aio-{self._kind}")
        self._client = None

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args, **kwargs))

    def _require(self) -> Any:
        if self._client is None:
            raise RuntimeError(f"call 'await start()' (or use 'async with') before using this {type(self).__name__}")
        return self._client

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    async def start(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def stop(self) -> None:
        """Close the client (a producer delivers what is queued first) and its thread."""
        if self._client is not None:
            await self._run(self._client.close)
        self._executor.shutdown(wait=False)


class AIOProducer(_Wrapped):
    """``Producer`` for asyncio: ``AIOProducer(cluster, **producer_settings)``."""

    _kind = "producer"

    def __init__(self, cluster: ClusterClient, **settings: Any) -> None:
        super().__init__()
        self._cluster, self._settings = cluster, settings

    async def start(self) -> None:
        """Create the producer (its producer id comes from the controller: a Ray call);
        with ``transactional_id``, initialise its transactions (``init_transactions()``)."""
        from .producer import Producer

        if self._client is None:
            producer = await self._run(Producer, self._cluster, **self._settings)
            if self._settings.get("transactional_id") is not None:
                try:
                    await self._run(producer.init_transactions)
                except BaseException:
                    await self._run(producer.close)
                    raise
            self._client = producer

    # -- transactions (aiokafka's names) --------------------------------------------------------
    def transaction(self) -> "TransactionContext":
        """``async with producer.transaction():`` -- begin; commit at the end of the block,
        abort if it raises (not after a fatal error such as ProducerFencedError: that is
        raised as it is)."""
        return TransactionContext(self)

    def begin_transaction(self) -> None:
        self._require().begin_transaction()

    async def commit_transaction(self) -> None:
        await self._run(self._require().commit_transaction)

    async def abort_transaction(self) -> None:
        await self._run(self._require().abort_transaction)

    async def send_offsets_to_transaction(self, offsets: dict, group_id: Any) -> None:
        """``Producer.send_offsets_to_transaction``: ``group_id`` a group id str (aiokafka)
        or ``ConsumerGroupMetadata`` (kafka-python)."""
        await self._run(self._require().send_offsets_to_transaction, offsets, group_id)

    async def send(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> "asyncio.Future[RecordMetadata]":
        """Queue one record (``Producer.send``'s arguments) and return an asyncio Future
        resolving to its ``RecordMetadata`` (or raising its KafkaError) once acknowledged.
        Raises at once for bad input, as ``Producer.send``."""
        producer = self._require()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        sent = await self._run(producer.send, topic, value, key, **kwargs)

        def resolve(outcome: Any, ok: bool) -> None:
            if not future.done():
                future.set_result(outcome) if ok else future.set_exception(outcome)

        sent.add_callback(lambda md: loop.call_soon_threadsafe(resolve, md, True))
        sent.add_errback(lambda exc: loop.call_soon_threadsafe(resolve, exc, False))
        return future

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> RecordMetadata:
        """Send one record and wait until it is acknowledged: its ``RecordMetadata``."""
        return await (await self.send(topic, value, key, **kwargs))

    async def send_batch(self, topic: str, *args: Any, **kwargs: Any) -> Any:
        """``Producer.send_batch`` (blocks until every record is acknowledged) off the loop."""
        return await self._run(self._require().send_batch, topic, *args, **kwargs)

    async def flush(self, timeout: float | None = None) -> None:
        await self._run(self._require().flush, timeout)

    def metrics(self) -> dict[str, Any]:
        return self._require().metrics()

    async def partitions_for(self, topic: str) -> set[int]:
        return await self._run(self._require().partitions_for, topic)


class TransactionContext:
    """What ``AIOProducer.transaction()`` returns (aiokafka's TransactionContext)."""

    def __init__(self, producer: AIOProducer) -> None:
        self._producer = producer

    async def __aenter__(self) -> "TransactionContext":
        self._producer.begin_transaction()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self._producer.commit_transaction()
            return
        if self._producer._require()._txn.manager.state is TransactionState.FATAL_ERROR:
            return  # nothing to abort: the producer is done, the block's error goes on
        await self._producer.abort_transaction()


class AIOConsumer(_Wrapped):
    """``Consumer`` for asyncio: ``AIOConsumer(*topics, cluster=..., **consumer_settings)``.
    ``async for record in consumer`` yields records one by one (positions advance as they
    are yielded, as with the blocking iterator) and ends when nothing arrived for
    ``consumer_timeout_ms`` (default: never)."""

    _kind = "consumer"

    def __init__(self, *topics: str, cluster: ClusterClient | None = None, **settings: Any) -> None:
        super().__init__()
        self._topics, self._cluster, self._settings = topics, cluster, settings
        self._buffer: list[ConsumerRecord] = []
        self._timeout_ms = float(settings.get("consumer_timeout_ms", float("inf")))

    async def start(self) -> None:
        """Create the consumer (metadata and group lookups are Ray calls)."""
        from .consumer import Consumer

        if self._client is None:
            self._client = await self._run(Consumer, *self._topics, cluster=self._cluster, **self._settings)

    async def getmany(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """``Consumer.poll``: ``{TopicPartition: [records]}``, waiting up to ``timeout_ms``."""
        consumer = self._require()
        if self._buffer:
            raise RuntimeError("getmany() after getone()/async for left records undelivered; keep to one style")
        return await self._run(consumer.poll, timeout_ms, max_records)

    async def getone(self) -> ConsumerRecord:
        """The next record, waiting as long as it takes."""
        while True:
            record = await self._next(wait_ms=1000)
            if record is not None:
                return record

    async def _next(self, wait_ms: float) -> ConsumerRecord | None:
        consumer = self._require()
        if not self._buffer:
            # One record at a time from the blocking iterator's positions would cost a thread
            # hop per record: take a poll's worth, keep it, and seek back on stop() if unread.
            polled = await self._run(consumer.poll, wait_ms)
            self._buffer = [r for recs in polled.values() for r in recs]
            self._buffer.reverse()
        return self._buffer.pop() if self._buffer else None

    def __aiter__(self) -> "AIOConsumer":
        return self

    async def __anext__(self) -> ConsumerRecord:
        deadline = time.monotonic() + self._timeout_ms / 1000
        while True:
            remaining_ms = (deadline - time.monotonic()) * 1000
            if remaining_ms <= 0:
                raise StopAsyncIteration
            record = await self._next(wait_ms=min(remaining_ms, 1000.0))
            if record is not None:
                return record

    def _rewind_unread(self) -> None:
        """Records taken by a poll but not yet handed out are read again (nothing skipped)."""
        first: dict[TopicPartition, int] = {}
        for r in self._buffer:
            tp = TopicPartition(r.topic, r.partition)
            first[tp] = min(first.get(tp, r.offset), r.offset)
        for tp, offset in first.items():
            self._client.seek(tp, offset)
        self._buffer.clear()

    async def commit(self, offsets: Any = None) -> None:
        """``Consumer.commit``; without offsets, the positions after the records handed out."""
        self._rewind_unread()
        await self._run(self._require().commit, offsets)

    def group_metadata(self) -> Any:
        """``Consumer.group_metadata()``, for ``AIOProducer.send_offsets_to_transaction``."""
        return self._require().group_metadata()

    async def committed(self, partition: TopicPartition) -> int | None:
        return await self._run(self._require().committed, partition)

    async def offsets_for_times(self, timestamps: dict) -> dict:
        return await self._run(self._require().offsets_for_times, timestamps)

    async def beginning_offsets(self, partitions: Any) -> dict:
        return await self._run(self._require().beginning_offsets, partitions)

    async def end_offsets(self, partitions: Any) -> dict:
        return await self._run(self._require().end_offsets, partitions)

    async def position(self, partition: TopicPartition) -> int:
        self._rewind_unread()
        return await self._run(self._require().position, partition)

    async def subscribe(self, *args: Any, **kwargs: Any) -> None:
        await self._run(self._require().subscribe, *args, **kwargs)

    async def assign(self, partitions: Any) -> None:
        self._rewind_unread()
        await self._run(self._require().assign, partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._rewind_unread()
        self._require().seek(partition, offset)

    def assignment(self) -> set[TopicPartition]:
        return self._require().assignment()

    def metrics(self) -> dict[str, Any]:
        return self._require().metrics()

    async def stop(self) -> None:
        if self._client is not None:
            self._rewind_unread()
        await super().stop()
