"""The producer's sender thread: an asyncio loop that takes batches off the
:class:`~kcoord.client.producer.accumulator.RecordAccumulator` (one request in flight per
partition; queued ``send()`` batches merged up to ``max_request_size``) and delivers them
to the partition leaders: retries, metadata refresh and backoff within
``delivery_timeout_ms``, and completing batches (futures, callbacks, buffer memory).

The accumulator wakes the loop through a :class:`Wakeup` (from any thread, under the
accumulator's lock); the producer's :class:`~kcoord.client.producer.idempotence.ProducerIdentity`
stamps each batch with its sequence before it is first sent.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING

from ...calls import ERROR, ActorCalls, CallFailed, actor_calls, close_actor_calls
from ...calls.retry import Step, step_after, take_step
from ...protocol.errors import DecodeError, ErrorCode, KafkaError
from ...protocol.replication import DescribeProducersRequest, DescribeProducersResponse, ProduceRequest, ProduceResponse
from ..cluster import ClusterClient
from ..metrics import RequestStats
from ..types import TopicPartition
from .accumulator import PartitionQueue, RecordAccumulator
from .batch import ProducerBatch
from .futures import run_callbacks
from .idempotence import SEND, WAIT, WRITTEN, ProducerIdentity, resume_verdict

if TYPE_CHECKING:
    from .transactions import TransactionalIdentity, Transactions

logger = logging.getLogger("kcoord.producer")

_monotonic = time.monotonic
class Wakeup:
    """Wakes the sender's loop from any thread; wakes coalesce until the sender takes them.
    ``wake()`` and reading or clearing ``pending`` happen under the accumulator's lock."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending = False
        self.event: asyncio.Event | None = None

    def wake(self) -> None:
        if not self.pending:
            self.pending = True
            try:
                self.loop.call_soon_threadsafe(self._set)
            except RuntimeError:  # loop closed
                pass

    def _set(self) -> None:
        if self.event is not None:
            self.event.set()


