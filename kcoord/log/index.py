"""Sparse offset index of one segment: (relative offset, byte position) every few KiB.

A read for offset N looks up the last indexed batch at or before N and walks batch headers
from there, so a lookup costs one bisect plus a few KiB of header walking however big the
segment. Entries are fixed width (big-endian int32 relative offset, int32 position), which
is why a segment must stay below 2 GiB and 2^31 offsets.

The entries live in memory (two int arrays, bisected directly); the file is a copy written
at flush, roll, truncation and close. The active segment's index is rebuilt from the log
on every open anyway, so its file needs no fsync on the append path.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from pathlib import Path

from .checkpoint import write_synced
from .fs import FileSystem

ENTRY = struct.Struct(">ii")
ENTRY_SIZE = ENTRY.size  # 8


def _encode(rel: array, pos: array) -> bytes:
    """Interleave the two columns into file entries (big-endian)."""
    both = array("i", bytes(8 * len(rel)))
    both[0::2] = rel
    both[1::2] = pos
    if sys.byteorder == "little":
        both.byteswap()
    return both.tobytes()


class OffsetIndex:
    """The in-memory entries of one segment's index plus how many are already on disk."""

    def __init__(self, path: Path, base_offset: int, fs: FileSystem) -> None:
        self.path = path
        self.fs = fs
        self.base_offset = base_offset
        self._rel = array("i")
        self._pos = array("i")
        self._persisted = 0  # entries [0, _persisted) are in the file
        self.last_position = 0  # position of the last entry (0 when empty): a plain attribute for the append path

    def __len__(self) -> int:
        return len(self._rel)

    @property
    def entries(self) -> list[tuple[int, int]]:
        """(absolute offset, position) pairs."""
        b = self.base_offset
        return [(b + r, p) for r, p in zip(self._rel, self._pos)]

    def append(self, offset: int, position: int) -> None:
        self._rel.append(offset - self.base_offset)
        self._pos.append(position)
        self.last_position = position

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last indexed batch starting at or before ``offset``;
        ``(base_offset, 0)`` when there is none."""
        i = bisect_right(self._rel, offset - self.base_offset)
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i - 1], self._pos[i - 1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries for batches at or after byte ``position``."""
        keep = bisect_right(self._pos, position - 1)
        del self._rel[keep:]
        del self._pos[keep:]
        self.last_position = self._pos[-1] if self._pos else 0
        if self._persisted > keep:
            self._persisted = keep
            try:
                self.fs.truncate(self.path, keep * ENTRY_SIZE)
            except FileNotFoundError:
                pass

    def clear(self) -> None:
        self.truncate_to_position(0)

    # -- file ---------------------------------------------------------------------------

    def sync(self, *, fsync: bool = False) -> None:
        """Write entries not yet in the file (and fsync it if asked)."""
        pending = len(self._rel) - self._persisted
        if pending == 0 and not fsync:
            return
        fs = self.fs
        fd = fs.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if pending:
                k = self._persisted
                data = memoryview(_encode(self._rel[k:], self._pos[k:]))
                at = k * ENTRY_SIZE
                while data:
                    n = fs.pwrite(fd, data, at)
                    data, at = data[n:], at + n
                self._persisted = len(self._rel)
            if fsync:
                fs.fsync(fd)
        finally:
            fs.close(fd)

    def rewrite(self) -> None:
        """Replace the file with exactly the in-memory entries (after a rebuild)."""
        write_synced(self.fs, self.path, _encode(self._rel, self._pos))
        self._persisted = len(self._rel)

    def same_entries(self, other: "OffsetIndex") -> bool:
        return self._rel == other._rel and self._pos == other._pos

    @classmethod
    def load(cls, path: Path, base_offset: int, segment_size: int, fs: FileSystem) -> tuple["OffsetIndex", str | None]:
        """Read an index file; the second item says why it cannot be trusted (None if fine).

        Cheap checks only: whole entries, both columns strictly increasing, positions
        inside the segment. The caller verifies the last entry against the log.
        """
        index = cls(path, base_offset, fs)
        try:
            raw = fs.read_file(path)
        except FileNotFoundError:
            return index, "missing"
        if len(raw) % ENTRY_SIZE:
            return index, f"size {len(raw)} is not a multiple of {ENTRY_SIZE}"
        both = array("i")
        both.frombytes(raw)
        if sys.byteorder == "little":
            both.byteswap()
        rel, pos = both[0::2], both[1::2]
        if len(rel) and (rel[0] < 0 or pos[0] < 0):
            return index, "negative entry"
        if any(a >= b for a, b in zip(rel, rel[1:])) or any(a >= b for a, b in zip(pos, pos[1:])):
            return index, "entries not strictly increasing"
        if len(pos) and pos[-1] >= segment_size:
            return index, f"entry points at byte {pos[-1]}, past the segment's {segment_size} bytes"
        index._rel, index._pos = rel, pos
        index._persisted = len(rel)
        index.last_position = pos[-1] if len(pos) else 0
        return index, None
