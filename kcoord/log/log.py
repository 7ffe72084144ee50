"""The durable, segmented partition log.

Layout of a log directory::

    00000000000000000000.log              batches, exactly as appended
    00000000000000000000.index            sparse offset index of that segment
    00000000000000001234.log / .index     the next segment, starting at offset 1234
    leader-epoch-checkpoint               epoch -> start offset (text)
    high-watermark-checkpoint             last checkpointed HW (text)
    recovery-point-checkpoint             segments ending at or before it are fsynced (text)
    log-start-offset-checkpoint           the log start offset, when above the first segment's base
                                          (DeleteRecords, a follower that learnt it from its leader)
    cleaner-offset-checkpoint             compacted topics: where the cleaner's dirty section starts
    00000000000000001234.producer-snapshot  producer state as of offset 1234 (msgpack)
    .kcoord-clean-shutdown                present only between close() and the next open
    .lock                                 flock'ed while a Log has the directory open

The LEO is the last segment's next offset. The log start offset is the first segment's
base offset or, if higher, the checkpointed one (records below it are gone for readers even
while their segment is still on disk). After compaction a segment may have gaps between
batches (offsets never change); readers skip them like Kafka's.

Producer state is derived from batch headers and snapshotted at each segment roll and on
close (``producer_snapshots.py``).

Rolling a segment does not fsync it on the produce path (that could stall an append for
the time it takes to write back a whole segment): the sealed segment is fsynced by the
next flush, either the flush policy's or :meth:`Log.maybe_flush`, which the replica calls
from its timer. Only then does the recovery point move past it.

All file I/O goes through a :class:`~kcoord.log.fs.FileSystem` (the real one unless the
simulation passes its simulated disk), and an I/O error takes the log offline (``base.py``).
"""

from __future__ import annotations

import logging
import uuid
from bisect import bisect_right
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..records import BatchHeader
from .base import AppendInfo, BaseLog, _BufferLike, storage_operation
from .checkpoint import (
    CLEAN_SHUTDOWN,
    CLEANER_CHECKPOINT,
    LOG_START_CHECKPOINT,
    EPOCH_CHECKPOINT,
    HW_CHECKPOINT,
    RECOVERY_POINT,
    TMP_SUFFIX,
    CheckpointError,
    read_epochs,
    read_lost_pages,
    read_directory_id,
    read_offset,
    write_atomic,
    write_directory_id,
    write_epochs,
    write_lost_pages,
    write_offset,
    write_synced,
)
from .cleaner import CleanResult, clean as _clean_pass
from .config import LogConfig
from .epochs import EpochEntry, LeaderEpochCache
from .errors import LogStorageError
from .fs import OS_FILE_SYSTEM, FileSystem
from .index import OffsetIndex
from .lock import DirectoryLock
from .producer_snapshots import ProducerSnapshots
from .recovery import RecoveryReport, load_segments
from .rolling import must_roll, plan_runs
from .segment import Segment, SegmentInfo

logger = logging.getLogger("kcoord.log")

