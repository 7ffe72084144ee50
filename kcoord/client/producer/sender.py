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
from typing import Awaitable, Callable

from ray.exceptions import RayActorError

from ... import channel
from ...calls import ActorGoneError, call_probing
from ...protocol.errors import DecodeError, ErrorCode, KafkaError
from ...protocol.replication import DescribeProducersRequest, DescribeProducersResponse, ProduceRequest, ProduceResponse
from ..cluster import ClusterClient
from ..metrics import RequestStats
from .accumulator import PartitionQueue, RecordAccumulator
from .batch import ProducerBatch
from .futures import run_callbacks
from .idempotence import SEND, WAIT, WRITTEN, ProducerIdentity, resume_verdict

logger = logging.getLogger("kcoord.producer")

_monotonic = time.monotonic
# Waits between metadata refreshes while a partition waits for a new leader: 10 ms, then 20.
REFRESH_WAITS_S = (0.01, 0.02)


async def wait_for_newer_leader(
    refresh: Callable[[], Awaitable[None]], leader_epoch: Callable[[], int], epoch: int, backoff_s: float, deadline: float
) -> bool:
    """Refresh metadata until it names a leader newer than ``epoch`` (``leader_epoch()``
    reads it after each refresh, -1 when there is no leader), for at most ``backoff_s`` and
    never past ``deadline``; True once it does.

    Why not one refresh then a whole backoff, as Kafka's producer does: the controller elects
    within tens of milliseconds of hearing of a death, and a retry that sat out the rest of
    a 100 ms backoff after the new leader was known was a third of a failover. The refreshes
    come 10 then 20 ms apart (``REFRESH_WAITS_S``): about five metadata calls per 100 ms of
    backoff, coalesced per topic, and only while a partition's leader is gone."""
    end = min(deadline, _monotonic() + backoff_s)
    waits = iter(REFRESH_WAITS_S)
    wait = next(waits)
    while True:
        await refresh()
        if leader_epoch() > epoch:
            return True
        now = _monotonic()
        if now >= end:
            return False
        await asyncio.sleep(min(wait, end - now))
        wait = next(waits, wait)


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
        identity: ProducerIdentity,
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
    ) -> None:
        self.cluster = cluster
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
        # Produce requests to a leader on this node go over its direct-call channel (see
        # kcoord.channel); set up on the sender's loop.
        self.direct: channel.DirectCalls | None = None
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
        if channel.enabled():
            try:
                self.direct = channel.DirectCalls(channel.current_node_id())
            except Exception:  # not connected to Ray the usual way: Ray calls only
                self.direct = None
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
        if self.direct is not None:
            self.direct.client.close()

    async def _send(self, ps: PartitionQueue, batch: ProducerBatch) -> None:
        try:
            await self._deliver(ps, batch)
        except asyncio.CancelledError:
            self._complete(batch, error=KafkaError(ErrorCode.REQUEST_TIMED_OUT, "producer closed before the record was delivered"))
            raise
        except Exception as exc:  # a bug must not leave futures hanging
            logger.exception("sending a batch to %s-%d failed unexpectedly", ps.topic, ps.partition)
            self._complete(batch, error=KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"producer internal error: {exc!r}"))
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
                await self._refresh(topic)
                await self._backoff(deadline)
                continue
            name = self.cluster.replica_name(topic, p, md.leader)
            try:
                handle = self.cluster.handle(name)
            except KafkaError as exc:
                last_error = str(exc)
                await self._refresh(topic)
                await self._backoff(deadline)
                continue
            request = ProduceRequest(
                topic, p, batch.data, acks=self.acks, timeout_ms=self.request_timeout_ms, current_leader_epoch=md.leader_epoch
            ).encode()
            batch.attempts += 1
            self.metrics["requests"] += 1
            if batch.attempts > 1:
                self.metrics["retries"] += 1
            wait_s = min(self.request_timeout_ms / 1000 + 5, max(0.05, deadline - now))
            stats = self.stats
            sent = _monotonic()
            if self.acks == 0:
                # Nobody waits for the leader; still wait for the answer before the next
                # batch of this partition so that batches stay in order.
                self._complete(batch)
                try:
                    await asyncio.wait_for(handle.produce.remote(request), wait_s)
                    stats.latency.record((_monotonic() - sent) * 1000)
                except Exception as exc:  # acks=0: errors are not reported, only counted
                    stats.request_errors.add(exc)
                    logger.debug("acks=0 produce to %s-%d: %r", topic, p, exc)
                return
            try:
                raw = None
                if self.direct is not None:
                    # A broken connection after the request went out is the leader's
                    # process dying: handled below as a dead leader (ChannelUnavailable).
                    raw = await self.direct.call(name, handle, "produce", request, wait_s)
                if raw is None:
                    # Probing: a leader that was killed is known to Ray's GCS within ~30 ms,
                    # while the call itself would only fail 1-2 s later.
                    raw = await call_probing(handle.produce.remote(request), handle, wait_s, probe_every=0.1)
            except (RayActorError, ActorGoneError, channel.ChannelUnavailable) as exc:
                stats.request_errors.add(exc)
                self.cluster.forget(name)
                last_error = f"leader {name} unavailable ({type(exc).__name__})"
                await self._refresh_or_backoff(topic, p, md.leader_epoch, deadline)
                continue
            except asyncio.TimeoutError as exc:
                stats.request_errors.add(exc)
                # Alive per Ray but silent: look the actor up again and ask who leads now.
                self.cluster.forget(name)
                last_error = f"no answer from {name} within {wait_s:.1f} s"
                await self._refresh(topic, force=True)
                continue
            except Exception as exc:  # RayTaskError and friends: the call itself broke
                stats.request_errors.add(exc)
                last_error = f"{type(exc).__name__}: {exc}"
                await self._backoff(deadline)
                continue
            stats.latency.record((_monotonic() - sent) * 1000)
            try:
                resp = ProduceResponse.decode(raw)
            except DecodeError as exc:
                stats.request_errors.add(exc)
                last_error = str(exc)
                await self._backoff(deadline)
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
                    await self._backoff(deadline)
                    continue
            err = KafkaError(code, resp.error_message or "")
            stats.request_errors.add(err)
            last_error = str(err)
            if err.retriable and retries_left > 0:
                retries_left -= 1
                if err.needs_metadata_refresh:
                    await self._refresh_or_backoff(topic, p, md.leader_epoch, deadline)
                else:
                    await self._backoff(deadline)
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
                await self._refresh(topic, force=True)
                await self._backoff(deadline)
                continue
            name = self.cluster.replica_name(topic, p, md.leader)
            request = DescribeProducersRequest(topic, p, [batch.producer_id], current_leader_epoch=md.leader_epoch).encode()
            try:
                handle = self.cluster.handle(name)
                wait_s = min(self.request_timeout_ms / 1000 + 5, max(0.05, deadline - _monotonic()))
                raw = await call_probing(handle.describe_producers.remote(request), handle, wait_s, probe_every=0.1)
                resp = DescribeProducersResponse.decode(raw)
            except Exception as exc:  # gone, silent or garbled: ask whoever leads next
                logger.debug("describe_producers of %s: %r", name, exc)
                self.cluster.forget(name)
                await self._refresh_or_backoff(topic, p, md.leader_epoch, deadline)
                continue
            if resp.error_code:
                await self._refresh_or_backoff(topic, p, md.leader_epoch, deadline)
                continue
            verdict = resume_verdict(batch, resp)
            if verdict == WRITTEN:
                last = next(s.last_sequence for s in resp.producers if s.producer_id == batch.producer_id)
                ps.written_through = max(ps.written_through, last)
                return verdict
            if verdict != WAIT:
                return verdict
            await self._backoff(deadline)
        return WAIT

    def _leader(self, topic: str, partition: int):
        md = self.cluster.cached_topic(topic)
        if md is None or partition >= len(md.partitions):
            return None
        return md.partitions[partition]

    async def _refresh_or_backoff(self, topic: str, partition: int, epoch: int, deadline: float) -> None:
        """Refresh metadata until it names a newer leader, at most one backoff long
        (:func:`wait_for_newer_leader`): retrying at once against a freshly elected leader
        is what keeps failover short."""

        def leader_epoch() -> int:
            md = self._leader(topic, partition)
            return -1 if md is None or md.leader < 0 else md.leader_epoch

        await wait_for_newer_leader(lambda: self._refresh(topic, force=True), leader_epoch, epoch, self._backoff_s, deadline)

    async def _backoff(self, deadline: float) -> None:
        await asyncio.sleep(max(0.0, min(self._backoff_s, deadline - _monotonic())))

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
        self.identity.on_failed(batch)
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
