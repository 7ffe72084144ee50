"""The durable, segmented partition log.

The files of its directory are listed in :mod:`kcoord.log`.

The LEO is the last segment's next offset. The log start offset is the first segment's
base offset or, if higher, the checkpointed one (records below it are gone for readers even
while their segment is still on disk). After compaction a segment may have gaps between
batches (offsets never change); readers skip them like Kafka's.

Producer state is derived from batch headers and snapshotted at each segment roll and on
close (``producer_snapshots.py``). The aborted-transaction index of a segment is written
when an ABORT marker lands in it and fsynced with the segment; opening the log trusts the
files of segments below the recovery point and rebuilds the rest by replaying producer state
from a snapshot at or below the recovery point.

Rolling a segment does not fsync it on the produce path (that could stall an append for
the time it takes to write back a whole segment): the sealed segment is fsynced by the
next flush, either the flush policy's or :meth:`Log.maybe_flush`, which the replica calls
from its timer. Only then does the recovery point move past it.

All file I/O goes through a :class:`~kcoord.log.fs.FileSystem` (the real one unless the
simulation passes its simulated disk), and an I/O error takes the log offline (``base.py``).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..record import BatchHeader
from .base import AppendInfo, BaseLog, _BufferLike, storage_operation
from .checkpoint import (
    CLEAN_SHUTDOWN,
    CLEANER_CHECKPOINT,
    EPOCH_CHECKPOINT,
    FETCHED_COMPACTED,
    HW_CHECKPOINT,
    LOG_START_CHECKPOINT,
    RECOVERY_POINT,
    TOMBSTONE_CLOCK,
    TOMBSTONE_HORIZON,
    CheckpointError,
    read_lost_pages,
    read_offset_or,
    read_pairs,
    write_atomic,
    write_epochs,
    write_offset,
    write_pairs,
)
from .cleaner import CleanResult, compact
from .config import LogConfig
from .directory import load_directory_id, make_directory, record_lost_pages
from .epochs import EpochEntry
from .errors import LogStorageError
from .fs import OS_FILE_SYSTEM, FileSystem
from .lock import DirectoryLock
from .producer_snapshots import ProducerSnapshots
from .recovery import RecoveryReport, load_epoch_cache, load_segments
from .rolling import must_roll, past_retention, plan_runs
from .segment import Segment, SegmentInfo
from .segment_list import SegmentList
from .tombstone_clock import TombstoneClock
from .txn_index import AbortedTxn, TxnIndexFiles

__all__ = ["Log", "SegmentInfo", "AppendInfo"]


class Log(BaseLog):
    """A partition's log in ``directory``; opening it recovers from whatever a crash left."""

    def __init__(
        self,
        directory: str | Path,
        config: LogConfig | None = None,
        *,
        now_ms: int | None = None,
        lock_wait_s: float = 0.0,
        fs: FileSystem | None = None,
        new_directory_id: Callable[[], str] | None = None,
    ) -> None:
        """``lock_wait_s``: how long to wait for another process's lock on ``directory`` to
        go away (a predecessor still exiting) before failing with KAFKA_STORAGE_ERROR.
        ``fs``: the file system (None = the real one). ``new_directory_id()``: the id to give
        a directory that has none yet (None = a random UUID; the simulation passes
        deterministic ones). An I/O error while opening raises :class:`LogStorageError`."""
        super().__init__(config if config is not None else LogConfig(), now_ms)
        self.directory = Path(directory)
        self._fs = fs = OS_FILE_SYSTEM if fs is None else fs
        self._file_hints = fs.supports_file_hints
        self._segments = SegmentList()
        self._snapshots = ProducerSnapshots(fs, self.directory)
        self._txn_files = TxnIndexFiles(fs, self.directory)
        try:
            make_directory(fs, self.directory)
            self._lock = DirectoryLock(self.directory, wait_s=lock_wait_s, fs=fs)
        except OSError as exc:
            raise LogStorageError(f"{self._where()}: open failed: {exc}", exc.errno) from exc
        self._storage_generation = 0
        self._new_directory_id = new_directory_id or (lambda: uuid.uuid4().hex)
        self._directory_id = ""
        try:
            self._open()
        except BaseException as exc:
            if isinstance(exc, OSError):
                self._record_lost_pages()  # recovery's fsync of a crashed process's tail failed
            self._release_storage()
            if isinstance(exc, OSError):
                raise LogStorageError(f"{self._where()}: open failed: {exc}", exc.errno) from exc
            raise

    def _open(self) -> None:
        """Recover the directory's contents and load the checkpoints (see recovery.py)."""
        fs = self._fs
        self._pending: Sequence[BatchHeader] = ()
        report = RecoveryReport()
        self._directory_id = load_directory_id(fs, self.directory, self._new_directory_id, self._where())
        self._storage_generation = read_lost_pages(fs, self.directory)
        marker = self.directory / CLEAN_SHUTDOWN
        report.clean_shutdown = fs.exists(marker)
        self.recovery_report = report
        self._recovery_point = read_offset_or(fs, self.directory / RECOVERY_POINT, "recovery point", 0, report.notes)

        transitions: list[tuple[int, int]] = []  # epoch changes seen in the verified segments

        def note_epoch(_pos: int, h: BatchHeader) -> None:
            if h.leader_epoch >= 0 and (not transitions or h.leader_epoch > transitions[-1][0]):
                transitions.append((h.leader_epoch, h.base_offset))

        self._segments = SegmentList(
            load_segments(fs, self.directory, self.config.index_interval_bytes, self._now, report, self._recovery_point, note_epoch)
        )
        self._log_start = self._segments[0].base_offset
        stored_start = read_offset_or(fs, self.directory / LOG_START_CHECKPOINT, "log start offset", 0, report.notes)
        self._log_start = max(self._log_start, min(stored_start, self._segments[-1].next_offset))
        self._cleaner_offset = read_offset_or(fs, self.directory / CLEANER_CHECKPOINT, "cleaner offset", 0, report.notes)
        self._tombstone_horizon = read_offset_or(fs, self.directory / TOMBSTONE_HORIZON, "tombstone horizon", 0, report.notes)
        self._tombstone_clock = self._load_tombstone_clock(report.notes)
        self._fetched_compacted_below = read_offset_or(fs, self.directory / FETCHED_COMPACTED, "fetched compaction bound", 0, report.notes)
        for seg in self._segments[:-1]:
            self._segments.remember_reader(seg)  # bounds the handles recovery opened
        self.epoch_cache = load_epoch_cache(
            fs,
            self.directory / EPOCH_CHECKPOINT,
            report,
            self.log_start_offset,
            self.log_end_offset,
            lambda: self._segments.headers_from(self.log_start_offset),
            transitions,
            self._persist_epochs,
        )
        self._checkpointed_hw = read_offset_or(fs, self.directory / HW_CHECKPOINT, "high watermark", self.log_start_offset, report.notes)
        self._high_watermark = self._clamp_high_watermark(self._checkpointed_hw)
        rebuild_from = self._load_txn_index()
        self._restore_producer_state(at_most=rebuild_from)
        if self._recovery_point < self.log_end_offset:
            # What recovery kept may still be only in the page cache of a crashed process.
            for seg in self._segments:
                if seg.next_offset > self._recovery_point:
                    seg.flush(fsync_index=True)
                    self._txn_files.sync(seg.base_offset)
        # A recovery point past the LEO (recovery cut fsynced data, or a crash inside
        # truncate_fully_and_start_at) would let later segments skip their CRC scan.
        self._set_recovery_point(self.log_end_offset)
        if len(self._segments) > 1 and self._segments[1].base_offset <= self._log_start:
            # The log start offset was persisted above whole segments that an I/O error or
            # a crash kept from being deleted (DeleteRecords, a follower learning its
            # leader's): finish that, or they would count in the size and stay forever.
            self._delete_old_segments(self._now, None, False)
        if report.clean_shutdown:
            fs.unlink(marker)  # from now on a crash must be noticed
        fs.fsync_dir(self.directory)

    # -- opening --------------------------------------------------------------------------

    def _persist_epochs(self, entries: list[EpochEntry]) -> None:
        """The epoch cache's on_change: persisted before the cache adopts the change, so a
        failed write leaves the cache as the checkpoint has it (and the log offline)."""
        if self._halted:
            self._check_open()
        try:
            write_epochs(self._fs, self.directory / EPOCH_CHECKPOINT, entries)
        except OSError as exc:
            raise self._go_offline(exc, "leader epoch checkpoint") from exc

    # -- the directory's identity and storage generation (directory.py) ---------------

    @property
    def directory_id(self) -> str:
        """This directory's id, given when a log was first opened in it (directory.py)."""
        return self._directory_id

    @property
    def storage_generation(self) -> int:
        """How many times an I/O error took this log offline, as recorded in its directory
        (directory.py: why the replica reports it)."""
        return self._storage_generation

    def _record_lost_pages(self) -> None:
        self._storage_generation = record_lost_pages(self._fs, self.directory, self._storage_generation)

    def _go_offline(self, exc: OSError, what: str) -> LogStorageError:
        if self._offline is None:
            self._record_lost_pages()
        return super()._go_offline(exc, what)

    def _set_recovery_point(self, offset: int) -> None:
        if offset != self._recovery_point:
            write_offset(self._fs, self.directory / RECOVERY_POINT, offset)
            self._recovery_point = offset

    def _restore_producer_state(self, at_most: int | None = None) -> None:
        """From the newest snapshot not past the LEO (nor ``at_most``) and the headers after
        it (on open and after a truncation); the markers replayed fill in the
        aborted-transaction index (entries already there are kept as they are)."""
        self._snapshots.restore(
            self.producer_state,
            self.log_start_offset,
            self.log_end_offset,
            self._segments.headers_from,
            self.recovery_report.notes,
            self._read_control,
            self._transaction_completed,
            at_most,
        )

    def _load_txn_index(self) -> int:
        """The aborted-transaction index files on open (:meth:`TxnIndexFiles.load_trusted`);
        returns the offset from which the replay of producer state must rebuild entries."""
        return self._txn_files.load_trusted(
            self.txn_index, self._segments, self._recovery_point, self.log_start_offset, self.recovery_report.notes
        )

    def _txn_index_added(self, entry: AbortedTxn) -> None:
        seg = self._segments[self._segments.position_of(entry.last_offset)]
        self._txn_files.append(seg.base_offset, entry)

    def _txn_index_truncated(self, new_leo: int) -> None:
        seg = self._segments[-1]  # later segments went with their files
        self._txn_files.rewrite(seg.base_offset, self.txn_index.between(seg.base_offset, new_leo))

    # -- basic facts ----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return self._segments.size

    @property
    @storage_operation
    def segments(self) -> list[SegmentInfo]:
        """Reads the disk once per segment (its largest timestamp, computed on first use)."""
        if self._offline is not None:
            self._check_open()
        return self._segments.infos()

    # -- appending ------------------------------------------------------------------------

    def _write(
        self,
        chunks: Sequence[_BufferLike],
        nbytes: int,
        headers: Sequence[BatchHeader],
        positions: Sequence[int],
        now_ms: int,
    ) -> None:
        """Replicated batches: split at batch boundaries where segments must roll.

        An OSError part-way leaves some runs written; the log goes offline (base.py) and
        recovery keeps whatever whole batches the disk has when it is reopened.
        """
        seg = self._segments[-1]
        runs = plan_runs(self.config, seg.size, seg.base_offset, seg.created_ms, headers, now_ms)
        if len(runs) == 1 and not runs[0][2]:
            self._segments.write_to(seg, chunks, nbytes, headers, positions, now_ms)
            return
        (data,) = chunks
        view = memoryview(data)
        ends = list(positions[1:]) + [nbytes]
        try:
            for i, j, roll in runs:
                if roll:
                    self._pending = headers[:i]
                    seg = self._roll(now_ms)
                a, b = positions[i], ends[j - 1]
                self._segments.write_to(seg, (view[a:b],), b - a, headers[i:j], [p - a for p in positions[i:j]], now_ms)
        finally:
            self._pending = ()

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
        """The produce hot path: one batch, no header object built for it."""
        seg = self._segments[-1]
        last = base_offset + h.last_offset_delta
        if seg.size and must_roll(self.config, seg.size, seg.base_offset, seg.created_ms, nbytes, last, now_ms):
            seg = self._roll(now_ms)
        seg.append_one((prefix, body), nbytes, base_offset, last + 1, h.max_timestamp, now_ms)
        self._segments.size += nbytes

    def _roll(self, now_ms: int) -> Segment:
        """Seal the active segment and start a new one at the LEO.

        The sealed segment is fsynced later, by the next flush (see the module docstring);
        until then recovery treats it like the active segment.
        """
        old = self._segments[-1]
        old.index.sync()
        self._segments.unsynced.append(old)
        base = old.next_offset
        self._snapshots.write(base, self.producer_state, self._pending, sync_dir=False, read_control=self._read_control)
        seg = Segment.create(self.directory, base, self.config.index_interval_bytes, now_ms, self._fs)
        self._segments.add(seg)  # before anything else can fail: an offline log closes it
        self._fs.fsync_dir(self.directory)  # the snapshot's rename and the new segment's files
        self._snapshots.prune(self.log_start_offset)
        self._segments.remember_reader(old)
        return seg

    # -- reading --------------------------------------------------------------------------

    def _read(self, from_offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        return self._segments.read(from_offset, max_bytes, max_offset)

    def _locate(self, from_offset: int, max_bytes: int, max_offset: int | None) -> list[tuple[str, int, int]]:
        return self._segments.locate(from_offset, max_bytes, max_offset)

    def _batches_from_timestamp(self, timestamp_ms: int) -> Iterator[tuple[BatchHeader, bytes]]:
        return self._segments.batches_from_timestamp(timestamp_ms)

    # -- truncation -----------------------------------------------------------------------

    def _truncate_storage(self, offset: int) -> int:
        self.sync_sealed_segments()  # rare: afterwards everything kept is durable, like the cut itself
        segs = self._segments
        i = segs.position_of(offset)
        seg = segs[i]
        found = seg.find(offset)
        position, new_leo = (found[0], min(found[1].base_offset, offset)) if found else (seg.size, seg.next_offset)
        if new_leo < self._recovery_point:
            # Lowered first: a crash part-way through the cut must not find a gap between
            # segments below the recovery point, which recovery would take for the cleaner's.
            self._set_recovery_point(new_leo)
        for later in segs[i + 1 :]:
            self._txn_files.delete(later.base_offset)
        deleted = segs.delete_after(i)
        segs.cut(i, position, new_leo)
        if deleted:
            self._fs.fsync_dir(self.directory)
        if self._cleaner_offset > new_leo:  # records appended from here on are dirty
            self.checkpoint_cleaner_offset(new_leo)
        return new_leo

    @storage_operation
    def truncate_fully_and_start_at(self, offset: int, producers: dict | None = None) -> None:
        """Drop all data; the log restarts empty at ``offset`` (a follower that fell
        behind the leader's retention). ``producers``: the producer state below ``offset``
        (the leader's :meth:`ProducerStateManager.snapshot_below`) to start with, kept in a
        snapshot at ``offset``.

        Ordered so that a crash at any point reopens as either a prefix of the old log or
        the new empty one: the epoch checkpoint is cleared and the producer snapshots go
        first (recovery rebuilds both from whatever batches survive; the new one, at
        ``offset``, lies past the old log's end and is dropped with it), then the new
        segment is created, and only then are the old segments deleted, newest first.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        fs = self._fs
        # Recovery must not take the new segment after the old ones for a cleaner's gap.
        self._set_recovery_point(min(offset, self._segments[0].base_offset))
        self.epoch_cache.clear()
        self._snapshots.delete_all()
        self._txn_files.delete_all()
        self.txn_index.clear()
        self.producer_state.clear()
        if producers:
            self.producer_state.load(producers)
            self._snapshots.write(offset, self.producer_state, sync_dir=False)
        fs.fsync_dir(self.directory)
        old = self._segments
        old.close()
        # O_TRUNC: an old segment with this very base is emptied and reused, not deleted.
        self._segments = SegmentList([Segment.create(self.directory, offset, self.config.index_interval_bytes, self._now, fs)])
        fs.fsync_dir(self.directory)
        for seg in reversed(old):
            if seg.base_offset != offset:
                seg.delete()
        fs.fsync_dir(self.directory)
        self._set_recovery_point(offset)
        self._set_log_start(offset)
        # Last: a crash before it reopens the old log's prefix with its cleaner offset, and
        # a truncation below that offset starts the log over again (truncate_to); and with
        # its tombstone horizon, which still holds for it.
        self.checkpoint_cleaner_offset(offset)
        self.note_tombstones_removed(0, reset=True)
        if self._fetched_compacted_below != offset:
            self._set_fetched_compacted_below(offset)
        # Written, not assumed: with no checkpoint a reopen takes the log start for the HW, and
        # a start moved down would otherwise make a later checkpoint look written already.
        write_offset(self._fs, self.directory / HW_CHECKPOINT, offset)
        self._checkpointed_hw = self._high_watermark = offset
        self._flush_policy.flushed(self._now)

    # -- retention, the log start offset, rolling by time ------------------------------

    def _set_log_start(self, offset: int) -> None:
        """Move the log start offset and persist it when it is above the first segment's base
        (a crash must not bring back records a DeleteRecords removed)."""
        if offset == self._log_start:
            return
        self._log_start = offset
        if offset > self._segments[0].base_offset or self._fs.exists(self.directory / LOG_START_CHECKPOINT):
            write_offset(self._fs, self.directory / LOG_START_CHECKPOINT, offset)

    @storage_operation
    def apply_retention(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete the oldest whole segments past retention.ms or beyond retention.bytes, and
        those wholly below the log start offset.

        The active segment is never deleted, nor (when ``high_watermark`` is given) one
        holding offsets at or above it: consumers and lagging followers still need those.
        With cleanup.policy=compact (without delete) only segments below the log start
        offset go. Returns the number of segments deleted; the log start offset moves to
        the first segment kept.
        """
        self._check_open()
        self._now = now_ms
        return self._delete_old_segments(now_ms, high_watermark, self.config.delete)

    def _delete_old_segments(self, now_ms: int, high_watermark: int | None, by_policy: bool) -> int:
        cfg = self.config
        deleted = 0
        while len(self._segments) > 1:
            seg = self._segments[0]
            next_base = self._segments[1].base_offset
            if next_base <= self._log_start:
                pass  # every record in it is below the log start offset (DeleteRecords)
            else:
                if not by_policy or (high_watermark is not None and next_base > high_watermark):
                    break
                if not past_retention(cfg, now_ms, seg.max_timestamp, seg.size, self._segments.size):
                    break
            self._segments.delete_first()
            self._txn_files.delete(seg.base_offset)
            deleted += 1
        if deleted:
            self._fs.fsync_dir(self.directory)
            self._set_log_start(max(self._log_start, self._segments[0].base_offset))
            self._start_moved(self.log_start_offset)
            self._snapshots.prune(self.log_start_offset)
        return deleted

    @storage_operation
    def advance_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (clamped to the LEO): Kafka's
        DeleteRecords on a leader, and a follower learning its leader's log start offset.
        Records below it are no longer readable; whole segments below it are deleted now.
        The caller keeps a leader's ``offset`` at or below the HW. Returns whether it moved."""
        self._check_open()
        offset = min(offset, self.log_end_offset)
        if offset <= self._log_start:
            return False
        self._set_log_start(offset)
        self._start_moved(offset)
        self._delete_old_segments(self._now, None, False)
        return True

    @storage_operation
    def maybe_roll(self, now_ms: int) -> bool:
        """Roll the active segment if it holds data and is older than segment.ms, so that
        time retention and the cleaner can act on an idle partition's last records."""
        self._check_open()
        self._now = now_ms
        seg = self._segments[-1]
        if seg.size == 0 or now_ms - seg.created_ms < self.config.segment_ms:
            return False
        self._roll(now_ms)
        return True

    # -- compaction: the interface the log cleaner (cleaner.py) works through ----------

    supports_compaction = True

    @storage_operation
    def clean(self, now_ms: int, high_watermark: int | None = None, *, force: bool = False) -> CleanResult:
        """One cleaner pass (:func:`kcoord.log.cleaner.compact`); a no-op result unless the
        cleanup.policy includes compact. ``force`` ignores min.cleanable.dirty.ratio."""
        self._check_open()
        return compact(self, now_ms, high_watermark, force=force)

    @property
    def cleaner_offset(self) -> int:
        """Where the dirty (not yet compacted) part of the log starts."""
        return max(self._cleaner_offset, self._log_start)

    @property
    def tombstone_horizon(self) -> int:
        """One past the newest tombstone the cleaner removed (0: none)."""
        return self._tombstone_horizon

    def note_tombstones_removed(self, end: int, *, reset: bool = False) -> None:
        """Persist that the cleaner removes tombstones below ``end`` (before it does: a
        replica that lacks one of them must not miss it unnoticed). ``reset``: the log
        started over, nothing of it was removed."""
        if end > self._tombstone_horizon or (reset and end != self._tombstone_horizon):
            write_offset(self._fs, self.directory / TOMBSTONE_HORIZON, end)
            self._tombstone_horizon = end

    @property
    def tombstone_clock(self) -> TombstoneClock:
        """When the cleaner first passed each part of the log (KIP-534's delete horizon)."""
        return self._tombstone_clock

    def note_cleaner_pass(self, end: int, now_ms: int) -> None:
        """Persist that a cleaner pass at ``now_ms`` covered everything below ``end``."""
        if self._tombstone_clock.note_pass(end, now_ms, self.config.delete_retention_ms):
            write_pairs(self._fs, self.directory / TOMBSTONE_CLOCK, self._tombstone_clock.entries)

    def _load_tombstone_clock(self, notes: list[str]) -> TombstoneClock:
        """The clock as persisted, cut at the cleaner offset (a crash may have come between
        lowering one and the other); none, or a bad file, leaves every offset unpassed."""
        try:
            clock = TombstoneClock(read_pairs(self._fs, self.directory / TOMBSTONE_CLOCK))
        except (CheckpointError, ValueError) as exc:
            notes.append(f"tombstone clock checkpoint ignored: {exc}")
            clock = TombstoneClock()
        clock.clip(self._cleaner_offset)
        return clock

    def _set_fetched_compacted_below(self, offset: int) -> None:
        write_offset(self._fs, self.directory / FETCHED_COMPACTED, offset)
        self._fetched_compacted_below = offset

    def checkpoint_cleaner_offset(self, offset: int) -> None:
        """Persist where the cleaner's next dirty section starts (inside :meth:`clean`)."""
        if offset != self._cleaner_offset:
            if offset < self._cleaner_offset and self._tombstone_clock.clip(offset):
                write_pairs(self._fs, self.directory / TOMBSTONE_CLOCK, self._tombstone_clock.entries)
            write_offset(self._fs, self.directory / CLEANER_CHECKPOINT, offset)
            self._cleaner_offset = offset

    def log_segments(self) -> list[Segment]:
        """Every segment, oldest first; the last is the active one (the cleaner reads the
        sealed ones and rewrites them through :meth:`replace_segment`)."""
        return list(self._segments)

    def replace_segment(self, seg: Segment, data: bytes, headers: Sequence[BatchHeader], positions: Sequence[int]) -> Segment:
        """Replace a sealed segment's batches with ``data`` crash-safely (inside :meth:`clean`):
        a crash at any point reopens either the old segment or the new one, never a mix.

        The segment's files are swapped by :meth:`Segment.replaced_with`."""
        i = self._segments.index(seg)
        if i == len(self._segments) - 1:
            raise ValueError("the active segment is never rewritten")
        new = seg.replaced_with(data, headers, positions)
        self._segments.replace(seg, new)
        return new

    # -- durability -----------------------------------------------------------------------

    def _flush_storage(self) -> None:
        self.sync_sealed_segments()
        self._segments[-1].flush()

    def sync_sealed_segments(self) -> bool:
        """fsync rolled segments not yet synced and move the recovery point past them."""
        unsynced = self._segments.unsynced
        if not unsynced:
            return False
        for seg in unsynced:
            seg.flush(fsync_index=True)
            self._txn_files.sync(seg.base_offset)
        unsynced.clear()
        self._set_recovery_point(self._segments[-1].base_offset)
        return True

    @storage_operation
    def checkpoint_high_watermark(self, hw: int) -> None:
        """Set the HW (clamped to [log start, LEO]) and persist it atomically."""
        self._check_open()
        hw = self._clamp_high_watermark(hw)
        if hw != self._checkpointed_hw:
            write_offset(self._fs, self.directory / HW_CHECKPOINT, hw)
            self._checkpointed_hw = hw
        self._high_watermark = hw
        self.producer_state.on_high_watermark(hw)

    def close(self) -> None:
        """Flush, snapshot producer state, mark the shutdown clean, close files. Idempotent.

        An offline log only lets go of its files and lock (it writes nothing more); an I/O
        error while closing takes the log offline and is raised."""
        if self._closed:
            return
        try:
            if self._offline is None:
                self.sync_sealed_segments()
                self._segments[-1].flush(fsync_index=True)
                self._txn_files.sync(self._segments[-1].base_offset)
                self._set_recovery_point(self.log_end_offset)
                self._snapshots.write(self.log_end_offset, self.producer_state)
                self._snapshots.prune(self.log_start_offset)
                write_atomic(self._fs, self.directory / CLEAN_SHUTDOWN, b"")
        except OSError as exc:
            raise self._go_offline(exc, "close") from exc
        finally:
            self._release_storage()
            self._mark_closed()

    def _release_storage(self) -> None:
        self._segments.close(ignore_errors=True)
        lock = getattr(self, "_lock", None)
        if lock is not None:
            try:
                lock.release()
            except OSError:
                pass

    def _where(self) -> str:
        return f"log {self.directory}"

    def __enter__(self) -> "Log":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if not self._segments:
            return f"Log({str(self.directory)!r}, not open)"
        state = ", offline" if self._offline is not None else ""
        return (
            f"Log({str(self.directory)!r}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"hw={self._high_watermark}, segments={len(self._segments)}{state})"
        )