MAX_OPEN_READERS = 64  # file handles kept open for reading older segments

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
        self._segments: list[Segment] = []
        self._readers: OrderedDict[int, Segment] = OrderedDict()
        self._snapshots = ProducerSnapshots(fs, self.directory)
        try:
            self._make_directory()
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

    def _make_directory(self) -> None:
        """Create the directory (and missing parents), each made durable in its parent: a
        new directory whose name is lost in a crash would take its fsynced files along."""
        fs = self._fs
        missing = []
        path = self.directory
        while not fs.exists(path):
            missing.append(path)
            if path.parent == path:
                break
            path = path.parent
        if missing:
            fs.makedirs(self.directory)
            for created in reversed(missing):
                fs.fsync_dir(created.parent)

    def _open(self) -> None:
        """Recover the directory's contents and load the checkpoints (see recovery.py)."""
        fs = self._fs
        self._pending: Sequence[BatchHeader] = ()
        self._unsynced: list[Segment] = []  # rolled but not yet fsynced
        report = RecoveryReport()
        self._directory_id = self._load_directory_id()
        self._storage_generation = read_lost_pages(fs, self.directory)
        marker = self.directory / CLEAN_SHUTDOWN
        report.clean_shutdown = fs.exists(marker)
        self.recovery_report = report
        self._recovery_point = self._read_offset_checkpoint(RECOVERY_POINT, "recovery point", 0)

        transitions: list[tuple[int, int]] = []  # epoch changes seen in the verified segments

        def note_epoch(_pos: int, h: BatchHeader) -> None:
            if h.leader_epoch >= 0 and (not transitions or h.leader_epoch > transitions[-1][0]):
                transitions.append((h.leader_epoch, h.base_offset))

        self._segments = load_segments(
            fs, self.directory, self.config.index_interval_bytes, self._now, report, self._recovery_point, note_epoch
        )
        self._bases = [s.base_offset for s in self._segments]
        self._log_start = self._segments[0].base_offset
        stored_start = self._read_offset_checkpoint(LOG_START_CHECKPOINT, "log start offset", 0)
        self._log_start = max(self._log_start, min(stored_start, self._segments[-1].next_offset))
        self._cleaner_offset = self._read_offset_checkpoint(CLEANER_CHECKPOINT, "cleaner offset", 0)
        self._size = sum(s.size for s in self._segments)
        for seg in self._segments[:-1]:
            self._remember_reader(seg)  # bounds the handles recovery opened
        self.epoch_cache = self._load_epoch_cache(transitions)
        self._checkpointed_hw = self._read_offset_checkpoint(HW_CHECKPOINT, "high watermark", self.log_start_offset)
        self._high_watermark = self._clamp_high_watermark(self._checkpointed_hw)
        self._restore_producer_state()
        if self._recovery_point < self.log_end_offset:
            # What recovery kept may still be only in the page cache of a crashed process.
            for seg in self._segments:
                if seg.next_offset > self._recovery_point:
                    seg.flush(fsync_index=True)
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

    def _load_epoch_cache(self, transitions: list[tuple[int, int]]) -> LeaderEpochCache:
        report = self.recovery_report
        entries: list[tuple[int, int]] | None
        try:
            entries = read_epochs(self._fs, self.directory / EPOCH_CHECKPOINT)
            cache = LeaderEpochCache(entries or (), on_change=self._persist_epochs)
        except (CheckpointError, ValueError) as exc:
            report.notes.append(f"leader epoch checkpoint ignored: {exc}")
            entries = None
        if entries == [] and self.log_end_offset > self.log_start_offset:
            # Batches written through a leader carry an epoch >= 0, so a log with batches
            # has epochs: this checkpoint was cleared for data that then survived (a crash
            # inside truncate_fully_and_start_at). (A log of unstamped batches, epoch -1,
            # has none either; rebuilding finds none again: harmless, one header walk.)
            report.notes.append("leader epoch checkpoint empty for a non-empty log")
            entries = None
        if entries is None:
            # No usable checkpoint: the batches carry their epochs, so derive it.
            cache = LeaderEpochCache(on_change=self._persist_epochs)
            if self.log_end_offset > self.log_start_offset:
                report.notes.append("leader epoch cache rebuilt from batch headers")
                rebuilt = LeaderEpochCache()
                for h in self._iter_headers(self.log_start_offset):
                    if h.leader_epoch >= 0:
                        rebuilt.assign(h.leader_epoch, h.base_offset)
                cache = LeaderEpochCache(rebuilt.entries, on_change=self._persist_epochs)
            self._persist_epochs(cache.entries)
        # Entries past the LEO describe records a crash took. One starting exactly at the
        # LEO stays: a new leader records its epoch there before its first append.
        cache.truncate_from_end(self.log_end_offset + 1)
        cache.truncate_from_start(self.log_start_offset)
        for epoch, start in transitions:
            cache.assign(epoch, start)
        return cache

    # -- directory identity -------------------------------------------------------------

    @property
    def directory_id(self) -> str:
        """This directory's id, given when a log was first opened in it (KIP-858's idea,
        per replica). The replica reports it; the controller remembers it, and a replica
        that comes back with another id has lost its disk, whatever its log now says."""
        return self._directory_id

    def _load_directory_id(self) -> str:
        try:
            known = read_directory_id(self._fs, self.directory)
        except CheckpointError as exc:
            # Unreadable: this directory cannot show it is the one it was, so it counts as a
            # new one (the controller then treats it as having lost its disk).
            logger.warning("%s: %s; giving the directory a new id", self._where(), exc)
            known = ""
        if known:
            return known
        new = self._new_directory_id()
        write_directory_id(self._fs, self.directory, new)
        return new

    # -- storage generation -------------------------------------------------------------

    @property
    def storage_generation(self) -> int:
        """How many times an I/O error took this log offline, as recorded in its directory.

        A failed fsync may make the kernel drop the dirty pages it could not write (Linux
        does), so the page cache no longer holds every byte this log's processes wrote. A
        replica restarted on the same machine would otherwise count as having kept them
        (a process crash loses nothing of the page cache) and could be trusted to lead with
        a tail that is gone. The replica adds this number to the storage lineage it
        reports, so the controller sees changed storage after such an error even when it
        never saw the log go offline (it was down, or the process died first)."""
        return self._storage_generation

    def _record_lost_pages(self) -> None:
        """Count one more I/O error in the directory; must not raise."""
        generation = max(self._storage_generation, read_lost_pages(self._fs, self.directory)) + 1
        if write_lost_pages(self._fs, self.directory, generation):
            self._storage_generation = generation
        # else: the controller still learns it from KAFKA_STORAGE_ERROR if it asks in time

    def _go_offline(self, exc: OSError, what: str) -> LogStorageError:
        if self._offline is None:
            self._record_lost_pages()
        return super()._go_offline(exc, what)

    def _read_offset_checkpoint(self, name: str, what: str, default: int) -> int:
        try:
            value = read_offset(self._fs, self.directory / name)
        except CheckpointError as exc:
            self.recovery_report.notes.append(f"{what} checkpoint ignored: {exc}")
            value = None
        return default if value is None else value

    def _set_recovery_point(self, offset: int) -> None:
        if offset != self._recovery_point:
            write_offset(self._fs, self.directory / RECOVERY_POINT, offset)
            self._recovery_point = offset

    def _restore_producer_state(self) -> None:
        """From the newest snapshot not past the LEO and the headers after it (on open and
        after a truncation)."""
        self._snapshots.restore(
            self.producer_state, self.log_start_offset, self.log_end_offset, self._iter_headers, self.recovery_report.notes
        )

    # -- basic facts ----------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    @storage_operation
    def segments(self) -> list[SegmentInfo]:
        """Reads the disk once per segment (its largest timestamp, computed on first use)."""
        if self._offline is not None:
            self._check_open()
        return [
            SegmentInfo(s.base_offset, s.size, s.next_offset, s.created_ms, s.last_modified_ms, s.max_timestamp)
            for s in self._segments
        ]

    def _iter_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch from the one containing ``from_offset`` to the end."""
        segs = self._segments
        i = max(0, bisect_right(self._bases, from_offset) - 1)
        found = segs[i].find(from_offset)
        position = found[0] if found else segs[i].size
        for _, h in segs[i].iter_headers(position):
            yield h
        for seg in segs[i + 1 :]:
            for _, h in seg.iter_headers():
                yield h

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
            self._append_to(seg, chunks, nbytes, headers, positions, now_ms)
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
                self._append_to(seg, (view[a:b],), b - a, headers[i:j], [p - a for p in positions[i:j]], now_ms)
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
        self._size += nbytes

    def _append_to(
        self,
        seg: Segment,
        chunks: Sequence[_BufferLike],
        nbytes: int,
        headers: Sequence[BatchHeader],
        positions: Sequence[int],
        now_ms: int,
    ) -> None:
        seg.append(chunks, nbytes, headers, positions, now_ms)
        self._size += nbytes

    def _roll(self, now_ms: int) -> Segment:
        """Seal the active segment and start a new one at the LEO.

        The sealed segment is fsynced later, by the next flush (see the module docstring);
        until then recovery treats it like the active segment.
        """
        old = self._segments[-1]
        old.index.sync()
        self._unsynced.append(old)
        base = old.next_offset
        self._snapshots.write(base, self.producer_state, self._pending, sync_dir=False)
        seg = Segment.create(self.directory, base, self.config.index_interval_bytes, now_ms, self._fs)
        self._segments.append(seg)  # before anything else can fail: an offline log closes it
        self._bases.append(base)
        self._fs.fsync_dir(self.directory)  # the snapshot's rename and the new segment's files
        self._snapshots.prune(self.log_start_offset)
        self._remember_reader(old)
        return seg

    def _remember_reader(self, seg: Segment) -> None:
        """Keep file handles of recently read older segments open, up to a limit."""
        self._readers[seg.base_offset] = seg
        self._readers.move_to_end(seg.base_offset)
        while len(self._readers) > MAX_OPEN_READERS:
            _, oldest = self._readers.popitem(last=False)
            if oldest is not self._segments[-1]:
                oldest.close()

    # -- reading --------------------------------------------------------------------------

    def _read(self, from_offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        segs = self._segments
        last = len(segs) - 1
        i = bisect_right(self._bases, from_offset) - 1
        found = segs[i].find(from_offset)
        while found is None:  # no batch here (an emptied segment, a cleaner's gap)
            if i == last:
                return b""  # none up to the log end: a truncation cut what the cleaner kept
            i += 1
            found = segs[i].find(from_offset)
        if i != last:
            self._remember_reader(segs[i])
        data, to_end = segs[i].read(found[0], max_bytes, max_offset, True)
        if not to_end or i == last or len(data) >= max_bytes:
            return data
        parts = [data]
        total = len(data)
        while to_end and i < last and total < max_bytes:
            i += 1
            more, to_end = segs[i].read(0, max_bytes - total, max_offset, False)
            if more:
                parts.append(more)
                total += len(more)
        return b"".join(parts)

    def _locate(self, from_offset: int, max_bytes: int, max_offset: int | None) -> list[tuple[str, int, int]]:
        """The spans of segment files :meth:`_read` would return, in the same order."""
        segs = self._segments
        last = len(segs) - 1
        i = bisect_right(self._bases, from_offset) - 1
        found = segs[i].find(from_offset)
        while found is None:
            if i == last:
                return []
            i += 1
            found = segs[i].find(from_offset)
        start = found[0]
        end, to_end = segs[i].span(start, max_bytes, max_offset, True)
        spans = [(str(segs[i].log_path), start, end - start)] if end > start else []
        total = end - start
        if not to_end or i == last or total >= max_bytes:
            return spans
        while to_end and i < last and total < max_bytes:
            i += 1
            end, to_end = segs[i].span(0, max_bytes - total, max_offset, False)
            if end > 0:
                spans.append((str(segs[i].log_path), 0, end))
                total += end
        return spans

    def _batches_from_timestamp(self, timestamp_ms: int) -> Iterator[tuple[BatchHeader, bytes]]:
        for seg in self._segments:
            if seg.size == 0 or seg.max_timestamp < timestamp_ms:
                continue
            for pos, h in seg.iter_headers():
                if h.max_timestamp >= timestamp_ms:
                    yield h, seg.pread(h.size, pos)

    # -- truncation -----------------------------------------------------------------------

    def _truncate_storage(self, offset: int) -> int:
        self._sync_sealed()  # rare: afterwards everything kept is durable, like the cut itself
        segs = self._segments
        i = bisect_right(self._bases, offset) - 1
        seg = segs[i]
        found = seg.find(offset)
        position, new_leo = (found[0], min(found[1].base_offset, offset)) if found else (seg.size, seg.next_offset)
        if new_leo < self._recovery_point:
            # Lowered first: a crash part-way through the cut must not find a gap between
            # segments below the recovery point, which recovery would take for the cleaner's.
            self._set_recovery_point(new_leo)
        later = segs[i + 1 :]
        for s in reversed(later):  # newest first: a crash part-way leaves a shorter valid log
            self._forget(s)
            s.delete()
            self._size -= s.size
        del segs[i + 1 :]
        del self._bases[i + 1 :]
        self._size -= seg.size - position
        seg.truncate(position, new_leo)
        if later:
            self._fs.fsync_dir(self.directory)
        return new_leo

    def _forget(self, seg: Segment) -> None:
        """Drop a segment about to be deleted from the handle cache and the unsynced list."""
        self._readers.pop(seg.base_offset, None)
        if seg in self._unsynced:
            self._unsynced.remove(seg)

    @storage_operation
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop all data; the log restarts empty at ``offset`` (a follower that fell
        behind the leader's retention).

        Ordered so that a crash at any point reopens as either a prefix of the old log or
        the new empty one: the epoch checkpoint is cleared and the producer snapshots go
        first (recovery rebuilds both from whatever batches survive), then the new segment
        is created, and only then are the old segments deleted, newest first.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        fs = self._fs
        # Recovery must not take the new segment after the old ones for a cleaner's gap.
        self._set_recovery_point(min(offset, self._segments[0].base_offset))
        self.epoch_cache.clear()
        self._snapshots.delete_all()
        fs.fsync_dir(self.directory)
        old = self._segments
        for seg in old:
            seg.close()
        self._readers.clear()
        self._unsynced.clear()
        # O_TRUNC: an old segment with this very base is emptied and reused, not deleted.
        self._segments = [Segment.create(self.directory, offset, self.config.index_interval_bytes, self._now, fs)]
        self._bases = [offset]
        self._size = 0
        fs.fsync_dir(self.directory)
        for seg in reversed(old):
            if seg.base_offset != offset:
                seg.delete()
        fs.fsync_dir(self.directory)
        self._set_recovery_point(offset)
        self._set_log_start(offset)
        self.producer_state.clear()
        self._high_watermark = offset
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
                too_old = cfg.retention_ms >= 0 and now_ms - seg.max_timestamp > cfg.retention_ms
                too_big = cfg.retention_bytes >= 0 and self._size - seg.size >= cfg.retention_bytes
                if not (too_old or too_big):
                    break
            self._forget(seg)
            seg.delete()
            self._size -= seg.size
            del self._segments[0]
            del self._bases[0]
            deleted += 1
        if deleted:
            self._fs.fsync_dir(self.directory)
            self._set_log_start(max(self._log_start, self._segments[0].base_offset))
            self.epoch_cache.truncate_from_start(self.log_start_offset)
            self._high_watermark = max(self._high_watermark, self.log_start_offset)
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
        self.epoch_cache.truncate_from_start(offset)
        self._high_watermark = max(self._high_watermark, offset)
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

    # -- compaction (the cleaner, cleaner.py, drives these) -----------------------------

    supports_compaction = True

    def clean(self, now_ms: int, high_watermark: int | None = None) -> CleanResult:
        """One cleaner pass (:func:`kcoord.log.cleaner.clean`); a no-op result unless the
        cleanup.policy includes compact."""
        return _clean_pass(self, now_ms, high_watermark)

    @property
    def cleaner_offset(self) -> int:
        """Where the dirty (not yet compacted) part of the log starts."""
        return max(self._cleaner_offset, self._log_start)

    def _set_cleaner_offset(self, offset: int) -> None:
        if offset != self._cleaner_offset:
            write_offset(self._fs, self.directory / CLEANER_CHECKPOINT, offset)
            self._cleaner_offset = offset

    def _sealed_segments(self) -> list[Segment]:
        return self._segments[:-1]

    def _replace_segment_data(self, seg: Segment, data: bytes, headers: Sequence[BatchHeader], positions: Sequence[int]) -> Segment:
        """Replace a sealed segment's batches with ``data`` crash-safely: a crash at any
        point reopens either the old segment or the new one, never a mix.

        The new bytes go to ``<base>.log.cleaned.tmp`` (recovery deletes such leftovers) and
        are fsynced; the old index is removed (durably: recovery rebuilds a missing index);
        then one rename replaces the old file and the directory is fsynced. The new index is
        written last."""
        fs = self._fs
        i = self._segments.index(seg)
        if i == len(self._segments) - 1:
            raise ValueError("the active segment is never rewritten")
        tmp = seg.log_path.with_name(seg.log_path.name + ".cleaned" + TMP_SUFFIX)
        write_synced(fs, tmp, data)
        seg.close()
        try:
            fs.unlink(seg.index_path)
        except FileNotFoundError:
            pass
        fs.fsync_dir(self.directory)
        fs.replace(tmp, seg.log_path)
        fs.fsync_dir(self.directory)
        new = Segment(
            self.directory,
            seg.base_offset,
            size=len(data),
            next_offset=headers[-1].next_offset if headers else seg.base_offset,
            index=OffsetIndex(seg.index_path, seg.base_offset, fs),
            index_interval_bytes=seg.index_interval_bytes,
            created_ms=seg.created_ms,
            last_modified_ms=seg.last_modified_ms,
            fs=fs,
        )
        for h, p in zip(headers, positions):
            new.note_batch(h, p)
        new.index.rewrite()
        fs.fsync_dir(self.directory)
        self._segments[i] = new
        self._size += len(data) - seg.size
        if seg in self._unsynced:
            self._unsynced[self._unsynced.index(seg)] = new
        if self._readers.pop(seg.base_offset, None) is not None:
            self._remember_reader(new)
        return new

    # -- durability -----------------------------------------------------------------------

    def _flush_storage(self) -> None:
        self._sync_sealed()
        self._segments[-1].flush()

    def _sync_sealed(self) -> bool:
        """fsync rolled segments not yet synced and move the recovery point past them."""
        if not self._unsynced:
            return False
        for seg in self._unsynced:
            seg.flush(fsync_index=True)
        self._unsynced.clear()
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

    def close(self) -> None:
        """Flush, snapshot producer state, mark the shutdown clean, close files. Idempotent.

        An offline log only lets go of its files and lock (it writes nothing more); an I/O
        error while closing takes the log offline and is raised."""
        if self._closed:
            return
        try:
            if self._offline is None:
                self._sync_sealed()
                self._segments[-1].flush(fsync_index=True)
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
        for seg in self._segments:
            try:
                seg.close()
            except OSError:
                pass  # a descriptor the disk (or a simulated crash) already invalidated
        self._readers.clear()
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
