"""The producer's sender thread: an asyncio loop that takes batches off the partition
queues and delivers them to the partition leaders.

A mixin of :class:`~kcoord.client.producer.Producer` (it works on the producer's queues,
counters and lock); split out so that each file holds one side of the producer. Here:
waking the loop, choosing what to send (one request in flight per partition; queued
``send()`` batches merged up to ``max_request_size``), delivery with retries, metadata
refresh and backoff within ``delivery_timeout_ms``, and completing batches (futures,
callbacks, buffer memory).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

from ray.exceptions import RayActorError

from ..protocol.errors import DecodeError, ErrorCode, KafkaError
from ..protocol.replication import ProduceRequest, ProduceResponse
from .accumulator import BATCH_OVERHEAD, ProducerBatch, merge_batches
from .futures import run_callbacks
from .liveness import ActorGoneError, call_probing
from .producer_queues import PartitionState

logger = logging.getLogger("kcoord.producer")

_monotonic = time.monotonic


class SenderLoop:
    """The sender thread's side of the producer (mixed into Producer)."""

    def _wake(self) -> None:
        """Wake the sender loop from any thread (under _lock); coalesced."""
        if not self._wake_pending:
            self._wake_pending = True
            try:
                self._loop.call_soon_threadsafe(self._set_wake)
            except RuntimeError:  # loop closed
                pass

    def _set_wake(self) -> None:
        if self._wake_event is not None:
            self._wake_event.set()

    def _run_sender(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._sender_main(started))
        except Exception:  # pragma: no cover - a bug; fail what is left rather than hang
            logger.exception("producer sender crashed")
        finally:
            self._fail_all(KafkaError(ErrorCode.REQUEST_TIMED_OUT, "producer closed before the record was delivered"))
            try:
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    async def _sender_main(self, started: threading.Event) -> None:
        self._wake_event = asyncio.Event()
        tasks: set[asyncio.Task] = set()
        started.set()
        while True:
            now = _monotonic()
            with self._lock:
                self._wake_pending = False
                if self._abort:
                    break
                launch, timeout = self._drain(now)
                if self._closing and not self._incomplete and not self._in_flight:
                    break
            for ps, batch in launch:
                task = self._loop.create_task(self._send(ps, batch))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            try:
                if timeout is None:
                    await self._wake_event.wait()
                else:
                    await asyncio.wait_for(self._wake_event.wait(), timeout)
            except asyncio.TimeoutError:
                pass
            self._wake_event.clear()
        for task in list(tasks):
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _drain(self, now: float) -> tuple[list[tuple[PartitionState, ProducerBatch]], float | None]:
        """Pick the batches to send now (under _lock): one per partition with none in flight,
        ready batches first, then open batches whose linger expired. Returns them and the
        seconds until the next linger deadline (None: nothing to wait for)."""
        launch = []
        next_due: float | None = None
        urgent = self._flushing > 0 or self._closing
        for ps in list(self._pending):
            if ps.in_flight:
                continue
            if self._in_flight >= self.max_in_flight:
                break
            if ps.ready:
                batch = ps.ready.popleft()
                if ps.ready and not batch.sealed and not ps.ready[0].sealed:
                    batch = self._merge_queued(ps, batch)
            else:
                b = ps.open
                if b is None or not b.values:
                    self._pending.discard(ps)
                    continue
                due = b.created + self._linger_s
                if not urgent and now < due:
                    next_due = due if next_due is None or due < next_due else next_due
                    continue
                batch = b
                ps.open = None
                t = self._topics[ps.topic]
                if t.sticky == ps.partition:
                    self._next_sticky(t)
            if not ps.ready and ps.open is None:
                self._pending.discard(ps)
            ps.in_flight = True
            self._in_flight += 1
            launch.append((ps, batch))
        return launch, (None if next_due is None else max(0.0, next_due - now))

    def _merge_queued(self, ps: PartitionState, batch: ProducerBatch) -> ProducerBatch:
        """``batch`` plus the send() batches queued behind it, up to max_request_size bytes,
        as one request (under _lock). send_batch() batches are never merged: their
        boundaries must stay exactly as planned."""
        limit = self._topics[ps.topic].request_limit
        parts = [batch]
        size = batch.size
        while ps.ready and not ps.ready[0].sealed and size + ps.ready[0].size - BATCH_OVERHEAD <= limit:
            nxt = ps.ready.popleft()
            parts.append(nxt)
            size += nxt.size - BATCH_OVERHEAD
        if len(parts) == 1:
            return batch
        self.metrics["merged_requests"] += 1
        return merge_batches(parts)

    async def _send(self, ps: PartitionState, batch: ProducerBatch) -> None:
        try:
            await self._deliver(ps, batch)
        except asyncio.CancelledError:
            self._complete(batch, error=KafkaError(ErrorCode.REQUEST_TIMED_OUT, "producer closed before the record was delivered"))
            raise
        except Exception as exc:  # a bug must not leave futures hanging
            logger.exception("sending a batch to %s-%d failed unexpectedly", ps.topic, ps.partition)
            self._complete(batch, error=KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"producer internal error: {exc!r}"))
        finally:
            with self._lock:
                ps.in_flight = False
                self._in_flight -= 1
                if ps.ready or ps.open is not None:
                    self._pending.add(ps)
            if self._wake_event is not None:
                self._wake_event.set()

    async def _deliver(self, ps: PartitionState, batch: ProducerBatch) -> None:
        topic, p = ps.topic, ps.partition
        deadline = batch.created + self.delivery_timeout_ms / 1000
        last_error = "no attempt yet"
        retries_left = self.retries
        self._identity.assign_sequence(ps, batch)
        if batch.data is None:
            try:
                batch.data = batch.build(self._compression)
            except (TypeError, ValueError, KafkaError) as exc:
                self._fail(batch, exc if isinstance(exc, KafkaError) else KafkaError(ErrorCode.INVALID_RECORD, str(exc)))
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
            if self.acks == 0:
                # Nobody waits for the leader; still wait for the answer before the next
                # batch of this partition so that batches stay in order.
                self._complete(batch)
                try:
                    await asyncio.wait_for(handle.produce.remote(request), wait_s)
                except Exception as exc:  # acks=0: errors are not reported
                    logger.debug("acks=0 produce to %s-%d: %r", topic, p, exc)
                return
            try:
                # Probing: a leader that was killed is known to Ray's GCS within ~30 ms,
                # while the call itself would only fail 1-2 s later.
                raw = await call_probing(handle.produce.remote(request), handle, wait_s, probe_every=0.1)
            except (RayActorError, ActorGoneError) as exc:
                self.cluster.forget(name)
                last_error = f"leader {name} unavailable ({type(exc).__name__})"
                await self._refresh_or_backoff(topic, p, md.leader_epoch, deadline)
                continue
            except asyncio.TimeoutError:
                # Alive per Ray but silent: look the actor up again and ask who leads now.
                self.cluster.forget(name)
                last_error = f"no answer from {name} within {wait_s:.1f} s"
                await self._refresh(topic, force=True)
                continue
            except Exception as exc:  # RayTaskError and friends: the call itself broke
                last_error = f"{type(exc).__name__}: {exc}"
                await self._backoff(deadline)
                continue
            if self._drop_responses > 0:
                self._drop_responses -= 1
                last_error = "response dropped (test hook)"
                continue
            try:
                resp = ProduceResponse.decode(raw)
            except DecodeError as exc:
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
            err = KafkaError(code, resp.error_message or "")
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

    def _leader(self, topic: str, partition: int):
        md = self.cluster.cached_topic(topic)
        if md is None or partition >= len(md.partitions):
            return None
        return md.partitions[partition]

    async def _refresh_or_backoff(self, topic: str, partition: int, epoch: int, deadline: float) -> None:
        """Refresh metadata; back off only if it does not name a newer leader yet (retrying
        at once against a freshly elected leader is what keeps failover short)."""
        await self._refresh(topic, force=True)
        md = self._leader(topic, partition)
        if md is None or md.leader < 0 or md.leader_epoch <= epoch:
            await self._backoff(deadline)

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
            t = self._topics.get(topic)
            if t is not None:
                with self._lock:
                    t.available = [pm.partition for pm in md.partitions if pm.leader >= 0]
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
        self._identity.on_failed(batch)
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
        callbacks = batch.complete(base_offset, log_append_time, error, duplicate)
        with self._lock:
            self._incomplete.discard(batch)
            if not batch.sealed:
                self._buffered -= batch.size - BATCH_OVERHEAD
                if self._memory_waiters:
                    self._space.notify_all()
        if callbacks:
            run_callbacks(callbacks, batch)

    def _fail_all(self, error: KafkaError) -> None:
        with self._lock:
            batches = list(self._incomplete)
        for b in batches:
            self._complete(b, error=error)
