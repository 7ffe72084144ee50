"""Reading a partition's bytes straight from the leader's segment files.

On one machine a follower or consumer fetching a megabyte from the leader would have it
copied through Ray several times; instead the leader may answer with *file hints* -- the
spans of its segment files that hold the batches -- and the reader ``pread``s them from
the page cache (kcoord's version of Kafka's sendfile). The leader's files can change under
the reader (truncation on a leader change, retention, a rewrite at the same path), so the
bytes are trusted only after they check out as whole, CRC-valid, contiguous batches that
start with the one holding the fetch offset; otherwise the reader fetches the bytes normally.
"""

from __future__ import annotations

import os
from typing import Sequence

from ..record import CorruptRecordError, iter_headers


def read_hinted(spans: Sequence[Sequence], fetch_offset: int) -> bytes | None:
    """The batches described by ``spans`` ([(path, position, length)]), or None if they
    cannot be read or do not check out."""
    parts = []
    try:
        for path, position, length in spans:
            fd = os.open(path, os.O_RDONLY)
            try:
                data = os.pread(fd, length, position)
            finally:
                os.close(fd)
            if len(data) != length:
                return None
            parts.append(data)
    except (OSError, TypeError, ValueError):
        return None
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    if not data:
        return data
    expected = None
    try:
        for _, h in iter_headers(data, check_crc=True):
            if expected is None:
                if not h.base_offset <= fetch_offset <= h.last_offset:
                    return None
            elif h.base_offset != expected:
                return None
            expected = h.next_offset
    except CorruptRecordError:
        return None
    return data
