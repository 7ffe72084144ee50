"""Fetched records on the consumer side: decoded column segments, and what poll() hands out.

A fetched chunk (record batch bytes) is decoded one chunk at a time into
:class:`Segment` columns; ``poll()`` turns the slice it takes into :class:`ConsumerRecord`
tuples without Python bytecode per record, and ``poll_columns()`` into
:class:`RecordColumns` without per-record objects at all.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from functools import partial
from itertools import chain as _chain
from itertools import repeat
from typing import Any, NamedTuple

from ... import records as _records
from ...record.control import AbortedFilter
from ..types import ConsumerRecord, TopicPartition
from .subscription_state import AssignedPartition

_new_record = partial(tuple.__new__, ConsumerRecord)
_NO_HEADERS: tuple = ()


@dataclass(eq=False, slots=True)
class Segment:
    """One decoded batch as columns; rows ``[start, len(values))`` are still to return.
    Records stay columns until a poll() takes them (then only that slice becomes
    ConsumerRecord tuples), so poll_columns() never builds per-record objects."""

    base: int  # offset of row 0
    start: int
    values: list
    keys: list | None
    timestamps: list | None  # None: every row has ``timestamp``
    timestamp: int
    timestamp_type: int
    headers: list | None
    leader_epoch: int


class RecordColumns(NamedTuple):
    """Records of one partition as columns (:meth:`Consumer.poll_columns`): row ``i`` is the
    record at offset ``offsets[i]``. ``headers`` is None when no record has any."""

    topic: str
    partition: int
    offsets: range
    timestamps: list
    timestamp_types: list
    keys: list
    values: list
    headers: list | None

    def __len__(self) -> int:  # type: ignore[override]
        return len(self.values)


def decode_chunk(st: AssignedPartition, check_crcs: bool) -> None:
    """Decode one fetched chunk into column segments, skipping rows below decode_from, and
    batches of aborted transactions (a chunk fetched read_committed comes as ``(bytes,
    aborted transactions)``)."""
    item = st.pending.popleft()
    if type(item) is tuple:
        data, aborted = item
        dropping: AbortedFilter | None = AbortedFilter(aborted)
    else:
        data, dropping = item, None
    start = st.decode_from
    segments = []
    for pos, h in _records.iter_headers(data):
        if h.next_offset <= start:
            continue
        if (dropping is not None and dropping.drops(data, pos, h)) or not h.record_count or h.attributes & _records.CONTROL_BIT:
            # an aborted transaction's batch, an emptied batch (compaction) or a transaction
            # marker: nothing to return
            start = h.next_offset
            continue
        batch = _records.decode_batch(data, pos, check_crc=check_crcs)
        base = h.base_offset
        log_append = h.timestamp_type == _records.LOG_APPEND_TIME
        segments.append(
            Segment(
                base,
                start - base if start > base else 0,
                batch.values,
                batch.keys,
                None if log_append else batch.timestamps,
                h.max_timestamp if log_append else h.first_timestamp,
                h.timestamp_type,
                batch.headers,
                h.leader_epoch,
            )
        )
        start = h.next_offset
    st.decode_from = start
    st.segments.extend(segments)


def records_of(tp: TopicPartition, pieces: list) -> list[ConsumerRecord]:
    """The records of consecutive segment slices ``pieces`` of ``tp`` as ConsumerRecord
    tuples, built without Python bytecode per record."""
    # The cyclic GC never untracks instances of a tuple *subclass* (ConsumerRecord), so
    # collections while tens of thousands of them are created walk them again and again
    # (~4x the cost of building them); pause it while building one poll's worth.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        topic, partition = tp
        out: list[ConsumerRecord] = []
        for seg, lo, hi in pieces:
            whole = lo == 0 and hi == len(seg.values)
            values = seg.values if whole else seg.values[lo:hi]
            if seg.timestamps is None:
                stamps: Any = repeat(seg.timestamp)
            else:
                stamps = seg.timestamps if whole else seg.timestamps[lo:hi]
            if seg.keys is None:
                keys: Any = repeat(None)
            else:
                keys = seg.keys if whole else seg.keys[lo:hi]
            if seg.headers is None:
                hdrs: Any = repeat(_NO_HEADERS)
            else:
                hdrs = seg.headers if whole else seg.headers[lo:hi]
            base = seg.base
            out.extend(
                map(
                    _new_record,
                    zip(
                        repeat(topic),
                        repeat(partition),
                        range(base + lo, base + hi),
                        stamps,
                        repeat(seg.timestamp_type),
                        keys,
                        values,
                        hdrs,
                        repeat(seg.leader_epoch),
                    ),
                )
            )
        return out
    finally:
        if paused:
            gc.enable()


def columns_of(tp: TopicPartition, pieces: list) -> RecordColumns:
    """RecordColumns of consecutive segment slices of one partition."""
    first_seg, first_lo, _ = pieces[0]
    last_seg, _, last_hi = pieces[-1]
    if len(pieces) == 1:
        seg, lo, hi = pieces[0]
        n = hi - lo
        whole = lo == 0 and hi == len(seg.values)
        values = seg.values if whole else seg.values[lo:hi]
        return RecordColumns(
            tp.topic,
            tp.partition,
            range(seg.base + lo, seg.base + hi),
            [seg.timestamp] * n if seg.timestamps is None else (seg.timestamps if whole else seg.timestamps[lo:hi]),
            [seg.timestamp_type] * n,
            [None] * n if seg.keys is None else (seg.keys if whole else seg.keys[lo:hi]),
            values,
            None if seg.headers is None else (seg.headers if whole else seg.headers[lo:hi]),
        )
    parts = [columns_of(tp, [p]) for p in pieces]
    any_headers = any(c.headers is not None for c in parts)
    joined = _chain.from_iterable
    return RecordColumns(
        tp.topic,
        tp.partition,
        range(first_seg.base + first_lo, last_seg.base + last_hi),
        list(joined(c.timestamps for c in parts)),
        list(joined(c.timestamp_types for c in parts)),
        list(joined(c.keys for c in parts)),
        list(joined(c.values for c in parts)),
        list(joined(c.headers if c.headers is not None else [_NO_HEADERS] * len(c) for c in parts)) if any_headers else None,
    )


def concat(a: Any, b: Any) -> Any:
    """Join two takes of one partition (record lists or RecordColumns)."""
    if isinstance(a, RecordColumns):
        headers = None
        if a.headers is not None or b.headers is not None:
            headers = (a.headers if a.headers is not None else [_NO_HEADERS] * len(a)) + (b.headers if b.headers is not None else [_NO_HEADERS] * len(b))
        return RecordColumns(
            a.topic, a.partition, range(a.offsets.start, b.offsets.stop), a.timestamps + b.timestamps,
            a.timestamp_types + b.timestamp_types, a.keys + b.keys, a.values + b.values, headers,
        )
    return a + b