class Sender:
    """The thread that delivers a producer's batches (see the module doc)."""

    def __init__(
        self,
        cluster: ClusterClient,
        accumulator: RecordAccumulator,
        identity: "ProducerIdentity | TransactionalIdentity",
        metrics: dict[str, int],
        stats: RequestStats,
        wakeup: Wakeup,
        *,
        acks: int,
        retries: int,
        retry_backoff_ms: int,
        delivery_timeout_ms: int,
        request_timeout_ms: int,
        compression: int,
        linger_ms: float,
        max_in_flight: int,
        metadata_refresh_ms: int,
        transactions: "Transactions | None" = None,
    ) -> None:
        self.cluster = cluster
        # A transactional producer's: adds a batch's partition to the transaction first.
        self.transactions = transactions
        self.accumulator = accumulator
        self.identity = identity
        self.metrics = metrics
        self.stats = stats
        self.acks = acks
        self.retries = retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self._compression = compression
        self._linger_s = linger_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._refresh_interval_s = metadata_refresh_ms / 1000
        self._wakeup = wakeup
        self._loop = wakeup.loop
        self._in_flight = 0  # requests in flight (under the accumulator's lock)
        self._abort = False
        self._refreshing: dict[str, asyncio.Future] = {}
        # Calls to the leaders (kcoord.calls: over a leader's direct-call channel when it is
        # on this node), made on the sender's loop.
        self.calls: ActorCalls | None = None
        self._last_refresh: dict[str, float] = {}
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, name="kcoord-producer-sender", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self._started.wait()

    def stop(self, timeout: float = 30) -> None:
        """Fail what is still undelivered and end the thread."""
        with self.accumulator.lock:
            self._abort = True
            self._wakeup.wake()
        self.thread.join(timeout=timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except Exception:  # pragma: no cover - a bug; fail what is left rather than hang
            logger.exception("producer sender crashed")
        finally:
            self._fail_all(KafkaError(ErrorCode.REQUEST_TIMED_OUT, "producer closed before the record was delivered"))
            try:
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    async def _main(self) -> None:
        wakeup = self._wakeup
        event = wakeup.event = asyncio.Event()
        acc = self.accumulator
        tasks: set[asyncio.Task] = set()
        self.calls = actor_calls(self.cluster.namespace)
        self._started.set()
        while True:
            now = _monotonic()
            with acc.lock:
                wakeup.pending = False
                if self._abort:
                    break
                launch, timeout = acc.drain_locked(now, self._linger_s, self.max_in_flight - self._in_flight)
                self._in_flight += len(launch)
                if acc.closing and not acc.incomplete and not self._in_flight:
                    break
            for ps, batch in launch:
                task = self._loop.create_task(self._send(ps, batch))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            try:
                if timeout is None:
                    await event.wait()
                else:
                    await asyncio.wait_for(event.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            event.clear()
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        close_actor_calls()

    async def _send(self, ps: PartitionQueue, batch: ProducerBatch) -> None:
        try:
            await self._deliver(ps, batch)
        except asyncio.CancelledError:
            self._complete(batch, error=KafkaError(ErrorCode.REQUEST_TIMED_OUT, "producer closed before the record was delivered"))
            raise
        except Exception as exc:  # a bug must not leave futures hanging
            logger.exception("sending a batch to %s-%d failed unexpectedly", ps.topic, ps.partition)
            self._fail(batch, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"producer internal error: {exc!r}"))
        finally:
            with self.accumulator.lock:
                self.accumulator.sent_locked(ps)
                self._in_flight -= 1
            if self._wakeup.event is not None:
                self._wakeup.event.set()

    async def _deliver(self, ps: PartitionQueue, batch: ProducerBatch) -> None:
        topic, p = ps.topic, ps.partition
        deadline = batch.created + self.delivery_timeout_ms / 1000
        last_error = "no attempt yet"
        retries_left = self.retries
        if self.transactions is not None:
            refused = await self.transactions.before_send(TopicPartition(topic, p), deadline)
            if refused is not None:  # aborted, failed, or not added in time
                # through the identity: a batch of the transaction that fails (e.g. expired
                # waiting for AddPartitionsToTxn) makes it abortable, as Kafka's failBatch,
                # so that a commit cannot go on without its records
                self._fail(batch, refused)
                return
        self.identity.assign_sequence(ps, batch)
        if batch.data is None:
            try:
                batch.data = batch.build(self._compression)
            except (TypeError, ValueError, KafkaError) as exc:
                self._fail(batch, exc if isinstance(exc, KafkaError) else KafkaError(ErrorCode.INVALID_RECORD, str(exc)))
                return
        if self._written_before(ps, batch):
            return
        self.metrics["batches_sent"] += 1
        stats = self.stats
        while True:
            now = _monotonic()
            if now >= deadline:
                self._fail(
                    batch,
                    KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"{len(batch)} record(s) for {topic}-{p} expired after delivery_timeout_ms={self.delivery_timeout_ms} "
                        f"({batch.attempts} attempt(s); last error: {last_error})",
                    ),
                )
                return
            md = self._leader(topic, p)
            if md is None or md.leader < 0:
                last_error = f"{topic}-{p} has no leader"
                await self._step(Step.NO_LEADER, topic, p, -1, deadline)
                continue
            name = self.cluster.replica_name(topic, p, md.leader)
            request = ProduceRequest(
                topic, p, batch.data, acks=self.acks, timeout_ms=self.request_timeout_ms, current_leader_epoch=md.leader_epoch,
                # the leader verifies a transaction's first batch with its coordinator (KIP-890)
                transactional_id=self.transactions.transactional_id if self.transactions is not None else None,
                # KIP-890 part 2: the leader adds the partition to the transaction
                implicit_add=self.transactions is not None and self.transactions.manager.implicit_adds,
            ).encode()
            batch.attempts += 1
            self.metrics["requests"] += 1
            if batch.attempts > 1:
                self.metrics["retries"] += 1
            wait_s = min(self.request_timeout_ms / 1000 + 5, max(0.05, deadline - now))
            sent = _monotonic()
            if self.acks == 0:
                # Nobody waits for the leader: the batch is done once the request is on its
                # way (as in Kafka, once it is sent; flush() and close() wait for that much).
                # Still wait for the answer before the next batch of this partition so that
                # batches stay in order.
                answer = await self.calls.submit(name, "produce", request, timeout=wait_s)
                self._complete(batch)
                try:
                    await answer
                    stats.latency.record((_monotonic() - sent) * 1000)
                except CallFailed as exc:  # acks=0: errors are not reported, only counted
                    stats.request_errors.add(exc)
                    logger.debug("acks=0 produce to %s-%d: %s", topic, p, exc)
                return
            try:
                # A leader whose channel breaks after the request went out is treated as
                # dead (it may have appended: the retry's sequence numbers make it safe).
                raw = await self.calls.call(name, "produce", request, timeout=wait_s)
            except CallFailed as exc:
                stats.request_errors.add(exc)
                last_error = f"leader {name}: {exc}"
                step = step_after(exc.kind)
                if step is Step.GIVE_UP:
                    self._fail(batch, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"produce to {name} failed: {exc.detail}"))
                    return
                await self._step(step, topic, p, md.leader_epoch, deadline)
                continue
            stats.latency.record((_monotonic() - sent) * 1000)
            try:
                resp = ProduceResponse.decode(raw)
            except DecodeError as exc:
                stats.request_errors.add(exc)
                last_error = str(exc)
                await self._step(Step.BACKOFF, topic, p, md.leader_epoch, deadline)
                continue
            code = resp.error_code
            if code == 0:
                if resp.duplicate:
                    self.metrics["duplicates"] += 1
                self.metrics["records_sent"] += len(batch)
                self._complete(batch, resp.base_offset, resp.log_append_time, duplicate=resp.duplicate)
                return
            if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self.identity.explicit:
                verdict = await self._resume(ps, batch, deadline)
                if verdict == WRITTEN:
                    self._written_before(ps, batch)
                    return
                if verdict == SEND:  # its predecessor landed meanwhile
                    await self._step(Step.BACKOFF, topic, p, md.leader_epoch, deadline)
                    continue
            err = KafkaError(code, resp.error_message or "")
            stats.request_errors.add(err)
            last_error = str(err)
            if err.retriable and retries_left > 0:
                retries_left -= 1
                await self._step(step_after(stale_metadata=err.needs_metadata_refresh), topic, p, md.leader_epoch, deadline)
                continue
            self._fail(batch, err)
            return

    def _written_before(self, ps: PartitionQueue, batch: ProducerBatch) -> bool:
        """Complete ``batch`` as a duplicate (offsets unknown) if the leader holds it from an
        earlier attempt of this explicit identity (``ps.written_through``)."""
        if ps.written_through < 0 or (batch.producer_id, batch.producer_epoch) != ps.identity:
            return False
        if batch.base_sequence + len(batch) - 1 > ps.written_through:
            return False
        self.metrics["duplicates"] += 1
        self._complete(batch, duplicate=True)
        return True

    async def _resume(self, ps: PartitionQueue, batch: ProducerBatch, deadline: float) -> str:
        """An explicit-identity batch was answered OUT_OF_ORDER_SEQUENCE_NUMBER: ask the
        leader how far the identity got (DescribeProducers) until the answer is final or the
        delivery deadline passes (:func:`~kcoord.client.producer.idempotence.resume_verdict`)."""
        topic, p = ps.topic, ps.partition
        while _monotonic() < deadline:
            md = self._leader(topic, p)
            if md is None or md.leader < 0:
                await self._step(Step.NO_LEADER, topic, p, -1, deadline)
                continue
            name = self.cluster.replica_name(topic, p, md.leader)
            request = DescribeProducersRequest(topic, p, [batch.producer_id], current_leader_epoch=md.leader_epoch).encode()
            wait_s = min(self.request_timeout_ms / 1000 + 5, max(0.05, deadline - _monotonic()))
            try:
                resp = DescribeProducersResponse.decode(await self.calls.call(name, "describe_producers", request, timeout=wait_s))
            except (CallFailed, DecodeError) as exc:  # gone, silent, failed or garbled: ask whoever leads next
                logger.debug("describe_producers of %s: %r", name, exc)
                await self._step(step_after(stale_metadata=True) if isinstance(exc, DecodeError) or exc.kind == ERROR else step_after(exc.kind), topic, p, md.leader_epoch, deadline)
                continue
            if resp.error_code:
                await self._step(step_after(stale_metadata=True), topic, p, md.leader_epoch, deadline)
                continue
            verdict = resume_verdict(batch, resp)
            if verdict == WRITTEN:
                last = next(s.last_sequence for s in resp.producers if s.producer_id == batch.producer_id)
                ps.written_through = max(ps.written_through, last)
                return verdict
            if verdict != WAIT:
                return verdict
            await self._step(Step.BACKOFF, topic, p, md.leader_epoch, deadline)
        return WAIT

    def _leader(self, topic: str, partition: int):
        md = self.cluster.cached_topic(topic)
        if md is None or partition >= len(md.partitions):
            return None
        return md.partitions[partition]

    async def _step(self, step: Step, topic: str, partition: int, epoch: int, deadline: float) -> None:
        """The retry policy's ``step`` (:mod:`kcoord.calls.retry`) before the next attempt at
        ``topic``-``partition``, whose last attempt went to the leader of ``epoch``."""

        def leader_epoch() -> int:
            md = self._leader(topic, partition)
            return -1 if md is None or md.leader < 0 else md.leader_epoch

        await take_step(
            step,
            refresh=lambda: self._refresh(topic, force=True),
            leader_epoch=leader_epoch,
            epoch=epoch,
            backoff_s=self._backoff_s,
            deadline=deadline,
        )

    async def _refresh(self, topic: str, force: bool = False) -> None:
        """Refresh ``topic``'s metadata, coalescing concurrent and too-frequent refreshes."""
        pending = self._refreshing.get(topic)
        if pending is not None:
            await asyncio.shield(pending)
            return
        if not force and _monotonic() - self._last_refresh.get(topic, 0.0) < self._refresh_interval_s:
            return
        fut = self._loop.create_future()
        self._refreshing[topic] = fut
        try:
            md = await self.cluster.atopic(topic, refresh=True)
            self.accumulator.update_metadata(md)
        except Exception as exc:  # the controller may be restarting: retry on the next error
            logger.debug("metadata refresh of %s failed: %r", topic, exc)
        finally:
            self._last_refresh[topic] = _monotonic()
            del self._refreshing[topic]
            fut.set_result(None)

    # -- completion ----------------------------------------------------------------------------
    def _fail(self, batch: ProducerBatch, error: BaseException) -> None:
        """Fail ``batch``; if its sequence was assigned, the partition now has a hole the
        leader would reject, so an auto-identity producer bumps its epoch."""
        self.identity.on_failed(batch, error)
        self._complete(batch, error=error)

    def _complete(
        self,
        batch: ProducerBatch,
        base_offset: int = -1,
        log_append_time: int = -1,
        error: BaseException | None = None,
        duplicate: bool = False,
    ) -> None:
        if batch.done.is_set():
            return
        if batch.parts is not None:  # a merged request: complete the batches it was made of
            start = 0
            for part in batch.parts:
                self._complete(part, base_offset + start if base_offset >= 0 else -1, log_append_time, error, duplicate)
                start += len(part)
            batch.complete(base_offset, log_append_time, error, duplicate)
            return
        if error is not None:
            self.stats.record_errors.add(error, len(batch))
        callbacks = batch.complete(base_offset, log_append_time, error, duplicate)
        self.accumulator.completed(batch)
        if callbacks:
            run_callbacks(callbacks, batch)

    def _fail_all(self, error: KafkaError) -> None:
        for b in self.accumulator.incomplete_batches():
            self._complete(b, error=error)
