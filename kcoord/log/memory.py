"""An in-memory partition log with the file log's behaviour, for deterministic simulation.

The replication simulation (tests/sim) runs many replicas through thousands of seeded
crashes, which real files and fsyncs would make slow and nondeterministic. MemoryLog
shares the append pipeline with :class:`~kcoord.log.Log` (``base.py``), rolls virtual
segments by the same rule (``rolling.py``) so retention deletes the same offsets, and
models durability explicitly: ``flushed_offset`` is what has been "fsynced", and
:meth:`MemoryLog.crash` returns what a restart would find.

Durability model, matching the file log: appended batches are durable once flushed (by
the flush.messages / flush.ms policy or :meth:`flush`; segments rolled since the last
flush also by :meth:`maybe_flush`); the leader-epoch cache and the HW checkpoint are
durable when written; truncation and retention are durable at once. One simplification: after a crash the
producer state is rebuilt from the kept batches only, while the file log may also remember
producers whose batches retention deleted (from its producer snapshots).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Iterator, Sequence

from ..record import BatchHeader
from .base import BaseLog, _BufferLike
from .config import LogConfig
from .epochs import EpochEntry, LeaderEpochCache
from .rolling import must_roll, past_retention, plan_runs
from .segment import SegmentInfo


@dataclass
class _Span:
    """Where the file log would have a segment: its base offset and bookkeeping."""

    base_offset: int
    size: int = 0
    created_ms: int = 0
    last_modified_ms: int = 0
    max_timestamp: int = -1


class MemoryLog(BaseLog):
    def __init__(self, config: LogConfig | None = None, *, now_ms: int | None = None, log_start_offset: int = 0) -> None:
        super().__init__(config if config is not None else LogConfig(), now_ms)
        if log_start_offset < 0:
            raise ValueError(f"log start offset must be >= 0, got {log_start_offset}")
        self._leo = log_start_offset
        self._spans = [_Span(log_start_offset, created_ms=self._now, last_modified_ms=self._now)]
        self._batches: list[bytes] = []
        self._headers: list[BatchHeader] = []
        self._bases: list[int] = []
        self._size = 0
        self._flushed = 0  # batches [0, _flushed) survive a crash
        self._sealed_unsynced = False  # a segment was rolled since the last flush
        self._persisted_epochs: list[EpochEntry] = []
        self.epoch_cache = LeaderEpochCache(on_change=self._persist_epochs)
        self._checkpointed_hw = log_start_offset
        self._high_watermark = log_start_offset

    def _persist_epochs(self, entries: list[EpochEntry]) -> None:
        self._persisted_epochs = list(entries)

    # -- facts ----------------------------------------------------------------------------

    _start_floor = 0  # a log start offset above the first span's base (DeleteRecords)

    @property
    def log_start_offset(self) -> int:
        return max(self._spans[0].base_offset, min(self._start_floor, self._leo))

    def advance_log_start_offset(self, offset: int) -> bool:
        self._check_open()
        offset = min(offset, self._leo)
        if offset <= self.log_start_offset:
            return False
        self._start_floor = offset
        while len(self._spans) > 1 and self._spans[1].base_offset <= offset:
            self._delete_first_span()
        self._start_moved(offset)  # the log start offset is ``offset`` now
        return True

    def _delete_first_span(self) -> None:
        """Drop the oldest virtual segment and its batches (never the active one)."""
        span, next_base = self._spans[0], self._spans[1].base_offset
        k = bisect_left(self._bases, next_base)
        del self._batches[:k], self._headers[:k], self._bases[:k]
        self._flushed = max(0, self._flushed - k)
        self._size -= span.size
        del self._spans[0]

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def flushed_offset(self) -> int:
        """Every batch below this offset survives :meth:`crash`."""
        return self._bases[self._flushed] if self._flushed < len(self._bases) else self._leo

    @property
    def batch_count(self) -> int:
        return len(self._batches)

    @property
    def segments(self) -> list[SegmentInfo]:
        """The segments the file log would have for the same appends."""
        spans = self._spans
        nexts = [s.base_offset for s in spans[1:]] + [self._leo]
        return [
            SegmentInfo(s.base_offset, s.size, nxt, s.created_ms, s.last_modified_ms, s.max_timestamp)
            for s, nxt in zip(spans, nexts)
        ]

    # -- storage hooks --------------------------------------------------------------------

    def _write(
        self,
        chunks: Sequence[_BufferLike],
        nbytes: int,
        headers: Sequence[BatchHeader],
        positions: Sequence[int],
        now_ms: int,
    ) -> None:
        if len(chunks) > 1:  # leader path: stamped prefix + the rest of one batch
            pieces = [b"".join(chunks)]
        else:
            view = memoryview(chunks[0])
            ends = list(positions[1:]) + [nbytes]
            pieces = [bytes(view[a:b]) for a, b in zip(positions, ends)]
        span = self._spans[-1]
        cfg = self.config
        if len(headers) == 1:
            h = headers[0]
            runs = [(0, 1, must_roll(cfg, span.size, span.base_offset, span.created_ms, h.size, h.last_offset, now_ms))]
        else:
            runs = plan_runs(cfg, span.size, span.base_offset, span.created_ms, headers, now_ms)
        for i, j, roll in runs:
            if roll:
                self._roll(now_ms)
            span = self._spans[-1]
            if span.size == 0:
                span.created_ms = now_ms
            for k in range(i, j):
                h = headers[k]
                self._batches.append(pieces[k])
                self._headers.append(h)
                self._bases.append(h.base_offset)
                span.size += h.size
                self._size += h.size
                if h.max_timestamp > span.max_timestamp:
                    span.max_timestamp = h.max_timestamp
            span.last_modified_ms = now_ms
            self._leo = headers[j - 1].next_offset

    def _roll(self, now_ms: int) -> None:
        self._sealed_unsynced = True  # synced by the next flush or maybe_flush, as in the file log
        self._spans.append(_Span(self._leo, created_ms=now_ms, last_modified_ms=now_ms))

    def sync_sealed_segments(self) -> bool:
        if not self._sealed_unsynced:
            return False
        self._sealed_unsynced = False
        self._flushed = max(self._flushed, bisect_left(self._bases, self._spans[-1].base_offset))
        return True

    def _read(self, from_offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        i = bisect_right(self._bases, from_offset) - 1
        out: list[bytes] = []
        total = 0
        while i < len(self._batches):
            h = self._headers[i]
            if max_offset is not None and h.last_offset >= max_offset:
                break
            if out and total + h.size > max_bytes:
                break
            out.append(self._batches[i])
            total += h.size
            i += 1
        return b"".join(out)

    def _truncate_storage(self, offset: int) -> int:
        i = bisect_right(self._bases, offset) - 1
        new_leo = self._bases[i]
        self._size -= sum(h.size for h in self._headers[i:])
        del self._batches[i:], self._headers[i:], self._bases[i:]
        self._leo = new_leo
        # Like the file log: keep the segment that held ``offset``, drop later ones.
        k = bisect_right([s.base_offset for s in self._spans], offset) - 1
        del self._spans[k + 1 :]
        self._resize_last_span()
        self._flushed = len(self._batches)  # the file log fsyncs what is left when it truncates
        return new_leo

    def _resize_last_span(self) -> None:
        span = self._spans[-1]
        first = bisect_left(self._bases, span.base_offset)
        kept = self._headers[first:]
        span.size = sum(h.size for h in kept)
        span.max_timestamp = max((h.max_timestamp for h in kept), default=-1)

    def _restore_producer_state(self) -> None:
        self.producer_state.rebuild(self._headers, self._read_control, self._transaction_completed)

    def _flush_storage(self) -> None:
        self._sealed_unsynced = False
        self._flushed = len(self._batches)

    def _batches_from_timestamp(self, timestamp_ms: int) -> Iterator[tuple[BatchHeader, bytes]]:
        return iter(zip(self._headers, self._batches))

    # -- the rest of the Log interface ----------------------------------------------------

    def truncate_fully_and_start_at(self, offset: int, producers: dict | None = None) -> None:
        """As :meth:`Log.truncate_fully_and_start_at`."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._batches.clear()
        self._headers.clear()
        self._bases.clear()
        self._size = 0
        self._leo = offset
        self._spans = [_Span(offset, created_ms=self._now, last_modified_ms=self._now)]
        self._flushed = 0
        self.epoch_cache.clear()
        self.producer_state.clear()
        if producers:
            self.producer_state.load(producers)
        self.txn_index.clear()
        # The HW checkpoint moves with the restart, as the file log writes it (a crash then
        # reopens at this offset, not at a checkpoint of the log that was dropped).
        self._checkpointed_hw = self._high_watermark = offset
        self._start_floor = offset
        self._fetched_compacted_below = offset
        self._flush_policy.flushed(self._now)

    def apply_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete the oldest whole virtual segments, exactly as :meth:`Log.apply_retention`."""
        self._check_open()
        self._now = now_ms
        cfg = self.config
        deleted = 0
        while len(self._spans) > 1:
            span, next_base = self._spans[0], self._spans[1].base_offset
            if not cfg.delete or (high_watermark is not None and next_base > high_watermark):
                break
            if not past_retention(cfg, now_ms, span.max_timestamp, span.size, self._size):
                break
            self._delete_first_span()
            deleted += 1
        if deleted:
            self._start_moved(self.log_start_offset)
        return deleted

    def checkpoint_high_watermark(self, hw: int) -> None:
        self._check_open()
        hw = self._clamp_high_watermark(hw)
        self._checkpointed_hw = hw
        self._high_watermark = hw
        self.producer_state.on_high_watermark(hw)

    def close(self) -> None:
        if not self._closed:
            self.flush()
            self._mark_closed()

    def crash(self) -> "MemoryLog":
        """The log a restart would find: flushed batches only, the epoch cache and HW as
        last persisted, each made consistent with the kept batches as recovery would."""
        n = self._flushed
        log = MemoryLog(self.config, now_ms=self._now, log_start_offset=self._spans[0].base_offset)
        log._start_floor = self._start_floor
        log._batches = self._batches[:n]
        log._headers = self._headers[:n]
        log._bases = self._bases[:n]
        log._size = sum(h.size for h in log._headers)
        log._leo = log._headers[-1].next_offset if n else self.log_start_offset
        log._flushed = n
        log._spans = [_Span(s.base_offset, s.size, s.created_ms, s.last_modified_ms, s.max_timestamp)
                      for s in self._spans if s.base_offset <= log._leo]
        log._resize_last_span()
        for span in log._spans:  # a reopened file log dates each segment by its first batch
            first = bisect_left(log._bases, span.base_offset)
            if first < n:
                span.created_ms = min(self._now, log._headers[first].max_timestamp)
        log.epoch_cache = LeaderEpochCache(self._persisted_epochs, on_change=log._persist_epochs)
        log._persisted_epochs = list(self._persisted_epochs)
        log.epoch_cache.truncate_from_end(log._leo + 1)  # as Log's recovery: keep an epoch starting at the LEO
        for h in log._headers:  # recovery re-learns epochs from the batches it keeps
            if h.leader_epoch > log.epoch_cache.latest_epoch:
                log.epoch_cache.assign(h.leader_epoch, h.base_offset)
        log.epoch_cache.truncate_from_start(log.log_start_offset)  # after: as Log's recovery
        log.producer_state.rebuild(log._headers, log._read_control, log._transaction_completed)
        log._checkpointed_hw = self._checkpointed_hw
        log._high_watermark = log._clamp_high_watermark(self._checkpointed_hw)
        return log

    def __repr__(self) -> str:
        return (
            f"MemoryLog(start={self.log_start_offset}, end={self._leo}, hw={self._high_watermark}, "
            f"flushed={self.flushed_offset}, segments={len(self._spans)}, batches={len(self._batches)})"
        )
