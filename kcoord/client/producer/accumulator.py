"""The producer's queues: per topic and partition, the open batch ``send()`` appends to and
the batches ready to go.

:class:`TopicQueue` and :class:`PartitionQueue` hold them (plus a topic's size limits and
partitioner state). :class:`RecordAccumulator` owns them and everything shared between the
threads that append (``send()``, ``send_batch()``) and the sender thread that drains: one
lock, the set of partitions with something to send, the batches not yet complete, and the
buffered bytes that make ``send()`` block while ``buffer_memory`` is full. It decides
which batch a record joins, seals full batches, moves null-key records to the next sticky
partition, and picks the batches to send (:meth:`RecordAccumulator.drain`). It wakes the
sender through the ``wake`` callable it is given, always while holding its lock.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ...log.config import LogConfig
from ...protocol.controller import TopicMetadata
from ...protocol.errors import ErrorCode, KafkaError
from ..cluster import ClusterClient
from . import partitioner as _part
from .batch import BATCH_OVERHEAD, ProducerBatch, merge_batches, single_record_limit

DEFAULT_MAX_MESSAGE_BYTES = LogConfig().max_batch_bytes
_monotonic = time.monotonic


class AppendGate(Protocol):
    """Whether records may be appended now (a transactional producer: inside a
    transaction), read in the append's critical section."""

    appends_open: bool

    def refuse_append(self) -> None:
        """Raise why not."""


class _AlwaysOpen:
    appends_open = True

    def refuse_append(self) -> None:  # pragma: no cover - never closed
        pass


_ALWAYS_OPEN = _AlwaysOpen()


@dataclass(eq=False)
class PartitionQueue:
    """One partition's queue: the open batch send() appends to, sealed batches ready to go,
    whether a request is in flight, and its sequence bookkeeping."""

    topic: str
    partition: int
    open: ProducerBatch | None = None
    ready: deque = field(default_factory=deque)
    in_flight: bool = False
    # Sequence bookkeeping: the next base sequence under producer identity ``identity``.
    identity: tuple[int, int] = (-1, -1)
    next_sequence: int = 0
    # An explicit identity resuming an earlier attempt's write: the last sequence the
    # leader holds committed for it (batches up to it are not sent again; -1: none known).
    written_through: int = -1


@dataclass(eq=False)
class TopicQueue:
    """A topic as the producer sees it: its partitions' queues, size limits and partitioner
    state."""

    name: str
    num_partitions: int
    partitions: list[PartitionQueue]
    all_partitions: list[int]
    available: list[int]
    max_message_bytes: int
    batch_limit: int  # estimated bytes per batch: min(batch_size, max.message.bytes)
    record_limit: int  # the largest single record that fits max.message.bytes
    request_limit: int  # queued send() batches merged into one request up to this size
    sticky: int = 0
    round_robin: int = 0
    hashes: _part.KeyHashCache = field(default_factory=_part.KeyHashCache)


