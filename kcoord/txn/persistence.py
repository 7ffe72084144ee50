"""What the transaction coordinator writes to ``__transaction_state`` and waits on.

* The writes in flight (:class:`InitWrite`, :class:`AddWrite`, :class:`PrepareWrite`,
  :class:`CompleteWrite`, :class:`ExpireWrite`), each one transactional id's next state and
  what to do once it is acknowledged or fails.
* :class:`Persistence`: emits their AppendRecords actions and releases outcomes in emission
  order, so memory changes in the order the log does.
* :func:`txn_error_for_append`: Kafka's mapping of a failed append to what a client hears.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..group.persistence import group_error_for_append
from ..protocol.codec import Message
from ..coordination.settling import InOrderWrites
from ..protocol.errors import ErrorCode
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
    """COMPLETE_COMMIT / COMPLETE_ABORT once every marker is written; nobody waits, unless
    ``then``: an add held while the id was busy, whose ONGOING record follows COMPLETE_* in
    the same append (both land or neither; memory takes ``then.value``)."""

    transactional_id: str
    value: TxnValue
    then: AddWrite | None = None


@dataclass
class ExpireWrite:
    """The tombstone of an expired id; nobody waits."""

    transactional_id: str
    value: None = None


PendingWrite = InitWrite | AddWrite | PrepareWrite | CompleteWrite | ExpireWrite


class Persistence(InOrderWrites[PendingWrite]):
    """The AppendRecords in flight, in emission order (:class:`InOrderWrites`)."""

    def __init__(self, ctx: TxnContext) -> None:
        super().__init__(ctx.emit)
        self.ctx = ctx

    def persist(self, pending: PendingWrite, reason: str) -> int:
        """Append ``pending``'s record (a CompleteWrite's ``then`` after it, in the same
        append); the id's transition is in flight until it settles."""
        records = [txn_record(pending.transactional_id, pending.value)]
        if isinstance(pending, CompleteWrite) and pending.then is not None:
            records.append(txn_record(pending.transactional_id, pending.then.value))
        return self._append(records, pending, reason)
