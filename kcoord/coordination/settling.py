"""A coordinator core's appends in flight, settled in emission order.

Both coordinators' cores persist every change with an ``AppendRecords`` action and apply it
only once acknowledged. Outcomes are applied in the order the appends were emitted (a report
for a later one is held until every earlier one is in), so memory is always what a replay of
the partition rebuilds: :class:`InOrderWrites` is that bookkeeping, shared by
:class:`kcoord.group.persistence.Persistence` and :class:`kcoord.txn.persistence.Persistence`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from ..runtime.actions import Action, AppendRecords

P = TypeVar("P")
Record = tuple[bytes, "bytes | None"]


@dataclass
class _Inflight(Generic[P]):
    pending: P
    outcome: int | None = None


class InOrderWrites(Generic[P]):
    """The AppendRecords in flight, in emission order, each with what waits on it (``P``)."""

    def __init__(self, emit: Callable[[Action], Any]) -> None:
        self._emit = emit
        self._next_persist_id = 1
        self._inflight: OrderedDict[int, _Inflight[P]] = OrderedDict()

    def _append(self, records: list[Record], pending: P, reason: str) -> int:
        """Emit one AppendRecords of ``records``; returns its persist id."""
        pid = self._next_persist_id
        self._next_persist_id += 1
        self._inflight[pid] = _Inflight(pending)
        self._emit(AppendRecords(pid, records, reason))
        return pid

    def __contains__(self, persist_id: int) -> bool:
        return persist_id in self._inflight

    def pending_ids(self) -> list[int]:
        return list(self._inflight)

    def settle(self, persist_id: int, error_code: int) -> list[tuple[int, P, int]]:
        """Record the outcome of AppendRecords ``persist_id`` and release, in emission order,
        every write whose outcome is known and has no unsettled write before it. Unknown or
        already reported ids release nothing."""
        entry = self._inflight.get(persist_id)
        if entry is None or entry.outcome is not None:
            return []
        entry.outcome = int(error_code)
        done: list[tuple[int, P, int]] = []
        while self._inflight:
            first_id, first = next(iter(self._inflight.items()))
            if first.outcome is None:
                break
            del self._inflight[first_id]
            done.append((first_id, first.pending, first.outcome))
        return done

    def abandon(self) -> list[P]:
        """Forget every write in flight (the partition is given up); returns them so their
        waiters can be answered."""
        pending = [entry.pending for entry in self._inflight.values()]
        self._inflight.clear()
        return pending
