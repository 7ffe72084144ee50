"""The producer's queues below ``send()``: per topic and partition, the open batch and the
batches ready to go.

:class:`TopicState` and :class:`PartitionState` hold them (plus a topic's size limits and
partitioner state); the :class:`SendQueues` mixin of
:class:`~kcoord.client.producer.Producer` decides which batch a record joins, seals full
batches, moves null-key records to the next sticky partition, and blocks ``send()`` while
``buffer_memory`` is full. Everything here runs under the producer's lock, mostly in the
caller's thread; the per-record fast path itself stays in ``Producer.send``.
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, field

from ..log.config import LogConfig
from ..protocol.controller import TopicMetadata
from ..protocol.errors import ErrorCode, KafkaError
from . import partitioner as _part
from .accumulator import ProducerBatch, single_record_limit

DEFAULT_MAX_MESSAGE_BYTES = LogConfig().max_batch_bytes
_monotonic = time.monotonic


@dataclass(eq=False)
class PartitionState:
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


@dataclass(eq=False)
class TopicState:
    """A topic as the producer sees it: its partitions' queues, size limits and partitioner
    state."""

    name: str
    num_partitions: int
    partitions: list[PartitionState]
    all_partitions: list[int]
    available: list[int]
    max_message_bytes: int
    batch_limit: int  # estimated bytes per batch: min(batch_size, max.message.bytes)
    record_limit: int  # the largest single record that fits max.message.bytes
    request_limit: int  # queued send() batches merged into one request up to this size
    sticky: int = 0
    round_robin: int = 0
    hashes: _part.KeyHashCache = field(default_factory=_part.KeyHashCache)


class SendQueues:
    """Batch selection, sealing, sticky partitions, buffer memory and the per-topic state
    (mixed into Producer). Apart from ``_topic_state``, which takes it, these run under the
    producer's ``_lock``."""

    def _before_append(self) -> None:
        """send()'s rare checks (under _lock): closed producer, full buffer."""
        if self._closing:
            raise RuntimeError("send() on a closed producer")
        if self._buffered >= self.buffer_memory:
            self._wait_for_space()

    def _batch_for(self, t: TopicState, ps: PartitionState, size: int, sticky: bool) -> ProducerBatch:
        """The batch a record of ``size`` goes to when ``ps`` has no open batch or it is full
        (under _lock). A full batch goes to the sender; a null-key record then moves on to
        the next sticky partition."""
        b = ps.open
        if b is not None:
            self._seal_open(t, ps)
            if sticky:
                ps = t.partitions[t.sticky]
                b = ps.open
                if b is not None and b.size + size > t.batch_limit:
                    self._seal_open(t, ps)
                    b = None
            else:
                b = None
        if b is None:
            b = self._new_batch(t, ps)
        return b

    def _partition_for(self, t: TopicState, key: bytes | None) -> int:
        p = self._partitioner
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

    def _new_batch(self, t: TopicState, ps: PartitionState) -> ProducerBatch:
        """A fresh open batch for ``ps`` (under _lock); wakes the sender if it sleeps with
        nothing to do, so that linger_ms starts counting."""
        b = ProducerBatch(t.name, ps.partition, _monotonic())
        ps.open = b
        self._incomplete.add(b)
        if ps not in self._pending:
            self._pending.add(ps)
            self._wake()
        return b

    def _seal_open(self, t: TopicState, ps: PartitionState) -> None:
        """Move ``ps``'s open batch to its ready queue (under _lock) and, if it was the
        sticky partition, stick to another one from now on."""
        b = ps.open
        if b is None:
            return
        ps.open = None
        if b.values:
            ps.ready.append(b)
            if not ps.in_flight:
                self._wake()
        else:
            self._incomplete.discard(b)
            b.complete()
        if t.sticky == ps.partition:
            self._next_sticky(t)

    def _next_sticky(self, t: TopicState) -> None:
        choices = t.available or t.all_partitions
        if len(choices) > 1:
            nxt = choices[random.randrange(len(choices) - 1)]
            t.sticky = nxt if nxt != t.sticky else choices[-1]
        else:
            t.sticky = choices[0]

    def _wait_for_space(self) -> None:
        """Block (under _lock, via the condition) until buffered bytes drop below
        buffer_memory; meanwhile send open batches at once instead of lingering."""
        deadline = _monotonic() + self.max_block_ms / 1000
        self._memory_waiters += 1
        self._flushing += 1
        self._wake()
        try:
            while self._buffered >= self.buffer_memory:
                remaining = deadline - _monotonic()
                if remaining <= 0:
                    raise KafkaError(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"buffer_memory={self.buffer_memory} bytes still full after max_block_ms={self.max_block_ms}",
                    )
                self._space.wait(remaining)
        finally:
            self._memory_waiters -= 1
            self._flushing -= 1

    def _topic_state(self, topic: str) -> TopicState:
        if not isinstance(topic, str) or not topic:
            raise TypeError(f"topic must be a non-empty str, got {topic!r}")
        md = self.cluster.topic(topic)
        with self._lock:
            t = self._topics.get(topic)
            if t is None:
                t = self._make_topic_state(md)
                self._topics[topic] = t
        return t

    def _make_topic_state(self, md: TopicMetadata) -> TopicState:
        n = len(md.partitions)
        try:
            max_bytes = int(md.config.get("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES))
        except (TypeError, ValueError):
            max_bytes = DEFAULT_MAX_MESSAGE_BYTES
        all_parts = list(range(n))
        available = [p.partition for p in md.partitions if p.leader >= 0]
        t = TopicState(
            name=md.name,
            num_partitions=n,
            partitions=[PartitionState(md.name, i) for i in range(n)],
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
