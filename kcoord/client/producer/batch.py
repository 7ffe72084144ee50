"""Producer batches, with no Ray and no threads: what a batch holds, how big a record is, and
how a bulk write is cut into batches.

Sizes are *estimates* of the packed batch (see :mod:`kcoord.records`: one msgpack array of
columns) that never undercount, so a batch cut at ``limit`` estimated bytes always packs into
at most ``limit`` real bytes and the leader's ``max.message.bytes`` check cannot fail on a
batch the producer built.

:func:`split_batches` is a pure function of its input: the same records and limit give the
same batch boundaries every time. Exactly-once bulk writes (a retried Spark task re-sending
identical batches with identical sequence numbers) depend on that.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ... import records as _records

# msgpack framing of one record, worst case: bin32 header for the value (5) and the key (5),
# an int64 timestamp delta (9), and a nil/array marker for headers (1).
RECORD_OVERHEAD = 20
# Batch header plus the msgpack array and column headers around the payload.
BATCH_OVERHEAD = _records.HEADER_SIZE + 32
# msgpack framing per header pair: a 2-array (1), str32 header (5), bin32 header (5).
HEADER_OVERHEAD = 11


def headers_size(headers: Sequence[tuple[str, bytes]] | None) -> int:
    if not headers:
        return 0
    size = 5
    for k, v in headers:
        size += HEADER_OVERHEAD + len(k) * 4 + len(v)  # a str may take 4 bytes per char
    return size


def record_size(value: bytes | None, key: bytes | None = None, headers: Sequence[tuple[str, bytes]] | None = None) -> int:
    """Upper bound of one record's share of a packed batch."""
    size = RECORD_OVERHEAD
    if value is not None:
        size += len(value)
    if key is not None:
        size += len(key)
    if headers:
        size += headers_size(headers)
    return size


def single_record_limit(max_message_bytes: int) -> int:
    """The largest record (by :func:`record_size`) that fits a batch of its own."""
    return max_message_bytes - BATCH_OVERHEAD


@dataclass(eq=False, slots=True)
class ProducerBatch:
    """Records on their way to one partition, and later the outcome of sending them.

    The column lists grow with every ``send()``. ``keys`` and ``headers`` stay None until a
    record has one (then they are back-filled with None), so the common no-key, no-header
    record costs two list appends. Record futures point at the batch and an index; the
    sender fills in ``base_offset``/``error`` and sets ``done`` once for all of them.
    """

    topic: str
    partition: int
    created: float  # time.monotonic() of the first record
    values: list = field(default_factory=list)
    keys: list | None = None
    headers: list | None = None
    timestamps: list = field(default_factory=list)
    size: int = BATCH_OVERHEAD
    # True for a batch cut by send_batch(): never appended to by send().
    sealed: bool = False
    # Producer identity and sequence, fixed the first time the batch is drained so that
    # every retry carries the same ones (the leader deduplicates on them).
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False  # a batch of a transaction (attribute bit 0x10)
    data: bytes | None = None
    attempts: int = 0
    # Outcome.
    base_offset: int = -1
    log_append_time: int = -1
    duplicate: bool = False
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    callbacks: list | None = None
    # For a batch merged from several send() batches (see merge_batches): the originals.
    parts: list | None = None

    def __len__(self) -> int:
        return len(self.values)

    def append(self, value: bytes | None, key: bytes | None, headers: list | None, timestamp: int, size: int) -> int:
        """Add one record; returns its index in the batch. (``Producer.send`` inlines this.)"""
        index = len(self.values)
        self.values.append(value)
        self.timestamps.append(timestamp)
        if key is not None or headers or self.keys is not None or self.headers is not None:
            self.add_key_and_headers(index, key, headers or None)
        self.size += size
        return index

    def add_key_and_headers(self, index: int, key: bytes | None, headers: list | None) -> None:
        """The key/headers columns of the record just appended at ``index`` (the values and
        timestamps are appended by the caller): back-filled with None on first use."""
        if key is not None:
            if self.keys is None:
                self.keys = [None] * index
            self.keys.append(key)
        elif self.keys is not None:
            self.keys.append(None)
        if headers:
            if self.headers is None:
                self.headers = [None] * index
            self.headers.append(headers)
        elif self.headers is not None:
            self.headers.append(None)

    def build(self, compression: int = 0) -> bytes:
        """Pack the records with this batch's producer identity and sequence."""
        return _records.build_batch_columns(
            self.values,
            self.keys,
            self.headers,
            self.timestamps,
            compression=compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            transactional=self.transactional,
        )

    # -- outcome -----------------------------------------------------------------------------
    @property
    def is_done(self) -> bool:
        return self.done.is_set()

    def offset_of(self, index: int) -> int:
        return -1 if self.base_offset < 0 else self.base_offset + index

    def timestamp_of(self, index: int) -> int:
        return self.log_append_time if self.log_append_time >= 0 else self.timestamps[index]

    def add_callback(self, fn: Callable[["ProducerBatch"], Any]) -> bool:
        """Register ``fn(batch)`` to run on completion; False if already complete (the
        caller then runs it). The registration is atomic with respect to ``complete``."""
        with _CALLBACK_LOCK:
            if self.done.is_set():
                return False
            if self.callbacks is None:
                self.callbacks = []
            self.callbacks.append(fn)
            return True

    def complete(self, base_offset: int = -1, log_append_time: int = -1, error: BaseException | None = None, duplicate: bool = False) -> list:
        """Record the outcome, release waiters, and return the callbacks to run."""
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        self.duplicate = duplicate
        self.data = None  # free the packed bytes
        with _CALLBACK_LOCK:
            self.done.set()
            callbacks, self.callbacks = self.callbacks, None
        return callbacks or []


