"""One segment: a ``{base_offset:020d}.log`` file of concatenated batches plus its index.

All reading is ``pread`` of whole batches, and only the fixed batch header is ever
parsed: no record is decoded on the append, read or recovery paths. File I/O goes through
the log's :class:`~kcoord.log.fs.FileSystem`; the segment binds the methods it calls per
batch (``writev``, ``pread``) once, so the indirection costs nothing on the hot paths.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ..record import HEADER, HEADER_SIZE, LENGTH_PREFIX, PREFIX, BatchHeader, CorruptRecordError, Problem, Scan, ScanProblem, scan
from .checkpoint import TMP_SUFFIX, write_synced
from .fs import FileSystem
from .index import OffsetIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_LAST_DELTA = struct.Struct(">i")  # last_offset_delta, at byte 23 of a batch
_LAST_DELTA_END = 27  # bytes of header needed to know a batch's offsets and size
_WALK_WINDOW = 16 * 1024  # bytes read at a time when walking headers
_SCAN_CHUNK = 8 * 2**20  # bytes read at a time when verifying CRCs on recovery
_BufferLike = bytes | bytearray | memoryview


def log_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{LOG_SUFFIX}"


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{INDEX_SUFFIX}"


def parse_base_offset(name: str, suffix: str) -> int | None:
    """The base offset in a segment file name, or None if the name is not one of ours."""
    stem = name[: -len(suffix)] if name.endswith(suffix) else ""
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


@dataclass(frozen=True)
class SegmentInfo:
    """A segment as describe and tests see it."""

    base_offset: int
    size_bytes: int
    next_offset: int
    created_ms: int  # append clock at its first batch (after a restart: that batch's timestamp)
    last_modified_ms: int
    max_timestamp: int  # largest record timestamp, what time-based retention goes by


class Segment:
    """A segment's file, index and the facts about it the log needs without reading it."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        size: int,
        next_offset: int,
        index: OffsetIndex,
        index_interval_bytes: int,
        created_ms: int,
        last_modified_ms: int,
        fs: FileSystem,
    ) -> None:
        self.fs = fs
        self._writev = fs.writev
        self._pread = fs.pread
        self.directory = directory
        self.base_offset = base_offset
        self.size = size
        self.next_offset = next_offset
        self.index = index
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.last_modified_ms = last_modified_ms
        self._fd: int | None = None
        self._max_timestamp: int | None = None if size else -1

    def __repr__(self) -> str:
        return f"Segment(base={self.base_offset}, next={self.next_offset}, size={self.size})"

    @property
    def log_path(self) -> Path:
        return log_path(self.directory, self.base_offset)

    @property
    def index_path(self) -> Path:
        return index_path(self.directory, self.base_offset)

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int, fs: FileSystem) -> "Segment":
        """New empty files (not yet durable: the caller fsyncs the directory)."""
        seg = cls(
            directory,
            base_offset,
            size=0,
            next_offset=base_offset,
            index=OffsetIndex(index_path(directory, base_offset), base_offset, fs),
            index_interval_bytes=index_interval_bytes,
            created_ms=now_ms,
            last_modified_ms=now_ms,
            fs=fs,
        )
        # O_TRUNC: a file left behind under this name by an interrupted delete is stale.
        seg._fd = fs.open(seg.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        fs.close(fs.open(seg.index_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        return seg

    @property
    def fd(self) -> int:
        if self._fd is None:
            self._fd = self.fs.open(self.log_path, os.O_RDWR | os.O_APPEND)
        return self._fd

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            self.fs.close(fd)

    def delete(self) -> None:
        """Remove the files (log first: an orphan index is cleaned up on open)."""
        self.close()
        for path in (self.log_path, self.index_path):
            try:
                self.fs.unlink(path)
            except FileNotFoundError:
                pass

    # -- appending ------------------------------------------------------------------------

    def append(
        self,
        chunks: Sequence[_BufferLike],
        nbytes: int,
        headers: Sequence[BatchHeader],
        positions: Sequence[int],
        now_ms: int,
    ) -> None:
        """Write whole batches (``positions`` are relative to the first chunk's start)."""
        start = self._write_at_end(chunks, nbytes, now_ms)
        index = self.index
        interval = self.index_interval_bytes
        max_ts = self._max_timestamp
        for h, p in zip(headers, positions):
            p += start
            if p and p - index.last_position >= interval:  # same rule as note_batch
                index.append(h.base_offset, p)
            if max_ts is not None and h.max_timestamp > max_ts:
                max_ts = h.max_timestamp
        self._max_timestamp = max_ts
        self.size = start + nbytes
        self.next_offset = headers[-1].next_offset
        self.last_modified_ms = now_ms

    def append_one(
        self, chunks: Sequence[_BufferLike], nbytes: int, base_offset: int, next_offset: int, max_timestamp: int, now_ms: int
    ) -> None:
        """:meth:`append` for a single batch given by its offsets (the produce hot path)."""
        start = self._write_at_end(chunks, nbytes, now_ms)
        index = self.index
        if start and start - index.last_position >= self.index_interval_bytes:  # as note_batch
            index.append(base_offset, start)
        if self._max_timestamp is not None and max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
        self.size = start + nbytes
        self.next_offset = next_offset
        self.last_modified_ms = now_ms

    def _write_at_end(self, chunks: Sequence[_BufferLike], nbytes: int, now_ms: int) -> int:
        """Write ``chunks`` (``nbytes``) at the end of the file; where they start."""
        start = self.size
        if start == 0:
            self.created_ms = now_ms  # a segment's age counts from its first batch
        fd = self._fd if self._fd is not None else self.fd
        try:
            if self._writev(fd, chunks) != nbytes:
                self._finish_short_write(fd, start, chunks)
        except BaseException:
            # Leave no partial batch behind for a reader (or the next append) to trip on.
            self.fs.ftruncate(fd, start)
            raise
        return start

    def _finish_short_write(self, fd: int, start: int, chunks: Sequence[_BufferLike]) -> None:
        """writev wrote only part (disk nearly full, a signal): write the rest."""
        written = self.fs.fstat(fd).st_size - start
        rest = memoryview(b"".join(chunks))[written:]
        while rest:
            rest = rest[self.fs.write(fd, rest) :]

    def note_batch(self, h: BatchHeader, position: int) -> None:
        """Index a batch if enough bytes went by since the last entry (append and rebuild
        share this rule, so a rebuilt index equals the one written while appending)."""
        if position and position - self.index.last_position >= self.index_interval_bytes:
            self.index.append(h.base_offset, position)

    def replaced_with(self, data: bytes, headers: Sequence[BatchHeader], positions: Sequence[int]) -> "Segment":
        """This sealed segment with its batches replaced by ``data`` (at ``positions``), crash-safely:
        a crash at any point reopens either the old file or the new one, never a mix. This
        segment is closed; the returned one takes its place.

        The new bytes go to ``<base>.log.cleaned.tmp`` (recovery deletes such leftovers) and
        are fsynced; the old index is removed (durably: recovery rebuilds a missing index);
        then one rename replaces the old file and the directory is fsynced. The new index is
        written last."""
        fs = self.fs
        tmp = self.log_path.with_name(self.log_path.name + ".cleaned" + TMP_SUFFIX)
        write_synced(fs, tmp, data)
        self.close()
        try:
            fs.unlink(self.index_path)
        except FileNotFoundError:
            pass
        fs.fsync_dir(self.directory)
        fs.replace(tmp, self.log_path)
        fs.fsync_dir(self.directory)
        new = Segment(
            self.directory,
            self.base_offset,
            size=len(data),
            next_offset=headers[-1].next_offset if headers else self.base_offset,
            index=OffsetIndex(self.index_path, self.base_offset, fs),
            index_interval_bytes=self.index_interval_bytes,
            created_ms=self.created_ms,
            last_modified_ms=self.last_modified_ms,
            fs=fs,
        )
        for h, p in zip(headers, positions):
            new.note_batch(h, p)
        new.index.rewrite()
        fs.fsync_dir(self.directory)
        return new

    def flush(self, *, fsync_index: bool = False) -> None:
        self.fs.fsync(self.fd)
        self.index.sync(fsync=fsync_index)

    def truncate(self, position: int, next_offset: int) -> None:
        """Cut the file at ``position`` (a batch boundary) and make the cut durable."""
        self.fs.ftruncate(self.fd, position)
        self.fs.fsync(self.fd)
        self.index.truncate_to_position(position)
        self.size = position
        self.next_offset = next_offset
        self._max_timestamp = None if position else -1

    # -- reading --------------------------------------------------------------------------

    def iter_headers(self, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` on; framing is trusted
        (the segment was verified when written or recovered)."""
        fd, end, pread = self.fd, self.size, self._pread
        while position < end:
            buf = pread(fd, min(_WALK_WINDOW, end - position), position)
            off, n = 0, len(buf)
            while off + HEADER_SIZE <= n:
                h = BatchHeader._make(HEADER.unpack_from(buf, off))
                if h.batch_length < HEADER_SIZE - LENGTH_PREFIX:
                    raise CorruptRecordError(f"segment {self.base_offset}: bad batch length at byte {position + off}")
                yield position + off, h
                off += h.size
            if off == 0:
                raise CorruptRecordError(f"segment {self.base_offset}: torn batch header at byte {position}")
            position += off

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """``(position, header)`` of the batch containing ``offset`` (None if past the end)."""
        if offset >= self.next_offset:
            return None
        _, position = self.index.lookup(offset)
        for pos, h in self.iter_headers(position):
            if h.last_offset >= offset:
                return pos, h
        return None

    def read(self, position: int, max_bytes: int, max_offset: int | None, take_first: bool) -> tuple[bytes, bool]:
        """Whole batches from ``position``: at most ``max_bytes`` (but the first one always
        when ``take_first``), none with an offset at or past ``max_offset``.

        The end is worked out first from the index and batch headers, so the data is read
        with one exact ``pread`` and never copied. Returns the bytes and whether they run
        to the end of the segment (so the caller may carry on into the next one).
        """
        end, to_end = self.span(position, max_bytes, max_offset, take_first)
        if end <= position:
            return b"", to_end
        return self._pread(self.fd, end - position, position), to_end

    def span(self, position: int, max_bytes: int, max_offset: int | None, take_first: bool) -> tuple[int, bool]:
        """Where :meth:`read` from ``position`` would stop (exclusive byte position), and
        whether that is the end of the segment -- without reading the data."""
        size = self.size
        if position >= size:
            return position, True
        end = size
        if max_offset is not None and max_offset < self.next_offset:
            found = self.find(max_offset)  # the first batch that must not be returned
            if found is not None:
                end = found[0]
        limit = position + max(max_bytes, 0)
        if limit < end:
            cut = self._last_boundary(position, limit)
            if cut == position and take_first:  # the first batch alone exceeds max_bytes
                _, length = PREFIX.unpack(self._pread(self.fd, LENGTH_PREFIX, position))
                cut = position + LENGTH_PREFIX + length
            end = min(end, cut)
        if end <= position:
            return position, False
        return end, end == size

    def _last_boundary(self, position: int, limit: int) -> int:
        """The last batch boundary at or before byte ``limit``, not before ``position``."""
        positions = self.index._pos
        i = bisect_right(positions, limit) - 1
        start = positions[i] if i >= 0 and positions[i] > position else position
        for pos, h in self.iter_headers(start):
            if pos + h.size > limit:
                return pos
        return self.size

    @property
    def max_timestamp(self) -> int:
        """Largest batch max_timestamp in the segment (-1 if empty); computed once, then
        kept up to date by appends."""
        if self._max_timestamp is None:
            self._max_timestamp = max((h.max_timestamp for _, h in self.iter_headers()), default=-1)
        return self._max_timestamp

    def first_header(self) -> BatchHeader | None:
        if self.size < HEADER_SIZE:
            return None
        return BatchHeader._make(HEADER.unpack_from(self._pread(self.fd, HEADER_SIZE, 0)))

    def pread(self, length: int, position: int) -> bytes:
        return self._pread(self.fd, length, position)

    # -- recovery -------------------------------------------------------------------------

    def recover(
        self,
        *,
        check_crc: bool,
        on_batch: Callable[[int, BatchHeader], None] | None = None,
    ) -> tuple[int, ScanProblem | None, int]:
        """Verify every batch from the start; rebuild the index and size/next_offset from
        what checks out. Returns (valid bytes, first problem, batches seen).

        Reads the file in chunks and hands each batch to ``on_batch`` as it goes, so a
        segment of millions of small batches never holds all their headers at once.
        """
        fd, pread = self.fd, self._pread
        end = self.fs.fstat(fd).st_size
        # A fresh index: the caller compares it with the old one to see if the file was right.
        self.index = OffsetIndex(self.index_path, self.base_offset, self.fs)
        self.size = 0
        pos, expected, count = 0, self.base_offset, 0
        problem: ScanProblem | None = None
        max_ts = -1
        while pos < end:
            want = _SCAN_CHUNK
            head = pread(fd, LENGTH_PREFIX, pos)
            if len(head) == LENGTH_PREFIX:
                size = LENGTH_PREFIX + PREFIX.unpack(head)[1]
                if 0 < size <= end - pos:
                    want = max(want, size)
            buf = pread(fd, min(want, end - pos), pos)
            part = scan(buf, expected_offset=expected, check_crc=check_crc, base_position=pos)
            for p, h in zip(part.positions, part.headers):
                self.note_batch(h, p)
                if h.max_timestamp > max_ts:
                    max_ts = h.max_timestamp
                if on_batch is not None:
                    on_batch(p, h)
            count += len(part.headers)
            if part.headers:
                expected = part.headers[-1].next_offset
            problem = part.problem
            if problem is not None and problem.kind is Problem.TORN and pos + len(buf) < end:
                problem = None  # cut by our chunk, not by the end of the file
            pos = part.end
            if problem is not None:
                break
        self.size = pos
        self.next_offset = expected
        self._max_timestamp = max_ts
        return pos, problem, count


def open_segment(
    directory: Path,
    base_offset: int,
    index_interval_bytes: int,
    now_ms: int,
    fs: FileSystem,
) -> tuple[Segment, str | None]:
    """Open an existing segment, trusting its index if it passes the cheap checks.

    The second item says why the index was not trusted (the segment then still needs
    :meth:`Segment.recover` or a header walk to rebuild it). ``next_offset`` is found by
    walking headers from the last index entry to the end of the file.
    """
    st = fs.stat(log_path(directory, base_offset))
    size = st.st_size
    index, problem = OffsetIndex.load(index_path(directory, base_offset), base_offset, size, fs)
    mtime_ms = int(st.st_mtime * 1000)
    seg = Segment(
        directory,
        base_offset,
        size=size,
        next_offset=base_offset,
        index=index,
        index_interval_bytes=index_interval_bytes,
        created_ms=now_ms,
        last_modified_ms=mtime_ms,
        fs=fs,
    )
    try:
        first = seg.first_header()
        if first is not None:
            # After a restart the segment's age is taken from its first batch's timestamp
            # (the append clock that created it is gone); never in the future.
            seg.created_ms = min(now_ms, first.max_timestamp)
        if problem is None and len(index):
            last_offset, last_pos = index.entries[-1]
            head = seg.pread(LENGTH_PREFIX, last_pos)
            if len(head) < LENGTH_PREFIX or PREFIX.unpack(head)[0] != last_offset:
                problem = f"last entry ({last_offset}, {last_pos}) does not point at that batch"
    except BaseException:
        seg.close()
        raise
    return seg, problem


def walk_to_end(seg: Segment, position: int = 0) -> tuple[int, int, Scan | None]:
    """Follow framing from ``position`` to the end of the file without CRC checks.

    Returns (end of the last whole batch, its next offset, None) or, at a framing problem,
    the Scan describing it. Used for non-active segments, whose bytes were fsynced at roll.
    """
    end = seg.size
    expected = None
    fd, pread = seg.fd, seg._pread
    while position < end:
        buf = pread(fd, min(_WALK_WINDOW, end - position), position)
        off = 0
        n = len(buf)
        while off + _LAST_DELTA_END <= n:
            base, length = PREFIX.unpack_from(buf, off)
            size = LENGTH_PREFIX + length
            if length < HEADER_SIZE - LENGTH_PREFIX or position + off + size > end or (expected is not None and base < expected):
                bad = Scan(end=position + off)
                kind = Problem.DISCONTIGUOUS if expected is not None and base < expected else Problem.CORRUPT
                if position + off + size > end and length >= HEADER_SIZE - LENGTH_PREFIX:
                    kind = Problem.TORN
                bad.problem = ScanProblem(kind, position + off, expected, f"byte {position + off}: {kind.value} batch")
                return position + off, expected if expected is not None else seg.base_offset, bad
            expected = base + _LAST_DELTA.unpack_from(buf, off + 23)[0] + 1
            off += size
        if off == 0:
            bad = Scan(end=position)
            bad.problem = ScanProblem(Problem.TORN, position, expected, f"byte {position}: torn batch header")
            return position, expected if expected is not None else seg.base_offset, bad
        position += off
    return position, expected if expected is not None else seg.base_offset, None
