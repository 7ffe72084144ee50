"""What the file log and the in-memory log share: the append pipeline and its bookkeeping.

Validation, idempotence, stamping, epoch-cache and producer-state updates and the flush
policy must behave identically in both, or the simulation would test a different log than
the one that runs. So they live here once, and the two logs supply only storage:
``_write``, ``_read``, ``_truncate_storage`` and friends.

I/O errors (Kafka's KIP-112): an ``OSError`` from storage inside any operation takes the
log *offline*. The failing call raises :class:`LogStorageError` (KAFKA_STORAGE_ERROR) and so
does every later call on the object, because after a failed write or fsync the log cannot
know what reached the disk; its in-memory state is never consulted again. Reopening the
directory runs recovery, which is built to make sense of exactly that.
"""

from __future__ import annotations

import functools
import os
from abc import ABC, abstractmethod
from typing import Callable, Iterator, NamedTuple, Sequence, TypeVar

from ..protocol.errors import ErrorCode, KafkaError
from ..record import (
    CONTROL_BIT,
    FORMAT_VERSION,
    BatchHeader,
    ControlRecord,
    ControlType,
    build_control_batch,
    decode_batch,
    read_control,
    now_ms as wall_clock_ms,
    read_header,
    stamp_prefix,
    validate_follower_batches,
    validate_leader_batch,
    validate_produce_batch,
)
from .config import LogConfig
from .epochs import LeaderEpochCache
from .errors import LogStorageError, OffsetOutOfRange
from .flush import FlushPolicy
from .producer_state import CompletedTxn, ProducerStateManager, VerificationGuard
from .txn_index import AbortedTxn, TxnIndex

_BufferLike = bytes | bytearray | memoryview
_F = TypeVar("_F", bound=Callable)


