"""Keyed deadlines for a sans-I/O state machine.

The coordinator has many timers (a session per member, a join phase per group, a retention
sweep per group) that are re-armed constantly, mostly by heartbeats. A heap with lazy
deletion makes re-arming O(log n) and lets ``next_deadline()`` answer in O(1) amortised, so
the shell can sleep exactly until the next piece of work.
"""

from __future__ import annotations

import heapq
import itertools
from enum import Enum
from typing import Hashable


class TimerKind(str, Enum):
    """What a coordinator timer key ``(kind, group_id, ...)`` is for; one place, so the
    parts that arm a timer and the dispatcher that fires it agree on the names."""

    # (SESSION, group_id, member_id): a member's (or pending member's) session.
    SESSION = "session"
    # (JOIN, group_id): the end of a group's join phase.
    JOIN = "join"
    # (RETENTION, group_id): a group's next offset expiry or removal check.
    RETENTION = "retention"
    # (TXN_PRODUCER, producer_id): when a transactional producer's [5] record may expire.
    TXN_PRODUCER = "txn_producer"


class Timers:
    """At most one deadline per key; setting a key again replaces its deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []
        self._due: dict[Hashable, tuple[int, int]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._due

    def get(self, key: Hashable) -> int | None:
        entry = self._due.get(key)
        return None if entry is None else entry[0]

    def set(self, key: Hashable, deadline_ms: int) -> None:
        seq = next(self._seq)
        self._due[key] = (deadline_ms, seq)
        heapq.heappush(self._heap, (deadline_ms, seq, key))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._due):
            self._compact()

    def cancel(self, key: Hashable) -> None:
        self._due.pop(key, None)

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> Hashable | None:
        """Remove and return the earliest key whose deadline is <= ``now_ms`` (ties in the
        order they were set), or None."""
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._due[key]
        return key

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            if self._due.get(key) == (deadline, seq):
                return
            heapq.heappop(heap)

    def _compact(self) -> None:
        self._heap = [(d, s, k) for k, (d, s) in self._due.items()]
        heapq.heapify(self._heap)
