"""Transactions: the transaction coordinator's pure (sans-I/O, Ray-free) core (issue 34,
docs/transactions.md).

* :mod:`.coordinator` -- :class:`TransactionCoordinatorState`, Kafka 4.0's transaction
  coordinator as a state machine over the transactional ids of one ``__transaction_state``
  partition.
* :mod:`.actions` -- what it asks its driver to do: :class:`Reply`, :class:`AppendRecords`,
  :class:`SendWriteTxnMarker`, :class:`SendTxnOffsetMarker`, :class:`AllocateProducerIds`,
  :class:`RefreshMetadata`.
* :mod:`.records` -- the ``__transaction_state`` record format and its decoder;
  :mod:`.state` -- the states and their transitions; :mod:`.metadata` -- the in-memory model.
* :mod:`.placement` -- ``coordinator_for(transactional_id, n)``.
* :mod:`.config` -- :class:`TxnConfig`.
* :mod:`.driver` -- :class:`~kcoord.txn.driver.TransactionCoordinatorDriver`, the one driver
  that runs the core (on the partition machinery it shares with the group coordinators,
  :mod:`kcoord.coordination`): it performs the actions and feeds each outcome back through
  the entry point the action names. Not imported here: the core stays importable alone.
"""

from .actions import Action, AllocateProducerIds, AppendRecords, RefreshMetadata, Reply, SendTxnOffsetMarker, SendWriteTxnMarker
from .config import TxnConfig
from .coordinator import TransactionCoordinatorState, TxnCoordinatorStats
from .metadata import TransactionMetadata
from .placement import TRANSACTION_STATE_TOPIC, coordinator_for
from .records import TxnValue, coordinator_epoch_record, decode_record, replay
from .state import TransactionState

__all__ = [
    "Action",
    "AllocateProducerIds",
    "AppendRecords",
    "RefreshMetadata",
    "Reply",
    "SendTxnOffsetMarker",
    "SendWriteTxnMarker",
    "TRANSACTION_STATE_TOPIC",
    "TransactionCoordinatorState",
    "TransactionMetadata",
    "TransactionState",
    "TxnConfig",
    "TxnCoordinatorStats",
    "TxnValue",
    "coordinator_epoch_record",
    "coordinator_for",
    "decode_record",
    "replay",
]