def storage_operation(method: _F) -> _F:
    """Mark a log method that touches storage: an OSError escaping it takes the log offline
    (and is raised as :class:`LogStorageError`)."""
    what = method.__name__.strip("_").replace("_", " ")

    @functools.wraps(method)
    def run(self: "BaseLog", *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            raise self._go_offline(exc, what) from exc

    return run  # type: ignore[return-value]


class AppendInfo(NamedTuple):
    """What an append did: the offsets it assigned, or that it was a retried duplicate.

    For a duplicate nothing was written: ``base_offset``/``last_offset`` are where the
    original batch went and ``log_append_time`` is -1.
    ``log_append_time`` is the log's clock at the append; the produce path reports it only
    for LogAppendTime topics. ``header``: a leader append's batch header as the producer
    sent it (before the offset and epoch were stamped), so no caller parses it again; None
    for a follower's append. (A NamedTuple: built on every append, so it must be cheap.)
    """

    base_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    size_bytes: int
    duplicate: bool = False
    log_append_time: int = -1
    header: BatchHeader | None = None


_AT_START = (0,)  # positions of a single batch


class BaseLog(ABC):
    """The storage-independent half of a partition log.

    Time: every ``now_ms`` argument is the log's clock (None = wall clock). Tests and the
    simulation pass it explicitly; calls without one (``flush``) use the last time seen,
    so a simulated clock is never mixed with the real one. Not thread-safe: one owner
    (the replica actor's event loop) calls it.
    """

    config: LogConfig
    epoch_cache: LeaderEpochCache
    producer_state: ProducerStateManager
    _file_hints = False  # whether locate() may point readers at files (see Log)
    validate_records = os.environ.get("KCOORD_VALIDATE_RECORDS", "1") != "0"
    """Decode and check every producer batch before appending it (records.validate_produce_batch).
    Off (``KCOORD_VALIDATE_RECORDS=0`` in the replicas' environment) only to measure what the
    checks cost (benchmarks/produce_validation.py)."""

    def __init__(self, config: LogConfig, now_ms: int | None) -> None:
        self.config = config
        self._now = wall_clock_ms() if now_ms is None else now_ms
        self._flush_policy = FlushPolicy(config.flush_messages, config.flush_ms, last_flush_ms=self._now)
        self._high_watermark = 0
        self._checkpointed_hw = 0  # set by the subclass from its checkpoint
        self._closed = False
        self._offline: LogStorageError | None = None  # the I/O error that took the log offline
        self._halted = False  # closed or offline: the one flag the hot paths test
        self.producer_state = ProducerStateManager()
        # the aborted transactions whose markers are in the log (txn_index.py)
        self.txn_index = TxnIndex()
        # the HW of a leader whose compacted log this one fetched (see compacted_below)
        self._fetched_compacted_below = 0

    # -- storage hooks ------------------------------------------------------------------

    @property
    @abstractmethod
    def log_start_offset(self) -> int: ...

    @property
    @abstractmethod
    def log_end_offset(self) -> int: ...

    @abstractmethod
    def _write(
        self,
        chunks: Sequence[_BufferLike],
        nbytes: int,
        headers: Sequence[BatchHeader],
        positions: Sequence[int],
        now_ms: int,
    ) -> None:
        """Store whole batches. ``chunks`` concatenated are the bytes; ``positions`` give
        each batch's start within them. Either everything is stored or nothing."""

    def _write_one(
        self,
        prefix: bytes,
        body: memoryview,
        nbytes: int,
        h: BatchHeader,
        base_offset: int,
        leader_epoch: int,
        now_ms: int,
    ) -> None:
        """Store one producer batch: the stamped ``prefix`` then ``body``. ``h`` is its
        header as the producer sent it (before stamping). The file log overrides this
        with a leaner path; by default it is :meth:`_write` of the stamped header."""
        stamped = BatchHeader._make((base_offset, h.batch_length, leader_epoch) + h[3:])
        self._write((prefix, body), nbytes, (stamped,), _AT_START, now_ms)

    @abstractmethod
    def _read(self, from_offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        """``read`` after its range checks: from_offset is inside [log start, LEO)."""

    @abstractmethod
    def _truncate_storage(self, offset: int) -> int:
        """Drop the batch containing ``offset`` and everything after; return the new LEO."""

    @abstractmethod
    def _restore_producer_state(self) -> None:
        """Make producer state match the batches left after a truncation."""

    def _txn_index_truncated(self, new_leo: int) -> None:
        """:attr:`txn_index` lost its entries at or after ``new_leo``: persist that."""

    @abstractmethod
    def _flush_storage(self) -> None: ...

    @abstractmethod
    def _batches_from_timestamp(self, timestamp_ms: int) -> Iterator[tuple[BatchHeader, bytes]]:
        """Batches (header, bytes) that may hold a record at or after ``timestamp_ms``, in
        offset order; may skip ones whose max timestamp is known to be smaller."""

    def _txn_index_added(self, entry: AbortedTxn) -> None:
        """Persist an entry just added to :attr:`txn_index` (the file log's per-segment files)."""

    def _read_control(self, h: BatchHeader) -> ControlRecord:
        """The marker of the control batch with header ``h``, read back from the log (replays)."""
        return read_control(self._read(h.base_offset, 1, None))

    def _transaction_completed(self, done: CompletedTxn | None) -> None:
        """A marker ended ``done``: an aborted transaction goes into the index with the last
        stable offset as of now (Kafka's lastStableOffset(completedTxn))."""
        if done is None or not done.aborted or done.last_offset < self.log_start_offset:
            return
        entry = AbortedTxn(done.producer_id, done.first_offset, done.last_offset, self.producer_state.last_stable_offset_after(done))
        if self.txn_index.add(entry):
            self._txn_index_added(entry)

    def last_stable_offset(self, high_watermark: int) -> int:
        """``min(first unstable offset, high_watermark)``: what read_committed readers may
        read below (docs/transactions.md, "Last stable offset")."""
        first = self.producer_state.first_unstable_offset(high_watermark)
        return high_watermark if first is None or first > high_watermark else first

    def _check_open(self) -> None:
        if self._offline is not None:
            raise LogStorageError(self._offline.message, self._offline.errno)
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self!r} is closed")

    def _mark_closed(self) -> None:
        self._closed = True
        self._halted = True

    # -- going offline ------------------------------------------------------------------

    def _go_offline(self, exc: OSError, what: str) -> LogStorageError:
        """Take the log offline for ``exc`` (the first I/O error only); the error to raise."""
        if self._offline is not None:
            return LogStorageError(self._offline.message, self._offline.errno)
        self._offline = LogStorageError(f"{self._where()}: {what} failed: {exc}", exc.errno)
        self._halted = True
        self._release_storage()
        return self._offline

    def _where(self) -> str:
        return type(self).__name__

    def _release_storage(self) -> None:
        """Give back what an offline log holds (file handles, the directory lock) so the
        directory can be reopened; must not raise."""

    @property
    def directory_id(self) -> str:
        """Which directory holds this log ("" for storage without one: a memory log)."""
        return ""

    @property
    def storage_generation(self) -> int:
        """How many times an I/O error has taken this log's storage offline, as its storage
        remembers it (0 for storage that cannot lose unsynced writes to an I/O error)."""
        return 0

    @property
    def offline(self) -> bool:
        """An I/O error took the log offline: every operation raises :attr:`offline_error`."""
        return self._offline is not None

    @property
    def offline_error(self) -> LogStorageError | None:
        """The error that took the log offline (its message says what failed and why)."""
        return self._offline

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config to the open log (alter_configs, no restart): rolling,
        retention, flushing, the cleaner and max.message.bytes follow it from now on; a
        changed index.interval.bytes applies to segments created from now on."""
        self.config = config
        self._flush_policy.configure(config.flush_messages, config.flush_ms)

    # -- state --------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def checkpointed_high_watermark(self) -> int:
        """The HW as last checkpointed, not clamped to the log: a log that opens shorter than
        this has lost committed records (unflushed data gone in a crash)."""
        return self._checkpointed_hw

    @property
    def closed(self) -> bool:
        return self._closed

    # -- append -------------------------------------------------------------------------

    def append_as_leader(
        self,
        data: _BufferLike,
        leader_epoch: int,
        now_ms: int | None = None,
        *,
        header: BatchHeader | None = None,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendInfo:
        """Append one producer batch as the partition's leader: validate it, deduplicate and
        sequence-check it by its producer, assign its offsets (base offset = LEO) and stamp
        them and ``leader_epoch`` on its first 16 bytes (the rest is written as is).
        ``header``: the batch's header if the caller parsed it already (it is not parsed
        again); the result carries it. ``verification_guard``: for a client's batch, the
        producer's guard the leader verified under (or ``NO_GUARD``): a batch that would start
        a transaction needs the producer's current one (KIP-890, the producer state's check,
        made here in the same step as the append). Nothing is written unless everything checks.
        """
        if self._halted:
            self._check_open()
        now = wall_clock_ms() if now_ms is None else now_ms
        self._now = now
        # The produce hot path: kept flat, one batch, no per-append allocations beyond
        # the stamped 16-byte prefix, the stamped header and the result.
        h = validate_leader_batch(data, self.config.max_batch_bytes, header)
        if self.validate_records:
            validate_produce_batch(data, h, require_keys=self.config.compact)
        cache = self.epoch_cache
        latest = cache.latest_epoch
        if leader_epoch < latest or leader_epoch < 0:
            if leader_epoch < 0:
                raise ValueError(f"leader epoch must be >= 0, got {leader_epoch}")
            raise KafkaError(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"append at leader epoch {leader_epoch}, but the log already has epoch {latest}",
            )
        state = self.producer_state
        idempotent = h.producer_id >= 0
        if idempotent:
            verdict = state.check(h, verification_guard)
            if verdict.duplicate:
                dup = verdict.duplicate_base_offset
                return AppendInfo(dup, dup + h.last_offset_delta, h.record_count, h.max_timestamp, len(data), True, -1, h)
            verdict.raise_for_error()
        base = self.log_end_offset
        nbytes = len(data)
        try:
            self._write_one(stamp_prefix(data, base, leader_epoch), memoryview(data)[16:], nbytes, h, base, leader_epoch, now)
        except OSError as exc:
            raise self._go_offline(exc, "append") from exc
        if leader_epoch > latest:
            cache.assign(leader_epoch, base)
        if idempotent:
            state.update(h._replace(base_offset=base, leader_epoch=leader_epoch))
        if self._flush_policy.record_append(h.record_count, now):
            self.flush()
        return AppendInfo(base, base + h.last_offset_delta, h.record_count, h.max_timestamp, nbytes, False, now, h)

    def append_control_as_leader(
        self,
        *,
        commit: bool,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        leader_epoch: int,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Append the COMMIT (``commit``) or ABORT marker of ``producer_id``'s transaction as
        the partition's leader (a WriteTxnMarker). Refused, with nothing written, for a
        coordinator epoch older than the producer's last marker's
        (TRANSACTION_COORDINATOR_FENCED) or a producer epoch older than its current one
        (INVALID_PRODUCER_EPOCH); a producer with no ongoing transaction still gets it."""
        if self._halted:
            self._check_open()
        now = wall_clock_ms() if now_ms is None else now_ms
        self._now = now
        cache = self.epoch_cache
        latest = cache.latest_epoch
        if leader_epoch < latest or leader_epoch < 0:
            if leader_epoch < 0:
                raise ValueError(f"leader epoch must be >= 0, got {leader_epoch}")
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"marker at leader epoch {leader_epoch}, but the log already has epoch {latest}")
        state = self.producer_state
        state.check_marker(producer_id, producer_epoch, coordinator_epoch).raise_for_error()
        base = self.log_end_offset
        data = build_control_batch(
            commit=commit,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=now,
            magic=FORMAT_VERSION,
        )
        h = read_header(data)
        try:
            self._write_one(stamp_prefix(data, base, leader_epoch), memoryview(data)[16:], len(data), h, base, leader_epoch, now)
        except OSError as exc:
            raise self._go_offline(exc, "append") from exc
        if leader_epoch > latest:
            cache.assign(leader_epoch, base)
        stamped = h._replace(base_offset=base, leader_epoch=leader_epoch)
        self._transaction_completed(state.update(stamped, ControlRecord(ControlType.COMMIT if commit else ControlType.ABORT, coordinator_epoch)))
        if self._flush_policy.record_append(1, now):
            self.flush()
        return AppendInfo(base, base, 1, h.max_timestamp, len(data), False, now, h)

    def append_as_follower(
        self, data: _BufferLike, now_ms: int | None = None, *, verify_crc: bool = True, leader_high_watermark: int | None = None
    ) -> AppendInfo:
        """Append batches fetched from the leader, which assigned their offsets and stamped
        them: they must be whole and valid and start at or after our LEO, offsets
        increasing (a compacted leader's log has gaps). Written unchanged; nothing is
        written unless everything checks. Batches that show compaction (a gap before one,
        or fewer records than offsets in one) raise :attr:`compacted_below` to
        ``leader_high_watermark``, the leader's HW when it sent them, first."""
        if self._halted:
            self._check_open()
        now = wall_clock_ms() if now_ms is None else now_ms
        self._now = now
        leo = self.log_end_offset
        keep_start = None
        if leo == self.log_start_offset and self.size_bytes == 0 and len(data) >= 61:
            first = read_header(data)
            if first.base_offset < leo <= first.last_offset:
                # An empty follower whose leader's log starts inside a batch (DeleteRecords
                # at an offset within one): take the whole batch, keep the log start offset,
                # and the producer state it started over with (below that batch).
                keep_start = leo
                self.truncate_fully_and_start_at(first.base_offset, producers=self.producer_state.snapshot())
        found = validate_follower_batches(data, self.log_end_offset, check_crc=verify_crc)
        headers = found.headers
        if (
            leader_high_watermark is not None
            and leader_high_watermark > self._fetched_compacted_below
            and found.record_count < found.next_offset - self.log_end_offset  # a cleaner's gaps
        ):
            # Persisted before the batches: a log holding them must never forget the bound.
            self._set_fetched_compacted_below(leader_high_watermark)
        nbytes = len(data)
        try:
            self._write((data,), nbytes, headers, found.positions, now)
        except OSError as exc:
            raise self._go_offline(exc, "append") from exc
        cache = self.epoch_cache
        latest = cache.latest_epoch
        state = self.producer_state
        records = 0
        max_ts = -1
        for i, h in enumerate(headers):
            if h.leader_epoch > latest:
                cache.assign(h.leader_epoch, h.base_offset)
                latest = h.leader_epoch
            if h.attributes & CONTROL_BIT:
                self._transaction_completed(state.update(h, read_control(data, found.positions[i], h)))
            else:
                state.update(h)
            records += h.record_count
            if h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
        if self._flush_policy.record_append(records, now):
            self.flush()
        if keep_start is not None:
            self.advance_log_start_offset(keep_start)
        return AppendInfo(headers[0].base_offset, headers[-1].last_offset, records, max_ts, nbytes, False, now)

    # -- read ---------------------------------------------------------------------------

    @storage_operation
    def read(self, from_offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """Whole batches from the one containing ``from_offset``, concatenated.

        Stops before exceeding ``max_bytes`` but always includes the first batch, unless
        that batch reaches ``max_offset`` (exclusive; the HW for consumers): no batch with
        an offset at or past ``max_offset`` is ever included.
        """
        self._check_open()
        leo = self.log_end_offset
        start = self.log_start_offset
        if from_offset == leo and from_offset >= start:
            return b""
        if from_offset < start or from_offset > leo:
            raise OffsetOutOfRange(from_offset, start, leo)
        if max_offset is not None and from_offset >= max_offset:
            return b""
        return self._read(from_offset, max_bytes, max_offset)

    @storage_operation
    def locate(self, from_offset: int, max_bytes: int, max_offset: int | None = None) -> list[tuple[str, int, int]] | None:
        """Where the bytes :meth:`read` would return lie on disk: ``[(path, position,
        length)]``, so that a reader on the same machine can ``pread`` them itself instead of
        having them copied through Ray (kcoord's sendfile). None when the log keeps no files
        another process could read (in memory, or on a simulated disk). Same arguments and
        errors as :meth:`read`; the caller must validate what it reads."""
        self._check_open()
        leo = self.log_end_offset
        start = self.log_start_offset
        if from_offset < start or from_offset > leo:
            raise OffsetOutOfRange(from_offset, start, leo)
        if not self._file_hints:
            return None
        if from_offset == leo or (max_offset is not None and from_offset >= max_offset):
            return []
        return self._locate(from_offset, max_bytes, max_offset)

    def _locate(self, from_offset: int, max_bytes: int, max_offset: int | None) -> list[tuple[str, int, int]]:
        raise NotImplementedError  # only a log with _file_hints keeps files

    def batch_base_offset(self, offset: int) -> int:
        """The base offset of the batch holding ``offset`` (in the log): below it when the
        offset lies inside a batch, as a log start a DeleteRecords cut inside one does;
        ``offset`` itself at the log end."""
        held = self.read(offset, 1)  # whole batches, the first holding ``offset``
        return read_header(held).base_offset if held else offset

    @storage_operation
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp_ms``.

        Admin path (ListOffsets by time): batch headers narrow it down to one batch, whose
        records are then decoded.
        """
        self._check_open()
        for h, data in self._batches_from_timestamp(timestamp_ms):
            if h.max_timestamp < timestamp_ms:
                continue
            for rec in decode_batch(data, check_crc=False).records():
                if rec.timestamp >= timestamp_ms:
                    return rec.offset, rec.timestamp
        return None

    # -- truncation ---------------------------------------------------------------------

    @storage_operation
    def truncate_to(self, offset: int) -> bool:
        """Remove every batch with an offset >= ``offset`` (a batch containing it goes whole)
        and every leader epoch starting at or after the new log end -- also when no record
        goes (``offset`` at or past the log end): an epoch this replica opened as leader at
        its log end, without writing in it, must not survive reconciliation with a leader
        that never had it (Kafka's truncateTo). Returns whether any record went.

        Used by a follower to drop records that diverge from the new leader's log. Below
        the log start (an unclean leader's log ends there) nothing can be kept: the log
        restarts empty at ``offset``, as Kafka's truncateTo does. A cut inside the batch
        holding the log start (DeleteRecords inside a batch) keeps no record at or past the
        start either, and a log must not end below its start: it restarts empty at its log
        start, with its producers below it, and fetches that batch again. Below
        :attr:`compacted_below` (only an unclean election cuts below a former HW) a cleaner,
        this log's or the leader's it fetched from, may have removed records for later ones
        of their key that now go, so what is left is no prefix of the leader's log: the log
        restarts empty at its log start, with its producers below it, and is fetched again
        -- also when ``offset`` is at or past the log end.
        """
        self._check_open()
        if offset < self.log_start_offset:
            went = self.log_end_offset > self.log_start_offset
            self.truncate_fully_and_start_at(offset)
            return went
        if offset < self.compacted_below:
            start = self.log_start_offset
            self.truncate_fully_and_start_at(start, producers=self.producer_state.snapshot_below(start))
            return True
        if offset >= self.log_end_offset:
            self.epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        start = self.log_start_offset
        if self.batch_base_offset(offset) < start:  # the batch holding ``offset`` goes whole
            self.truncate_fully_and_start_at(start, producers=self.producer_state.snapshot_below(start))
            return True
        new_leo = self._truncate_storage(offset)
        self.epoch_cache.truncate_from_end(new_leo)
        if self.txn_index.truncate_from(new_leo):
            self._txn_index_truncated(new_leo)
        self._restore_producer_state()
        self._high_watermark = min(self._high_watermark, new_leo)
        self._flush_policy.flushed(self._now)  # the truncation was made durable
        return True

    # -- flushing -----------------------------------------------------------------------

    @storage_operation
    def flush(self) -> None:
        """Make everything appended so far durable."""
        self._check_open()
        self._flush_storage()
        self._flush_policy.flushed(self._now)

    @storage_operation
    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if flush.ms says it is time, and fsync segments rolled since the last
        flush (kept off the append path); returns whether it synced anything. Call it from
        a timer."""
        self._check_open()
        self._now = now_ms
        if self._flush_policy.time_due(now_ms):
            self.flush()
            return True
        return self.sync_sealed_segments()

    def sync_sealed_segments(self) -> bool:
        """Make rolled segments durable; whether there were any. Part of other operations
        (flushing, truncation, a cleaner pass, closing), which handle its I/O errors."""
        return False

    # -- the log start offset, rolling by time (file and memory log alike) ---------------

    @abstractmethod
    def advance_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (clamped to the LEO); see Log."""

    @property
    def tombstone_horizon(self) -> int:
        """One past the newest tombstone the cleaner removed (0: none; a log that never
        compacts removes none)."""
        return 0

    @property
    def cleaner_offset(self) -> int:
        """Where the part of the log the cleaner has not compacted starts (the log start
        for a log that never compacts)."""
        return self.log_start_offset

    @property
    def compacted_below(self) -> int:
        """Below this offset the log may lack records a cleaner removed for later records of
        their key, which may lie anywhere below it: the :attr:`cleaner_offset` of its own
        cleaner, or the HW of a leader whose compacted log it fetched (that leader's cleaner
        cleans below its HW). :meth:`truncate_to` below it starts the log over."""
        return max(self.cleaner_offset, self._fetched_compacted_below)

    def _set_fetched_compacted_below(self, offset: int) -> None:
        """Set (and, for a file log, persist) the fetched part of :attr:`compacted_below`."""
        self._fetched_compacted_below = offset

    supports_compaction = False
    """Whether :meth:`clean` can compact this log (the file log can; the in-memory log keeps
    every record and its cleanup.policy=compact is only retention-free)."""

    def clean(self, now_ms: int, high_watermark: int | None = None, *, force: bool = False) -> "object | None":
        """One log-cleaner pass (cleanup.policy=compact) below ``high_watermark``: a
        :class:`~kcoord.log.cleaner.CleanResult`, or None when this log does not compact
        (:attr:`supports_compaction`). ``force`` ignores min.cleanable.dirty.ratio."""
        return None

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll an idle active segment older than segment.ms (the memory log has no files
        to roll; its virtual segments follow appends)."""
        return False

    def _start_moved(self, offset: int) -> None:
        """The log start offset moved up to ``offset``: the epochs, aborted transactions
        and HW below it go with the records (file and memory log alike)."""
        self.epoch_cache.truncate_from_start(offset)
        self.txn_index.drop_below(offset)
        self._high_watermark = max(self._high_watermark, offset)

    def _clamp_high_watermark(self, hw: int) -> int:
        return max(self.log_start_offset, min(hw, self.log_end_offset))
