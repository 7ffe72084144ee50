"""An in-memory partition log with the file log's behaviour, for deterministic simulation.

The replication simulation (tests/sim) runs many replicas through thousands of seeded
crashes per second, which real files and fsyncs would make slow and nondeterministic.
:class:`MemoryLog` shares the append pipeline with :class:`~kcoord.log.Log` (see
``base.py``) and models durability explicitly: ``flushed_offset`` is what has been
"fsynced", and :meth:`MemoryLog.crash` returns what a restart would find.

Durability model, matching the file log: appends are durable once flushed (by the
flush.messages / flush.ms policy or :meth:`flush`); the leader-epoch cache and the HW
checkpoint are durable when written; truncation is durable at once. One difference on
the safe side: the file log also makes data durable when it rolls a segment, which the
memory log (having no segments) does not model, so it may lose more on a crash.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterator, Sequence

from ..protocol.errors import ErrorCode, KafkaError
from ..records import BatchHeader
from .base import BaseLog, _BufferLike
from .config import LogConfig
from .epochs import EpochEntry, LeaderEpochCache


class MemoryLog(BaseLog):
    def __init__(self, config: LogConfig | None = None, *, now_ms: int | None = None, log_start_offset: int = 0) -> None:
        super().__init__(config if config is not None else LogConfig(), now_ms)
        if log_start_offset < 0:
            raise ValueError(f"log start offset must be >= 0, got {log_start_offset}")
        self._start = log_start_offset
        self._leo = log_start_offset
        self._batches: list[bytes] = []
        self._headers: list[BatchHeader] = []
        self._bases: list[int] = []
        self._size = 0
        self._flushed = 0  # batches [0, _flushed) survive a crash
        self._persisted_epochs: list[EpochEntry] = []
        self.epoch_cache = LeaderEpochCache(on_change=self._persist_epochs)
        self._checkpointed_hw = log_start_offset
        self._high_watermark = log_start_offset

    def _persist_epochs(self, entries: list[EpochEntry]) -> None:
        self._persisted_epochs = list(entries)

    # -- facts ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._start

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

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "memory log is closed")

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
            self._batches.append(b"".join(chunks))
        else:
            view = memoryview(chunks[0])
            ends = list(positions[1:]) + [nbytes]
            self._batches.extend(bytes(view[a:b]) for a, b in zip(positions, ends))
        self._headers.extend(headers)
        self._bases.extend(h.base_offset for h in headers)
        self._leo = headers[-1].next_offset
        self._size += nbytes

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
        if i < 0:
            i = 0
        new_leo = self._bases[i] if i < len(self._bases) else self._leo
        self._size -= sum(h.size for h in self._headers[i:])
        del self._batches[i:], self._headers[i:], self._bases[i:]
        self._leo = new_leo
        self._flushed = len(self._batches)  # the file log fsyncs what is left when it truncates
        return new_leo

    def _restore_producer_state(self) -> None:
        self.producer_state.rebuild(self._headers)

    def _flush_storage(self) -> None:
        self._flushed = len(self._batches)

    def _batches_from_timestamp(self, timestamp_ms: int) -> Iterator[tuple[BatchHeader, bytes]]:
        return iter(zip(self._headers, self._batches))

    # -- the rest of the Log interface ----------------------------------------------------

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        self._batches.clear()
        self._headers.clear()
        self._bases.clear()
        self._size = 0
        self._start = self._leo = offset
        self._flushed = 0
        self.epoch_cache.clear()
        self.producer_state.clear()
        self._high_watermark = offset
        self._flush_policy.flushed(self._now)

    def checkpoint_high_watermark(self, hw: int) -> None:
        self._check_open()
        hw = self._clamp_high_watermark(hw)
        self._checkpointed_hw = hw
        self._high_watermark = hw

    def close(self) -> None:
        if not self._closed:
            self.flush()
            self._closed = True

    def crash(self) -> "MemoryLog":
        """The log a restart would find: flushed batches only, the epoch cache and HW as
        last persisted, each made consistent with the kept batches as recovery would."""
        n = self._flushed
        log = MemoryLog(self.config, now_ms=self._now, log_start_offset=self._start)
        log._batches = self._batches[:n]
        log._headers = self._headers[:n]
        log._bases = self._bases[:n]
        log._size = sum(h.size for h in log._headers)
        log._leo = log._headers[-1].next_offset if n else self._start
        log._flushed = n
        log.epoch_cache = LeaderEpochCache(self._persisted_epochs, on_change=log._persist_epochs)
        log._persisted_epochs = list(self._persisted_epochs)
        log.epoch_cache.truncate_from_end(log._leo)
        log.epoch_cache.truncate_from_start(log._start)
        for h in log._headers:  # recovery re-learns epochs from the batches it keeps
            if h.leader_epoch > log.epoch_cache.latest_epoch:
                log.epoch_cache.assign(h.leader_epoch, h.base_offset)
        log.producer_state.rebuild(log._headers)
        log._checkpointed_hw = self._checkpointed_hw
        log._high_watermark = log._clamp_high_watermark(self._checkpointed_hw)
        return log

    def __repr__(self) -> str:
        return (
            f"MemoryLog(start={self._start}, end={self._leo}, hw={self._high_watermark}, "
            f"flushed={self.flushed_offset}, batches={len(self._batches)})"
        )
