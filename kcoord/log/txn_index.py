"""The aborted-transaction index: which transactions were aborted, and where.

Kafka keeps one per segment (``{base_offset}.txnindex``), an entry appended when an ABORT
marker lands in that segment: version (int16, 0), producer id, first offset, last offset
(the marker's), last stable offset at the time (int64 each): 34 bytes, the layout here.
A read_committed fetch asks for the aborted transactions that overlap what it returns
(:meth:`TxnIndex.collect`), and the consumer drops their batches.

:class:`TxnIndex` is a log's whole index in memory, sorted by last offset (markers are
appended in offset order), shared by the file log and the in-memory log. The file log keeps
the same entries in per-segment files (:class:`TxnIndexFiles`), written when an entry is
added, not fsynced on the append path (recovery rebuilds the entries of segments after the
recovery point from the batches), fsynced with their segment, deleted with it.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from pathlib import Path
from typing import Any, Iterable, NamedTuple, Sequence

from .fs import FileSystem

TXN_INDEX_SUFFIX = ".txnindex"
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
ENTRY_VERSION = 0
assert ENTRY_SIZE == 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


class CorruptTxnIndex(ValueError):
    """A ``.txnindex`` file that is not whole 34-byte entries of a known version."""


def encode(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(ENTRY.pack(ENTRY_VERSION, *e) for e in entries)


def decode(data: bytes) -> list[AbortedTxn]:
    if len(data) % ENTRY_SIZE:
        raise CorruptTxnIndex(f"{len(data)} bytes is not a whole number of {ENTRY_SIZE}-byte entries")
    out = []
    for pos in range(0, len(data), ENTRY_SIZE):
        version, *fields = ENTRY.unpack_from(data, pos)
        if version != ENTRY_VERSION:
            raise CorruptTxnIndex(f"entry {pos // ENTRY_SIZE} has version {version}")
        out.append(AbortedTxn(*fields))
    return out


def txn_index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{TXN_INDEX_SUFFIX}"


class TxnIndex:
    """A log's aborted transactions, sorted by last offset (one entry per ABORT marker)."""

    def __init__(self, entries: Iterable[AbortedTxn] = ()) -> None:
        self._entries: list[AbortedTxn] = sorted(entries, key=lambda e: e.last_offset)
        self._lasts = [e.last_offset for e in self._entries]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(list(self._entries))

    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def add(self, entry: AbortedTxn) -> bool:
        """Add ``entry`` unless its marker's offset is indexed already (replays add the same
        entries again); whether it was new."""
        i = bisect_left(self._lasts, entry.last_offset)
        if i < len(self._lasts) and self._lasts[i] == entry.last_offset:
            return False
        self._entries.insert(i, entry)
        self._lasts.insert(i, entry.last_offset)
        return True

    def collect(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions a fetch of ``[fetch_offset, upper)`` must know about:
        ``last_offset >= fetch_offset`` and ``first_offset < upper`` (Kafka's
        collectAbortedTxns). A later marker's transaction starts at or after this one's
        last stable offset, so the walk stops once that passes ``upper``."""
        out = []
        for e in self._entries[bisect_left(self._lasts, fetch_offset) :]:
            if e.first_offset < upper:
                out.append(e)
            if e.last_stable_offset > upper:
                break
        return out

    def truncate_from(self, offset: int) -> bool:
        """Drop entries whose marker is at or after ``offset`` (a truncation); whether any went."""
        i = bisect_left(self._lasts, offset)
        if i == len(self._lasts):
            return False
        del self._entries[i:], self._lasts[i:]
        return True

    def drop_below(self, offset: int) -> None:
        """Drop entries whose marker is below ``offset`` (retention, DeleteRecords)."""
        i = bisect_left(self._lasts, offset)
        if i:
            del self._entries[:i], self._lasts[:i]

    def between(self, lo: int, hi: int) -> list[AbortedTxn]:
        """Entries whose marker lies in ``[lo, hi)`` (one segment's)."""
        return self._entries[bisect_left(self._lasts, lo) : bisect_left(self._lasts, hi)]

    def clear(self) -> None:
        self._entries.clear()
        self._lasts.clear()


class TxnIndexFiles:
    """The file log's per-segment ``.txnindex`` files (see the module docstring)."""

    def __init__(self, fs: FileSystem, directory: Path) -> None:
        self._fs = fs
        self.directory = directory

    def path(self, base_offset: int) -> Path:
        return txn_index_path(self.directory, base_offset)

    def append(self, base_offset: int, entry: AbortedTxn) -> None:
        fs = self._fs
        fd = fs.open(self.path(base_offset), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            data = encode((entry,))
            while data:
                data = data[fs.write(fd, data) :]
        finally:
            fs.close(fd)

    def rewrite(self, base_offset: int, entries: list[AbortedTxn]) -> None:
        """Make the segment's file hold exactly ``entries`` (none: no file)."""
        path = self.path(base_offset)
        if not entries:
            self.delete(base_offset)
            return
        fs = self._fs
        fd = fs.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            data = encode(entries)
            while data:
                data = data[fs.write(fd, data) :]
            fs.fsync(fd)
        finally:
            fs.close(fd)

    def load(self, base_offset: int) -> list[AbortedTxn]:
        path = self.path(base_offset)
        if not self._fs.exists(path):
            return []
        return decode(self._fs.read_file(path))

    def sync(self, base_offset: int) -> None:
        path = self.path(base_offset)
        if not self._fs.exists(path):
            return
        fd = self._fs.open(path, os.O_RDONLY)
        try:
            self._fs.fsync(fd)
        finally:
            self._fs.close(fd)

    def delete(self, base_offset: int) -> None:
        try:
            self._fs.unlink(self.path(base_offset))
        except FileNotFoundError:
            pass

    def load_trusted(self, index: TxnIndex, segments: Sequence[Any], recovery_point: int, log_start: int, notes: list[str]) -> int:
        """On open: load into ``index`` the files of segments below ``recovery_point``
        (fsynced with them), keeping entries in ``[log_start, recovery_point)``; delete the
        files of later segments (they may miss entries or hold lost ones) and orphans.
        Returns the offset from which replaying producer state must rebuild entries: the
        recovery point, or the base of an unreadable file before it (noted in ``notes``)."""
        bases = {seg.base_offset for seg in segments}
        for b in self.bases():
            if b not in bases:
                self.delete(b)  # its segment was deleted and a crash came in between
        rebuild_from = recovery_point
        for seg in segments:
            if seg.base_offset >= recovery_point:
                self.delete(seg.base_offset)
                continue
            try:
                entries = self.load(seg.base_offset)
            except CorruptTxnIndex as exc:
                notes.append(f"aborted-transaction index of segment {seg.base_offset} rebuilt: {exc}")
                self.delete(seg.base_offset)
                rebuild_from = min(rebuild_from, seg.base_offset)
                continue
            kept = [e for e in entries if log_start <= e.last_offset < min(recovery_point, seg.next_offset)]
            if len(kept) != len(entries):
                self.rewrite(seg.base_offset, kept)
            for e in kept:
                index.add(e)
        return rebuild_from

    def delete_all(self) -> None:
        """Unlink every segment's file (the caller fsyncs the directory)."""
        for b in self.bases():
            self.delete(b)

    def bases(self) -> list[int]:
        from .segment import parse_base_offset

        out = []
        for name in self._fs.listdir(self.directory):
            b = parse_base_offset(name, TXN_INDEX_SUFFIX)
            if b is not None:
                out.append(b)
        return sorted(out)


__all__ = ["AbortedTxn", "CorruptTxnIndex", "ENTRY_SIZE", "TxnIndex", "TxnIndexFiles", "decode", "encode", "txn_index_path"]
