"""Opening a log directory after a clean shutdown or a crash.

A crash can leave a torn last batch (a write cut short, or pages the OS never wrote back)
and a disk can flip bits; either would otherwise be served to consumers and replicated.
So on open every segment that may hold unsynced data is read end to end with CRCs checked
and cut at the first batch that does not check out: the active segment always, and every
segment at or after the recovery point (the offset below which everything was fsynced,
see ``recovery-point-checkpoint``). Older segments get cheaper checks: a trustworthy index
and framing from the last index entry to the end; if those fail the segment is verified
fully too. Whatever is cut, and every later segment, is reported in :class:`RecoveryReport`.

The leader-epoch cache is then loaded from its checkpoint, or rebuilt from the batch
headers when the checkpoint is unusable, and made to agree with what recovery kept
(:func:`load_epoch_cache`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from ..record import BatchHeader, ScanProblem
from .checkpoint import TMP_SUFFIX, CheckpointError, read_epochs
from .epochs import EpochEntry, LeaderEpochCache
from .fs import FileSystem
from .segment import INDEX_SUFFIX, LOG_SUFFIX, Segment, index_path, log_path, open_segment, parse_base_offset, walk_to_end


@dataclass
class RecoveryReport:
    """What opening the log found and changed."""

    clean_shutdown: bool = False  # the previous close() finished
    segments_scanned: int = 0  # segments whose every batch was CRC-checked
    truncated_bytes: int = 0  # bytes cut from the cut segment plus all deleted segments
    corrupt_offset: int | None = None  # offset where the first bad batch should have started
    corrupt_position: int | None = None  # its byte position in its segment
    corrupt_segment: int | None = None  # that segment's base offset
    reason: str = ""  # why it was cut ("" when nothing was)
    index_rebuilt: bool = False
    rebuilt_indexes: list[int] = field(default_factory=list)  # base offsets
    deleted_segments: list[int] = field(default_factory=list)  # base offsets of segments removed whole
    notes: list[str] = field(default_factory=list)  # other repairs (bad checkpoints, stray files)

    @property
    def cut(self) -> bool:
        return self.truncated_bytes > 0 or bool(self.deleted_segments)


def _remove(fs: FileSystem, path: Path) -> None:
    try:
        fs.unlink(path)
    except FileNotFoundError:
        pass


def load_segments(
    fs: FileSystem,
    directory: Path,
    index_interval_bytes: int,
    now_ms: int,
    report: RecoveryReport,
    recovery_point: int = 0,
    on_scanned_batch: Callable[[int, BatchHeader], None] | None = None,
) -> list[Segment]:
    """Open, check and repair every segment in ``directory``; returns them in order.

    Segments ending at or before ``recovery_point`` were fsynced and get the cheap checks;
    the rest are CRC-scanned, each batch handed to ``on_scanned_batch``. An empty directory
    gets one empty segment at offset 0.
    """
    names = sorted(fs.listdir(directory))
    bases: list[int] = []
    index_bases: list[int] = []
    for name in names:
        if name.endswith(TMP_SUFFIX):
            _remove(fs, directory / name)  # an atomic write that never got renamed
            report.notes.append(f"removed unfinished temporary file {name}")
        elif (b := parse_base_offset(name, LOG_SUFFIX)) is not None:
            bases.append(b)
        elif (b := parse_base_offset(name, INDEX_SUFFIX)) is not None:
            index_bases.append(b)
    for b in sorted(set(index_bases) - set(bases)):
        _remove(fs, index_path(directory, b))  # its log was deleted and the crash came in between
    bases.sort()
    if not bases:
        return [Segment.create(directory, 0, index_interval_bytes, now_ms, fs)]

    opened: list[Segment] = []
    try:
        return _load(fs, directory, bases, index_interval_bytes, now_ms, report, recovery_point, on_scanned_batch, opened)
    except BaseException:
        for seg in opened:
            try:
                seg.close()
            except OSError:
                pass
        raise


def _load(
    fs: FileSystem,
    directory: Path,
    bases: list[int],
    index_interval_bytes: int,
    now_ms: int,
    report: RecoveryReport,
    recovery_point: int,
    on_scanned_batch: Callable[[int, BatchHeader], None] | None,
    opened: list[Segment],
) -> list[Segment]:
    """The body of :func:`load_segments`; notes each segment it opens in ``opened`` at
    once, so that the caller can close them all if an I/O error stops it."""
    segments: list[Segment] = []
    for i, base in enumerate(bases):
        seg, index_problem = open_segment(directory, base, index_interval_bytes, now_ms, fs)
        opened.append(seg)
        prev_end = segments[-1].next_offset if segments else base
        # A gap before a segment is the cleaner's (it may empty a segment's end) only if the
        # previous segment was fsynced, i.e. this one starts at or below the recovery point;
        # otherwise the previous segment lost its tail in a crash.
        if base < prev_end or (base > prev_end and base > recovery_point):
            _cut_from(fs, report, bases[i:], directory, segments[-1],
                      f"segment {base} does not follow on from the previous segment, which ends at offset {prev_end}")
            seg.close()
            break
        last = i == len(bases) - 1
        problem: ScanProblem | None = None
        file_size = seg.size
        synced = not last and bases[i + 1] <= recovery_point
        if synced and index_problem is None:
            _, next_offset, bad = walk_to_end(seg, seg.index.last_position)
            if bad is None:
                seg.next_offset = next_offset
                segments.append(seg)
                continue
        # The active segment, one that may hold unsynced data, or an older one whose index
        # or framing is in doubt: verify every batch and rebuild its index.
        old_index = seg.index
        _, problem, _ = seg.recover(check_crc=True, on_batch=on_scanned_batch)
        report.segments_scanned += 1
        if index_problem is not None or not seg.index.same_entries(old_index):
            seg.index.rewrite()
            report.index_rebuilt = True
            report.rebuilt_indexes.append(base)
            if index_problem is not None:
                report.notes.append(f"index of segment {base} rebuilt: {index_problem}")
        else:
            seg.index = old_index
        segments.append(seg)
        if problem is not None:
            report.truncated_bytes += file_size - seg.size
            report.corrupt_offset = problem.expected_offset
            report.corrupt_position = problem.position
            report.corrupt_segment = base
            report.reason = (
                f"{problem.kind.value} batch where offset {problem.expected_offset} should start "
                f"(segment {base}): {problem.message}"
            )
            seg.truncate(seg.size, seg.next_offset)
            _delete_later(fs, report, bases[i + 1 :], directory)
            break
    return segments


def _cut_from(fs: FileSystem, report: RecoveryReport, bases: list[int], directory: Path, previous: Segment, reason: str) -> None:
    report.reason = reason
    report.corrupt_offset = previous.next_offset
    report.corrupt_segment = bases[0]
    report.corrupt_position = 0
    _delete_later(fs, report, bases, directory)


def _delete_later(fs: FileSystem, report: RecoveryReport, bases: list[int], directory: Path) -> None:
    """Delete whole segments after a cut: without the bytes before them they are unreachable."""
    for b in reversed(bases):
        path = log_path(directory, b)
        try:
            report.truncated_bytes += fs.stat(path).st_size
        except FileNotFoundError:
            pass
        _remove(fs, path)
        _remove(fs, index_path(directory, b))
        report.deleted_segments.insert(0, b)



def load_epoch_cache(
    fs: FileSystem,
    path: Path,
    report: RecoveryReport,
    log_start: int,
    log_end: int,
    headers: Callable[[], Iterable[BatchHeader]],
    transitions: list[tuple[int, int]],
    persist: Callable[[list[EpochEntry]], None],
) -> LeaderEpochCache:
    """The epoch cache of a log recovered to ``[log_start, log_end)``: from the checkpoint at
    ``path``, else rebuilt from ``headers()`` (and persisted), then cut to the log and given
    the epoch ``transitions`` recovery saw in the segments it verified. ``persist`` becomes
    its on_change."""
    entries: list[tuple[int, int]] | None
    try:
        entries = read_epochs(fs, path)
        cache = LeaderEpochCache(entries or (), on_change=persist)
    except (CheckpointError, ValueError) as exc:
        report.notes.append(f"leader epoch checkpoint ignored: {exc}")
        entries = None
    if entries == [] and log_end > log_start:
        # Batches written through a leader carry an epoch >= 0, so a log with batches
        # has epochs: this checkpoint was cleared for data that then survived (a crash
        # inside truncate_fully_and_start_at). (A log of unstamped batches, epoch -1,
        # has none either; rebuilding finds none again: harmless, one header walk.)
        report.notes.append("leader epoch checkpoint empty for a non-empty log")
        entries = None
    if entries is None:
        # No usable checkpoint: the batches carry their epochs, so derive it.
        cache = LeaderEpochCache(on_change=persist)
        if log_end > log_start:
            report.notes.append("leader epoch cache rebuilt from batch headers")
            rebuilt = LeaderEpochCache()
            for h in headers():
                if h.leader_epoch >= 0:
                    rebuilt.assign(h.leader_epoch, h.base_offset)
            cache = LeaderEpochCache(rebuilt.entries, on_change=persist)
        persist(cache.entries)
    # Entries past the LEO describe records a crash took. One starting exactly at the
    # LEO stays: a new leader records its epoch there before its first append.
    cache.truncate_from_end(log_end + 1)
    for epoch, start in transitions:
        cache.assign(epoch, start)
    # Recovery scans whole segments, below a log start inside one too: cut what it
    # learned there, or an epoch would claim offsets the log no longer has.
    cache.truncate_from_start(log_start)
    return cache
