"""When the cleaner first passed each part of a compacted log: KIP-534's delete horizon.

A tombstone is removed once ``delete.retention.ms`` has passed since the first cleaner pass
that covered it, not since its timestamp: producers stamp records with their own clocks,
and a tombstone stamped in the past would otherwise go at the first pass, before a
consumer reading the log could see the deletion. Kafka writes the horizon into the
rewritten batch; kcoord keeps it per log, as ``(end, ms)`` pairs: the pass that ended at
``end`` ran at ``ms``, so every offset below ``end`` that no earlier pair covers was first
passed at ``ms``. Dropping or merging pairs only makes offsets look newer, which delays a
removal and never hastens one; an offset no pair covers counts as not passed yet.
"""

from __future__ import annotations

from bisect import bisect_right

#: More pairs than this are merged (the newer time wins: removals wait longer, never less).
MAX_ENTRIES = 64


class TombstoneClock:
    """``(end, ms)`` pairs, ends strictly ascending and times non-decreasing."""

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries: list[tuple[int, int]] = []
        # The earliest first pass of a tombstone the last pass kept only because it had not
        # expired (None: none): a pass is due once it expires, however clean the log is
        # (KIP-534). Not persisted: reopened, the oldest pair stands in for it.
        self.waiting_since: int | None = None
        for end, ms in entries or ():
            if self.entries and end <= self.entries[-1][0]:
                raise ValueError(f"tombstone clock ends not ascending at {end}")
            self.entries.append((end, max(ms, self.entries[-1][1]) if self.entries else ms))
        self._ends = [e for e, _ in self.entries]
        if self.entries:
            self.waiting_since = self.entries[0][1]

    def due(self, horizon_ms: int) -> bool:
        """Whether a tombstone kept by the last pass has expired by now."""
        return self.waiting_since is not None and self.waiting_since <= horizon_ms

    def first_passed(self, offset: int) -> int | None:
        """When a pass first covered ``offset`` (ms), or None if none has."""
        i = bisect_right(self._ends, offset)
        return self.entries[i][1] if i < len(self.entries) else None

    def expired(self, offset: int, horizon_ms: int) -> bool:
        """Whether a tombstone at ``offset`` was first passed at or before ``horizon_ms``
        (now - delete.retention.ms): a pass never removes one it sees for the first time."""
        first = self.first_passed(offset)
        return first is not None and first <= horizon_ms

    def note_pass(self, end: int, now_ms: int, retention_ms: int) -> bool:
        """A pass covered everything below ``end`` at ``now_ms``; returns whether the pairs
        changed. Pairs passed before now - ``retention_ms`` collapse into the newest of
        them (everything they cover has expired alike)."""
        entries = self.entries
        if entries and end <= entries[-1][0]:
            return False
        entries.append((end, max(now_ms, entries[-1][1]) if entries else now_ms))
        horizon = now_ms - retention_ms
        old = 0
        while old < len(entries) and entries[old][1] <= horizon:
            old += 1
        if old > 1:
            del entries[: old - 1]
        while len(entries) > MAX_ENTRIES:
            del entries[1]  # its offsets take the next pair's (later) time
        self._ends = [e for e, _ in entries]
        return True

    def clip(self, offset: int) -> bool:
        """Forget what lies at or past ``offset`` (the records there are replaced: a
        truncation, or the log started over); returns whether the pairs changed."""
        entries = self.entries
        i = bisect_right(self._ends, offset)
        if i == len(entries):
            return False
        prev = entries[i - 1][0] if i else 0
        cut = entries[i]
        del entries[i:]
        if prev < offset:  # offsets in [prev, offset) keep the time of the pass that covered them
            entries.append((offset, cut[1]))
        self._ends = [e for e, _ in entries]
        return True