class RecordAccumulator:
    """The producer's queues and the state shared with its sender (see the module doc).

    Methods named ``*_locked`` run with :attr:`lock` held by the caller; the others take it
    themselves."""

    def __init__(
        self,
        cluster: ClusterClient,
        *,
        batch_size: int,
        max_request_size: int,
        buffer_memory: int,
        max_block_ms: int,
        partitioner: str | _part.UserPartitioner,
        wake: Callable[[], None],
        metrics: dict[str, int],
        gate: AppendGate | None = None,
        on_new_batch: Callable[[str, int], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.batch_size = batch_size
        self.max_request_size = max_request_size
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.partitioner = partitioner
        self.sticky_null_keys = partitioner is _part.DEFAULT
        self._wake = wake
        self.metrics = metrics
        self.lock = threading.Lock()
        self.space = threading.Condition(self.lock)
        self.topics: dict[str, TopicQueue] = {}
        self.pending: set[PartitionQueue] = set()  # partitions with an open or ready batch
        self.incomplete: set[ProducerBatch] = set()
        self.buffered = 0
        self.memory_waiters = 0
        self.flushing = 0  # flush()/close()/a full buffer: send open batches at once
        self.closing = False
        # A transactional producer's: appends only while ``gate.appends_open``, checked in
        # the append's critical section; ``on_new_batch(topic, partition)`` when a batch
        # opens (the partition joins the transaction: once per batch, not per record).
        self.gate = gate if gate is not None else _ALWAYS_OPEN
        self.on_new_batch = on_new_batch

    # ------------------------------------------------------------------------------------
    # topics
    # ------------------------------------------------------------------------------------
    def topic(self, topic: str) -> TopicQueue:
        """The queues of ``topic``, created from its metadata on first use."""
        t = self.topics.get(topic)
        if t is not None:
            return t
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        md = self.cluster.topic(topic)
        with self.lock:
            t = self.topics.get(topic)
            if t is None:
                t = self._make_topic(md)
                self.topics[topic] = t
        return t

    def _make_topic(self, md: TopicMetadata) -> TopicQueue:
        n = len(md.partitions)
        try:
            max_bytes = int(md.config.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES))
        except (TypeError, ValueError):
            max_bytes = DEFAULT_MAX_MESSAGE_BYTES
        all_parts = list(range(n))
        available = [p.partition for p in md.partitions if p.leader >= 0]
        t = TopicQueue(
            name=md.name,
            num_partitions=n,
            partitions=[PartitionQueue(md.name, i) for i in range(n)],
            all_partitions=all_parts,
            available=available,
            max_message_bytes=max_bytes,
            batch_limit=max(1, min(self.batch_size, max_bytes)),
            request_limit=max(1, min(max(self.batch_size, self.max_request_size), max_bytes)),
            record_limit=single_record_limit(max_bytes),
        )
        choices = available or all_parts
        t.sticky = choices[random.randrange(len(choices))]
        t.round_robin = random.randrange(n)
        return t

    def update_metadata(self, md: TopicMetadata) -> None:
        """Fresh metadata of a topic: which partitions have a leader now, and partitions
        added since (create_partitions; a topic never shrinks) get queues of their own."""
        t = self.topics.get(md.name)
        if t is None:
            return
        with self.lock:
            n = len(md.partitions)
            if n > t.num_partitions:
                t.partitions += [PartitionQueue(md.name, i) for i in range(t.num_partitions, n)]
                t.all_partitions = list(range(n))
                t.num_partitions = n
            t.available = [p.partition for p in md.partitions if p.leader >= 0]

    def refresh_topic(self, topic: str) -> TopicQueue:
        """``topic``'s queues after a metadata refresh (send() to a partition this producer
        has not seen yet, as kafka-python waits on metadata for it)."""
        t = self.topic(topic)
        self.update_metadata(self.cluster.topic(topic, refresh=True))
        return t

    def partition_for(self, t: TopicQueue, key: bytes | None) -> int:
        p = self.partitioner
        if p is _part.DEFAULT:  # key is not None here
            return t.hashes.partition(key, t.num_partitions)
        if p is _part.ROUND_ROBIN:
            parts = t.available or t.all_partitions
            t.round_robin += 1
            return parts[t.round_robin % len(parts)]
        chosen = p(key, list(t.all_partitions), list(t.available))
        if type(chosen) is not int or not 0 <= chosen < t.num_partitions:
            raise ValueError(f"partitioner returned {chosen!r}, not a partition of {t.name!r} (0..{t.num_partitions - 1})")
        return chosen

    # ------------------------------------------------------------------------------------
    # appending (the callers' threads)
    # ------------------------------------------------------------------------------------
    def append(
        self,
        t: TopicQueue,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: list | None,
        timestamp_ms: int,
        size: int,
    ) -> tuple[ProducerBatch, int]:
        """Add one checked record of estimated ``size`` to its partition's open batch;
        returns the batch and the record's index in it. The per-record hot path of
        ``Producer.send``: one lock round, two list appends for a record without key or
        headers; anything unusual goes to a helper."""
        lock = self.lock
        lock.acquire()
        try:
            if self.closing or self.buffered >= self.buffer_memory or not self.gate.appends_open:
                self._before_append_locked()
            sticky = False
            if partition is None:
                if key is None and self.sticky_null_keys:
                    partition = t.sticky
                    sticky = True
                else:
                    partition = self.partition_for(t, key)
            ps = t.partitions[partition]
            b = ps.open
            if b is None or b.size + size > t.batch_limit:
                b = self._batch_for_locked(t, ps, size, sticky)
            values = b.values
            index = len(values)
            values.append(value)
            b.timestamps.append(timestamp_ms)
            if key is not None or headers is not None or b.keys is not None or b.headers is not None:
                b.add_key_and_headers(index, key, headers)
            b.size += size
            self.buffered += size
        finally:
            lock.release()
        return b, index

    def append_sealed(self, t: TopicQueue, by_partition: dict[int, list[ProducerBatch]]) -> None:
        """Queue the sealed batches of a bulk write behind each partition's open batch."""
        with self.lock:
            if self.closing:
                raise RuntimeError("send_batch() on a closed producer")
            if not self.gate.appends_open:
                self.gate.refuse_append()
            for p in sorted(by_partition):
                if self.on_new_batch is not None:
                    self.on_new_batch(t.name, p)
                ps = t.partitions[p]
                self._seal_open_locked(t, ps)
                ps.ready.extend(by_partition[p])
                self.incomplete.update(by_partition[p])
                self.pending.add(ps)
            self._wake()

    def _before_append_locked(self) -> None:
        """append()'s rare checks: closed producer, closed gate, full buffer (the gate is
        checked again after the wait, which releases the lock: a commit may have begun)."""
        if self.closing:
            raise RuntimeError("send() on a closed producer")
        if not self.gate.appends_open:
            self.gate.refuse_append()
        if self.buffered >= self.buffer_memory:
            self._wait_for_space_locked()
            if not self.gate.appends_open:
                self.gate.refuse_append()

    def _batch_for_locked(self, t: TopicQueue, ps: PartitionQueue, size: int, sticky: bool) -> ProducerBatch:
        """The batch a record of ``size`` goes to when ``ps`` has no open batch or it is full.
        A full batch goes to the sender; a null-key record then moves on to the next sticky
        partition."""
        b = ps.open
        if b is not None:
            self._seal_open_locked(t, ps)
            if sticky:
                ps = t.partitions[t.sticky]
                b = ps.open
                if b is not None and b.size + size > t.batch_limit:
                    self._seal_open_locked(t, ps)
                    b = None
            else:
                b = None
        if b is None:
            b = self._new_batch_locked(t, ps)
        return b

    def _new_batch_locked(self, t: TopicQueue, ps: PartitionQueue) -> ProducerBatch:
        """A fresh open batch for ``ps``; wakes the sender if it sleeps with nothing to do,
        so that linger_ms starts counting."""
        b = ProducerBatch(t.name, ps.partition, _monotonic())
        if self.on_new_batch is not None:
            self.on_new_batch(t.name, ps.partition)
        ps.open = b
        self.incomplete.add(b)
        if ps not in self.pending:
            self.pending.add(ps)
            self._wake()
        return b

    def _seal_open_locked(self, t: TopicQueue, ps: PartitionQueue) -> None:
        """Move ``ps``'s open batch to its ready queue and, if it was the sticky partition,
        stick to another one from now on."""
        b = ps.open
        if b is None:
            return
        ps.open = None
        if b.values:
            ps.ready.append(b)
            if not ps.in_flight:
                self._wake()
        else:
            self.incomplete.discard(b)
            b.complete()
        if t.sticky == ps.partition:
            self._next_sticky(t)

    def _next_sticky(self, t: TopicQueue) -> None:
        choices = t.available or t.all_partitions
        if len(choices) > 1:
            nxt = choices[random.randrange(len(choices) - 1)]
            t.sticky = nxt if nxt != t.sticky else choices[-1]
        else:
            t.sticky = choices[0]

    def _wait_for_space_locked(self) -> None:
        """Block (via the condition) until buffered bytes drop below buffer_memory;
        meanwhile send open batches at once instead of lingering."""
        deadline = _monotonic() + self.max_block_ms / 1000
        self.memory_waiters += 1
        self.flushing += 1
        self._wake()
        try:
            while self.buffered >= self.buffer_memory:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"buffer_memory={self.buffer_memory} bytes still full after max_block_ms={self.max_block_ms}",
                    )
                self.space.wait(remaining)
        finally:
            self.memory_waiters -= 1
            self.flushing -= 1

    # ------------------------------------------------------------------------------------
    # flush / close
    # ------------------------------------------------------------------------------------
    def begin_flush(self, closing: bool = False) -> list[ProducerBatch]:
        """Send everything queued at once (ignoring linger_ms) until :meth:`end_flush`;
        returns the batches to wait for. ``closing`` also refuses further appends. It takes
        the lock: once the gate is closed, every record it let in is among them."""
        with self.lock:
            if closing:
                self.closing = True
            self.flushing += 1
            batches = list(self.incomplete)
            self._wake()
        return batches

    def end_flush(self) -> None:
        with self.lock:
            self.flushing -= 1

    # ------------------------------------------------------------------------------------
    # draining (the sender thread)
    # ------------------------------------------------------------------------------------
    def drain_locked(self, now: float, linger_s: float, slots: int) -> tuple[list[tuple[PartitionQueue, ProducerBatch]], float | None]:
        """Pick up to ``slots`` batches to send now: one per partition with none in flight,
        ready batches first, then open batches whose linger expired; each partition picked
        is marked in flight. Returns them and the seconds until the next linger deadline
        (None: nothing to wait for)."""
        launch = []
        next_due: float | None = None
        urgent = self.flushing > 0 or self.closing
        for ps in list(self.pending):
            if ps.in_flight:
                continue
            if len(launch) >= slots:
                break
            if ps.ready:
                batch = ps.ready.popleft()
                if ps.ready and not batch.sealed and not ps.ready[0].sealed:
                    batch = self._merge_queued_locked(ps, batch)
            else:
                b = ps.open
                if b is None or not b.values:
                    self.pending.discard(ps)
                    continue
                due = b.created + linger_s
                if not urgent and now < due:
                    next_due = due if next_due is None or due < next_due else next_due
                    continue
                batch = b
                ps.open = None
                t = self.topics[ps.topic]
                if t.sticky == ps.partition:
                    self._next_sticky(t)
            if not ps.ready and ps.open is None:
                self.pending.discard(ps)
            ps.in_flight = True
            launch.append((ps, batch))
        return launch, (None if next_due is None else max(0.0, next_due - now))

    def _merge_queued_locked(self, ps: PartitionQueue, batch: ProducerBatch) -> ProducerBatch:
        """``batch`` plus the send() batches queued behind it, up to max_request_size bytes,
        as one request. send_batch() batches are never merged: their boundaries must stay
        exactly as planned."""
        limit = self.topics[ps.topic].request_limit
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

    def sent_locked(self, ps: PartitionQueue) -> None:
        """The request in flight for ``ps`` is over: its next batch may go."""
        ps.in_flight = False
        if ps.ready or ps.open is not None:
            self.pending.add(ps)

    def completed(self, batch: ProducerBatch) -> None:
        """``batch`` is complete (acknowledged or failed): release its buffer memory."""
        with self.lock:
            self.incomplete.discard(batch)
            if not batch.sealed:
                self.buffered -= batch.size - BATCH_OVERHEAD
                if self.memory_waiters:
                    self.space.notify_all()

    def incomplete_batches(self) -> list[ProducerBatch]:
        with self.lock:
            return list(self.incomplete)