def merge_batches(parts: Sequence[ProducerBatch]) -> ProducerBatch:
    """One batch holding the records of ``parts`` (same partition, in order), to go out as
    one request; the originals keep their futures and are completed from it.

    Why: a partition's batches queue up while its one request is in flight (see Producer),
    and every actor call and replication round trip has a fixed cost, so sending the queue
    as one larger batch moves more records per second. Sequence numbers are unaffected:
    the merged batch covers exactly the sequences its parts would have used."""
    first = parts[0]
    merged = ProducerBatch(first.topic, first.partition, min(b.created for b in parts))
    values: list = []
    timestamps: list = []
    any_keys = any(b.keys is not None for b in parts)
    any_headers = any(b.headers is not None for b in parts)
    keys: list | None = [] if any_keys else None
    headers: list | None = [] if any_headers else None
    size = BATCH_OVERHEAD
    for b in parts:
        n = len(b.values)
        values += b.values
        timestamps += b.timestamps
        if keys is not None:
            keys += b.keys if b.keys is not None else [None] * n
        if headers is not None:
            headers += b.headers if b.headers is not None else [None] * n
        size += b.size - BATCH_OVERHEAD
    merged.values, merged.timestamps, merged.keys, merged.headers = values, timestamps, keys, headers
    merged.size = size
    merged.parts = list(parts)
    return merged


# Callbacks are rare; one lock for all batches keeps ProducerBatch small.
_CALLBACK_LOCK = threading.Lock()


def sequence_after(base_sequence: int, count: int) -> int:
    """The next base sequence after a batch of ``count`` records (sequences wrap at 2**31)."""
    return (base_sequence + count) & 0x7FFFFFFF


def record_sizes(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes]] | None] | None = None,
) -> list[int]:
    """:func:`record_size` of every record of a column set (C-speed for the common case)."""
    sizes = [RECORD_OVERHEAD + (len(v) if v is not None else 0) for v in values]
    if keys is not None:
        sizes = [s + (len(k) if k is not None else 0) for s, k in zip(sizes, keys)]
    if headers is not None:
        sizes = [s + headers_size(h) for s, h in zip(sizes, headers)]
    return sizes


def split_batches(sizes: Sequence[int], limit: int) -> list[tuple[int, int]]:
    """Cut records (given by their sizes, in order) into ``[start, end)`` ranges whose
    estimated batch size stays within ``limit``; a record too big to share a batch goes
    alone. Greedy and deterministic."""
    out: list[tuple[int, int]] = []
    start = 0
    acc = BATCH_OVERHEAD
    for i, s in enumerate(sizes):
        if acc + s > limit and i > start:
            out.append((start, i))
            start = i
            acc = BATCH_OVERHEAD
        acc += s
    if start < len(sizes):
        out.append((start, len(sizes)))
    return out


def split_batches_array(sizes: Any, limit: int) -> list[tuple[int, int]]:
    """:func:`split_batches` for a numpy array of sizes: the same ranges, one binary search
    per batch instead of a Python step per record."""
    import numpy as np

    n = len(sizes)
    if n == 0:
        return []
    cum = np.cumsum(sizes, dtype=np.int64)
    room = limit - BATCH_OVERHEAD
    out: list[tuple[int, int]] = []
    start = 0
    while start < n:
        base = int(cum[start - 1]) if start else 0
        end = int(np.searchsorted(cum, base + room, side="right"))
        if end <= start:
            end = start + 1  # a record too big to share a batch goes alone
        out.append((start, end))
        start = end
    return out


def split_uniform(count: int, size: int, limit: int) -> list[tuple[int, int]]:
    """:func:`split_batches` when every record has the same ``size`` (no per-record list)."""
    per = max(1, (limit - BATCH_OVERHEAD) // size) if size > 0 else count
    return [(i, min(i + per, count)) for i in range(0, count, per)]
