"""A clock the test moves by hand, implementing kcoord.runtime.Clock for driver tests."""

from __future__ import annotations

import heapq
import itertools
from typing import Callable


class ManualClock:
    def __init__(self, now: int = 1_000) -> None:
        self.now = now
        self._heap: list = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def call_at(self, at_ms: int, fn: Callable[[], None]) -> "_Handle":
        entry = [max(at_ms, self.now), next(self._seq), fn, False]
        heapq.heappush(self._heap, entry)
        return _Handle(entry)

    def run_until(self, when: int) -> None:
        """Run every callback due by ``when``, in time order, moving the clock along."""
        while self._heap and self._heap[0][0] <= when:
            at, _, fn, cancelled = heapq.heappop(self._heap)
            self.now = max(self.now, at)
            if not cancelled:
                fn()
        self.now = max(self.now, when)


class _Handle:
    def __init__(self, entry: list) -> None:
        self._entry = entry

    def cancel(self) -> None:
        self._entry[3] = True
