"""Idempotent-producer state: which sequence numbers each producer has already written.

A producer with ``enable_idempotence`` numbers its batches (``base_sequence``) per partition
and retries a batch with the same numbers when a response is lost. The leader must then
answer "already have it" instead of writing it twice, and must refuse a gap (an earlier
batch was lost, so writing this one would reorder records).

Kafka's rules (ProducerStateEntry, ProducerAppendInfo): a batch is a duplicate only when its
epoch, first and last sequence match one of the producer's last :data:`CACHED_BATCHES`
batches, and the answer carries that batch's offsets; any other batch of the current epoch
that does not start at the next sequence is OUT_OF_ORDER_SEQUENCE_NUMBER, whether it lies
ahead or behind. A batch behind the cache may be another writer's under the same identity
(an older process of a group coordinator), so it is never acknowledged unseen.

The state is derived only from batch headers, so every replica rebuilds the same state from
the same log: a follower that becomes leader deduplicates exactly like its predecessor.

Sequence numbers are int32 in the batch header; kcoord ignores wrap-around (a producer
would need two billion batches per partition under one producer epoch to reach it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, NamedTuple

from ..protocol.errors import ErrorCode, KafkaError
from ..records import BatchHeader

CACHED_BATCHES = 5  # Kafka's max.in.flight.requests.per.connection limit for idempotence


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    """One producer's epoch and its most recent batches (oldest first)."""

    producer_id: int
    epoch: int
    batches: deque[BatchMetadata]

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


@dataclass(frozen=True)
class ProducerCheck:
    """Verdict of :meth:`ProducerStateManager.check` for a batch the leader is about to write.

    Exactly one of: ok, ``duplicate`` (with the original batch's base offset), or
    ``error`` with a message.
    """

    duplicate: bool = False
    duplicate_base_offset: int = -1
    error: ErrorCode | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return not self.duplicate and self.error is None

    def raise_for_error(self) -> None:
        if self.error is not None:
            raise KafkaError(self.error, self.message)


OK = ProducerCheck()


def _tracked(h: BatchHeader) -> bool:
    # A batch without a producer id, or without a sequence, is not idempotent.
    return h.producer_id >= 0 and h.base_sequence >= 0


class ProducerStateManager:
    """Per producer id: epoch plus the metadata of its last :data:`CACHED_BATCHES` batches."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def __contains__(self, producer_id: int) -> bool:
        return producer_id in self._producers

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ProducerStateManager):
            return self.snapshot() == other.snapshot()
        return NotImplemented

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.snapshot()})"

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def producer_ids(self) -> list[int]:
        return sorted(self._producers)

    def last_offsets(self) -> dict[int, int]:
        """Each producer's last batch's last offset (what the cleaner keeps; Kafka's
        lastRecordsOfActiveProducers)."""
        return {pid: e.batches[-1].last_offset for pid, e in self._producers.items() if e.batches}

    def retained_batches(self) -> set[tuple[int, int]]:
        """(producer id, last offset) of every batch remembered for deduplication (the
        last five per producer): the cleaner keeps each, emptied if need be."""
        return {(pid, b.last_offset) for pid, e in self._producers.items() for b in e.batches}

    def check(self, h: BatchHeader) -> ProducerCheck:
        """Decide whether the leader may append batch ``h`` (see the module docstring)."""
        if not _tracked(h):
            return OK
        entry = self._producers.get(h.producer_id)
        first, last = h.base_sequence, h.last_sequence
        pid = h.producer_id
        if entry is None:
            if first != 0:
                return ProducerCheck(
                    error=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message=f"producer {pid} is unknown here, so its first batch must have sequence 0, got {first}",
                )
            return OK
        if h.producer_epoch < entry.epoch:
            return ProducerCheck(
                error=ErrorCode.INVALID_PRODUCER_EPOCH,
                message=f"producer {pid} epoch {h.producer_epoch} is older than the current epoch {entry.epoch}",
            )
        if h.producer_epoch > entry.epoch:
            if first != 0:
                return ProducerCheck(
                    error=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message=f"producer {pid} started epoch {h.producer_epoch} at sequence {first}, expected 0",
                )
            return OK
        for b in entry.batches:
            if b.first_seq == first and b.last_seq == last:
                return ProducerCheck(duplicate=True, duplicate_base_offset=b.base_offset)
        if first == entry.last_seq + 1:
            return OK
        where = f"behind, and not one of its last {CACHED_BATCHES} batches" if first <= entry.last_seq else "after a gap"
        return ProducerCheck(
            error=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            message=f"producer {pid} epoch {entry.epoch}: expected sequence {entry.last_seq + 1}, got {first}..{last} ({where})",
        )

    def update(self, h: BatchHeader) -> None:
        """Record an appended batch (leader and follower paths alike)."""
        if not _tracked(h):
            return
        meta = BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset)
        entry = self._producers.get(h.producer_id)
        if entry is None or h.producer_epoch != entry.epoch:
            # A new epoch starts the sequence over, so older batches can no longer match.
            self._producers[h.producer_id] = ProducerEntry(h.producer_id, h.producer_epoch, deque([meta], CACHED_BATCHES))
        else:
            entry.batches.append(meta)

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        """Forget everything and replay ``headers`` (the batches left in the log)."""
        self._producers.clear()
        self.replay(headers)

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        for h in headers:
            self.update(h)

    def clear(self) -> None:
        self._producers.clear()

    # -- persistence and describe ---------------------------------------------------------

    def snapshot(self) -> dict[int, dict[str, Any]]:
        """Plain data (msgpack-able): ``{producer_id: {"epoch", "batches": [[first_seq,
        last_seq, base_offset, last_offset], ...]}}``."""
        return {
            pid: {"epoch": e.epoch, "batches": [list(b) for b in e.batches]}
            for pid, e in sorted(self._producers.items())
        }

    def load(self, snapshot: dict[int, dict[str, Any]]) -> None:
        """Replace the state with one produced by :meth:`snapshot`."""
        producers: dict[int, ProducerEntry] = {}
        for pid, data in snapshot.items():
            batches = deque((BatchMetadata(*map(int, b)) for b in data["batches"]), CACHED_BATCHES)
            producers[int(pid)] = ProducerEntry(int(pid), int(data["epoch"]), batches)
        self._producers = producers
