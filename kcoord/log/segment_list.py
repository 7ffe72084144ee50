"""A log's segments in offset order, the active one last: finding the segment that holds an
offset, reads that span segments, adding, cutting and deleting segment files, the bounded
cache of open read handles, and which rolled segments are not fsynced yet.

What to keep, delete, cut or roll, and in what order relative to the log's checkpoints, is
the log's decision (``log.py``); this only does it to the files.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from typing import Iterator, Sequence

from ..record import BatchHeader
from .fs import _BufferLike
from .segment import Segment, SegmentInfo

MAX_OPEN_READERS = 64  # file handles kept open for reading older segments


class SegmentList(list[Segment]):
    """The segments (``Segment``) of one log, oldest first. A list, so that indexing it (the
    active segment, ``[-1]``, on every append) costs no Python call; change it only through
    its methods, which keep the base offsets, the size and the handle cache in step."""

    def __init__(self, segments: list[Segment] | None = None) -> None:
        super().__init__(segments or ())
        self._bases = [s.base_offset for s in self]
        self.size = sum(s.size for s in self)  # bytes in every segment
        self._readers: OrderedDict[int, Segment] = OrderedDict()
        self.unsynced: list[Segment] = []  # rolled but not yet fsynced

    def position_of(self, offset: int) -> int:
        """Index of the last segment whose base offset is at or below ``offset``."""
        return bisect_right(self._bases, offset) - 1

    # -- changing the list ------------------------------------------------------------------

    def add(self, seg: Segment) -> None:
        """A new active segment (a roll)."""
        self.append(seg)
        self._bases.append(seg.base_offset)

    def write_to(self, seg: Segment, chunks: Sequence[_BufferLike], nbytes: int, headers: Sequence[BatchHeader], positions: Sequence[int], now_ms: int) -> None:
        """Append whole batches to ``seg`` (the active segment)."""
        seg.append(chunks, nbytes, headers, positions, now_ms)
        self.size += nbytes

    def delete_first(self) -> Segment:
        """Delete the oldest segment's files."""
        seg = self[0]
        self.forget(seg)
        seg.delete()
        self.size -= seg.size
        del self[0]
        del self._bases[0]
        return seg

    def delete_after(self, i: int) -> bool:
        """Delete the files of every segment after the ``i``-th, newest first (a crash part-way
        leaves a shorter valid log); whether there were any."""
        later = self[i + 1 :]
        for s in reversed(later):
            self.forget(s)
            s.delete()
            self.size -= s.size
        del self[i + 1 :]
        del self._bases[i + 1 :]
        return bool(later)

    def cut(self, i: int, position: int, next_offset: int) -> None:
        """Cut the ``i``-th segment's file at ``position`` (a batch boundary), durably."""
        seg = self[i]
        self.size -= seg.size - position
        seg.truncate(position, next_offset)

    def replace(self, old: Segment, new: Segment) -> None:
        """``new`` (the same base offset, other files) takes ``old``'s place."""
        self[self.index(old)] = new
        self.size += new.size - old.size
        if old in self.unsynced:
            self.unsynced[self.unsynced.index(old)] = new
        if self._readers.pop(old.base_offset, None) is not None:
            self.remember_reader(new)

    def forget(self, seg: Segment) -> None:
        """Drop a segment about to be deleted from the handle cache and the unsynced list."""
        self._readers.pop(seg.base_offset, None)
        if seg in self.unsynced:
            self.unsynced.remove(seg)

    def close(self, *, ignore_errors: bool = False) -> None:
        """Close every segment's files (``ignore_errors``: a descriptor the disk, or a
        simulated crash, already invalidated is no error)."""
        for seg in self:
            try:
                seg.close()
            except OSError:
                if not ignore_errors:
                    raise
        self._readers.clear()

    def remember_reader(self, seg: Segment) -> None:
        """Keep file handles of recently read older segments open, up to a limit."""
        self._readers[seg.base_offset] = seg
        self._readers.move_to_end(seg.base_offset)
        while len(self._readers) > MAX_OPEN_READERS:
            _, oldest = self._readers.popitem(last=False)
            if oldest is not self[-1]:
                oldest.close()

    # -- reading ----------------------------------------------------------------------------

    def _holding(self, offset: int) -> tuple[int, int] | None:
        """(index, byte position) of the batch holding ``offset``, or the first batch after
        it (an offset in a gap the cleaner left or an emptied segment); None when no batch
        is left up to the log end (a truncation cut what the cleaner kept)."""
        segs = self
        last = len(segs) - 1
        i = bisect_right(self._bases, offset) - 1
        found = segs[i].find(offset)
        while found is None:
            if i == last:
                return None
            i += 1
            found = segs[i].find(offset)
        return i, found[0]

    def read(self, from_offset: int, max_bytes: int, max_offset: int | None) -> bytes:
        """Whole batches from the one holding ``from_offset`` (see ``BaseLog.read``)."""
        segs = self
        last = len(segs) - 1
        held = self._holding(from_offset)
        if held is None:
            return b""
        i, position = held
        if i != last:
            self.remember_reader(segs[i])
        data, to_end = segs[i].read(position, max_bytes, max_offset, True)
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

    def locate(self, from_offset: int, max_bytes: int, max_offset: int | None) -> list[tuple[str, int, int]]:
        """The spans of segment files :meth:`read` would return, in the same order."""
        segs = self
        last = len(segs) - 1
        held = self._holding(from_offset)
        if held is None:
            return []
        i, start = held
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

    def infos(self) -> list[SegmentInfo]:
        return [SegmentInfo(s.base_offset, s.size, s.next_offset, s.created_ms, s.last_modified_ms, s.max_timestamp) for s in self]

    def headers_from(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch from the one containing ``from_offset`` to the end."""
        segs = self
        i = max(0, bisect_right(self._bases, from_offset) - 1)
        found = segs[i].find(from_offset)
        position = found[0] if found else segs[i].size
        for _, h in segs[i].iter_headers(position):
            yield h
        for seg in segs[i + 1 :]:
            for _, h in seg.iter_headers():
                yield h

    def batches_from_timestamp(self, timestamp_ms: int) -> Iterator[tuple[BatchHeader, bytes]]:
        """(header, bytes) of the batches that may hold a record at or after ``timestamp_ms``."""
        for seg in self:
            if seg.size == 0 or seg.max_timestamp < timestamp_ms:
                continue
            for pos, h in seg.iter_headers():
                if h.max_timestamp >= timestamp_ms:
                    yield h, seg.pread(h.size, pos)
