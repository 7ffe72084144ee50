"""What the transaction coordinator writes to ``__transaction_state`` and waits on.

* The writes in flight (:class:`InitWrite`, :class:`AddWrite`, :class:`PrepareWrite`,
  :class:`CompleteWrite`, :class:`ExpireWrite`), each one transactional id's next state and
  what to do once it is acknowledged or fails.
* :class:`Persistence`: emits their AppendRecords actions and releases outcomes in emission
  order, so memory changes in the order the log does.
* :func:`txn_error_for_append`: Kafka's mapping of a failed append to what a client hears.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..group.persistence import group_error_for_append
from ..protocol.codec import Message
from ..protocol.errors import ErrorCode
from .actions import AppendRecords
from .context import TxnContext
from .records import TxnValue, txn_record

E = ErrorCode


def txn_error_for_append(code: int) -> int:
    """Kafka's TransactionStateManager mapping (the one the group coordinator uses for its
    metadata writes): COORDINATOR_NOT_AVAILABLE for an append that may succeed if retried,
    NOT_COORDINATOR where the partition moved or this incarnation was replaced (a client
    told it is fenced would give up, but it is the coordinator that is), UNKNOWN_SERVER_ERROR
    for a record too large."""
    if code in (E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED):
        return E.NOT_COORDINATOR
    return group_error_for_append(code)


# -- writes in flight: one transactional id's next state each ------------------------------


@dataclass
class InitWrite:
    """InitProducerId bumping the epoch (or creating the id): answer with the new identity;
    ``ongoing``: the kept transaction's (producer id, epoch) with keep_prepared."""

    transactional_id: str
    value: TxnValue
    token: Any
    request: Message
    ongoing: tuple[int, int] | None = None


@dataclass
class AddWrite:
    """AddPartitionsToTxn / AddOffsetsToTxn: ONGOING with more partitions."""

    transactional_id: str
    value: TxnValue
    token: Any
    request: Message


@dataclass
class PrepareWrite:
    """PREPARE_COMMIT / PREPARE_ABORT: the decision. ``cause``: ``"end_txn"`` (a client's
    EndTxn, answered with the identity it continues with), ``"fence"`` (an InitProducerId
    aborting an older instance's transaction, answered CONCURRENT_TRANSACTIONS so it
    retries) or ``"timeout"`` (nobody waits)."""

    transactional_id: str
    value: TxnValue
    cause: str
    token: Any = None
    request: Message | None = None


@dataclass
class CompleteWrite:
    """COMPLETE_COMMIT / COMPLETE_ABORT once every marker is written; nobody waits."""

    transactional_id: str
    value: TxnValue


@dataclass
class ExpireWrite:
    """The tombstone of an expired id; nobody waits."""

    transactional_id: str
    value: None = None


PendingWrite = InitWrite | AddWrite | PrepareWrite | CompleteWrite | ExpireWrite


@dataclass
class _Inflight:
    pending: PendingWrite
    outcome: int | None = None


class Persistence:
    """The AppendRecords in flight, in emission order."""

    def __init__(self, ctx: TxnContext) -> None:
        self.ctx = ctx
        self._next_persist_id = 1
        self._inflight: OrderedDict[int, _Inflight] = OrderedDict()

    def persist(self, pending: PendingWrite, reason: str) -> int:
        """Append ``pending``'s record; the id's transition is in flight until it settles."""
        pid = self._next_persist_id
        self._next_persist_id += 1
        self._inflight[pid] = _Inflight(pending)
        self.ctx.emit(AppendRecords(pid, [txn_record(pending.transactional_id, pending.value)], reason))
        return pid

    def __contains__(self, persist_id: int) -> bool:
        return persist_id in self._inflight

    def pending_ids(self) -> list[int]:
        return list(self._inflight)

    def settle(self, persist_id: int, error_code: int) -> list[tuple[int, PendingWrite, int]]:
        """Record the outcome of AppendRecords ``persist_id`` and release, in emission order,
        every write whose outcome is known and has no unsettled write before it. Unknown or
        already reported ids release nothing."""
        entry = self._inflight.get(persist_id)
        if entry is None or entry.outcome is not None:
            return []
        entry.outcome = int(error_code)
        done: list[tuple[int, PendingWrite, int]] = []
        while self._inflight:
            first_id, first = next(iter(self._inflight.items()))
            if first.outcome is None:
                break
            del self._inflight[first_id]
            done.append((first_id, first.pending, first.outcome))
        return done

    def abandon(self) -> list[PendingWrite]:
        """Forget every write in flight (the partition is given up); returns them so their
        waiters can be answered."""
        pending = [entry.pending for entry in self._inflight.values()]
        self._inflight.clear()
        return pending
