"""Reading a coordinator's partition for its load: the pure part of
:class:`~kcoord.coordination.partition_owner.PartitionOwnerDriver`'s load, kept apart so that
anything that holds the partition's bytes (the drivers' fetches, ``benchmarks/group_load.py``
over a log on disk) replays it the same way.

The partitions are compacted, so the bytes read may have gaps between batches (the cleaner
removed superseded records), keys whose last record is a tombstone, or no record at all
left for a key whose tombstone outlived ``delete.retention.ms``. Each coordinator's replay
depends only on the last record of each key, in log order, which is exactly what compaction
keeps, so a compacted partition loads to the same state.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from .. import record as batch_format
from ..protocol.errors import DecodeError

Record = tuple[bytes, "bytes | None"]


def take_in(data: bytes, from_offset: int, producer_id: int) -> tuple[list[Record], int, int]:
    """The records of fetched batches from ``from_offset`` on, the offset to read next (never
    below ``from_offset``: a fetch into a gap answers with the next batch), and the newest
    producer epoch ``producer_id`` used in them (-1 if none)."""
    epoch = -1
    for _, h in batch_format.iter_headers(data):
        if h.producer_id == producer_id and h.producer_epoch > epoch:
            epoch = h.producer_epoch
    out = [(rec.key or b"", rec.value) for rec in batch_format.iter_records(data, from_offset=from_offset)]
    _, next_offset, _ = batch_format.batches_info(data)
    return out, max(from_offset, next_offset), epoch


def well_formed(
    records: Iterable[Record],
    decode: Callable[[bytes, "bytes | None"], Any],
    on_malformed: Callable[[DecodeError], None],
) -> list[Record]:
    """The records ``decode(key, value)`` accepts; each one it raises DecodeError for is
    reported and left out (one bad record must not keep a coordinator from ever loading)."""
    good: list[Record] = []
    for key, value in records:
        try:
            decode(key, value)
        except DecodeError as exc:
            on_malformed(exc)
            continue
        good.append((key, value))
    return good
