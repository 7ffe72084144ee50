"""Leader-epoch cache: for every leader epoch, the first offset written in it.

Followers use it to find where their log diverges from a new leader's (KIP-101/KIP-279):
a follower asks "where does my latest epoch end in your log?" and truncates to the answer
instead of trusting the high watermark, which can lag and lose or mismatch records.

The cache is tiny (one entry per leadership change) and is persisted on every change
through ``on_change`` (the file log writes a checkpoint atomically; the memory log keeps a
copy that survives its simulated crash). A change is persisted *before* it is adopted, so
when the write fails the cache still holds what the checkpoint holds.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable, Iterable, NamedTuple

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Ascending ``(epoch, start_offset)`` entries; both columns strictly increase."""

    def __init__(
        self,
        entries: Iterable[tuple[int, int]] = (),
        *,
        on_change: Callable[[list[EpochEntry]], None] | None = None,
    ) -> None:
        self._entries: list[EpochEntry] = []
        for epoch, start in entries:
            _assign_into(self._entries, int(epoch), int(start))
        self._on_change = on_change

    # -- queries ------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        return self._entries[0].epoch if self._entries else UNDEFINED_EPOCH

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LeaderEpochCache):
            return self._entries == other._entries
        return NotImplemented

    def __repr__(self) -> str:
        return f"LeaderEpochCache({[tuple(e) for e in self._entries]})"

    def start_offset_of(self, epoch: int) -> int | None:
        """First offset of ``epoch``, or None when the epoch is not cached."""
        for entry in self._entries:
            if entry.epoch == epoch:
                return entry.start_offset
        return None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in (-1 if before the first entry)."""
        i = bisect_right([e.start_offset for e in self._entries], offset)
        return self._entries[i - 1].epoch if i else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Answer OffsetsForLeaderEpoch: ``(largest cached epoch <= epoch, where it ends)``.

        Asking about the latest epoch (or a newer one) gets the latest epoch and the log end
        offset, since that epoch is still open. An epoch older than everything cached gets
        ``(epoch, start of the oldest cached epoch)``: whatever the asker wrote in it cannot
        be in this log past that point (as Kafka answers since KIP-279; after an unclean
        election the new leader's log may share no epoch with a follower's). An empty cache
        gets ``(-1, -1)``: the caller cannot learn anything and must fall back.
        """
        if not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch < self._entries[0].epoch:
            return epoch, self._entries[0].start_offset
        if epoch >= self._entries[-1].epoch:
            return self._entries[-1].epoch, log_end_offset
        i = bisect_right([e.epoch for e in self._entries], epoch)  # first entry with a larger epoch
        return self._entries[i - 1].epoch, self._entries[i].start_offset

    # -- changes ------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether anything changed.

        Only a newer epoch is recorded: the first batch of an epoch fixes its start, so later
        batches of the same epoch (and stale ones) change nothing. A newer epoch starting at or
        below existing entries replaces them, since those entries can no longer hold records.
        """
        entries = list(self._entries)
        if not _assign_into(entries, epoch, start_offset):
            return False
        self._commit(entries)
        return True

    def truncate_from_end(self, offset: int) -> bool:
        """Forget epochs that start at or after ``offset`` (the log was truncated to it)."""
        keep = len(self._entries)
        while keep and self._entries[keep - 1].start_offset >= offset:
            keep -= 1
        if keep == len(self._entries):
            return False
        self._commit(self._entries[:keep])
        return True

    def truncate_from_start(self, offset: int) -> bool:
        """Forget epochs that end before ``offset`` (the log start advanced to it).

        The first epoch kept is clipped to start at ``offset``: its earlier records are gone.
        """
        drop = 0
        while drop + 1 < len(self._entries) and self._entries[drop + 1].start_offset <= offset:
            drop += 1
        entries = self._entries[drop:]
        if entries and entries[0].start_offset < offset:
            entries[0] = EpochEntry(entries[0].epoch, offset)
        if entries == self._entries:
            return False
        self._commit(entries)
        return True

    def clear(self) -> None:
        if self._entries:
            self._commit([])

    def replace(self, entries: Iterable[tuple[int, int]]) -> None:
        """Swap in ``entries`` wholesale (recovery rebuilt them from the log)."""
        fresh = LeaderEpochCache(entries)._entries
        if fresh != self._entries:
            self._commit(fresh)

    def _commit(self, entries: list[EpochEntry]) -> None:
        """Persist, then adopt: if persisting raises, the cache is left as it was."""
        if self._on_change is not None:
            self._on_change(list(entries))
        self._entries = entries


def _assign_into(entries: list[EpochEntry], epoch: int, start_offset: int) -> bool:
    """:meth:`LeaderEpochCache.assign` on a plain list (in place); whether it changed."""
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"epoch and start offset must be >= 0, got ({epoch}, {start_offset})")
    if entries and epoch <= entries[-1].epoch:
        return False
    while entries and entries[-1].start_offset >= start_offset:
        entries.pop()
    entries.append(EpochEntry(epoch, start_offset))
    return True
