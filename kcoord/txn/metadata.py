"""In-memory model of a transactional id: its persisted state and the transition in flight.

The state is a :class:`~kcoord.txn.records.TxnValue`, the exact value of the id's last
appended record, replaced whole when an append is acknowledged: so the coordinator's memory is,
by construction, what a replay of its partition rebuilds. At most one transition per id is in
flight; while one is, requests that would change the id are answered CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

from dataclasses import dataclass

from .records import TopicPartition, TxnValue
from .state import TransactionState


@dataclass
class TransactionMetadata:
    transactional_id: str
    # None only while the id's first InitProducerId is being appended.
    value: TxnValue | None = None
    # The target of the transition in flight (PREPARE_EPOCH_FENCE for an abort that fences,
    # DEAD for an expiry), None when there is none.
    pending: TransactionState | None = None

    @property
    def exists(self) -> bool:
        """Whether the id has a persisted state (a client may refer to it)."""
        return self.value is not None

    @property
    def state(self) -> TransactionState | None:
        return None if self.value is None else self.value.state

    @property
    def producer_id(self) -> int:
        return -1 if self.value is None else self.value.producer_id

    @property
    def producer_epoch(self) -> int:
        return -1 if self.value is None else self.value.producer_epoch

    @property
    def partitions(self) -> tuple[TopicPartition, ...]:
        return () if self.value is None else self.value.partitions
