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

A driver runs the core like this (the group coordinator's driver is the model)::

    core = TransactionCoordinatorState(config, partition=i, num_partitions=n,
                                       offsets_partitions=groups, coordinator_epoch=epoch)
    run(core.load(read_partition(i), now_ms()))        # replay; resumes PREPARE_* markers

    def run(actions):
        for a in actions:
            if isinstance(a, Reply):
                resolve(a.token, a.response)
            elif isinstance(a, AppendRecords):         # in order, acks=all
                append_in_order(a.records, done=lambda err, pid=a.persist_id:
                                run(core.on_persisted(pid, err, now_ms())))
            elif isinstance(a, (SendWriteTxnMarker, SendTxnOffsetMarker)):
                send_marker(a.request, done=lambda err, mid=a.marker_id:
                            run(core.on_marker_written(mid, err, now_ms())))
            elif isinstance(a, AllocateProducerIds):   # the controller's InitProducerId(count)
                allocate(a.count, done=lambda first, n, err:
                         run(core.on_producer_ids(first, n, err, now_ms())))
            elif isinstance(a, RefreshMetadata):
                read_topics(done=lambda counts: run(core.on_metadata(counts, now_ms())))
        rearm_timer(core.next_deadline(now_ms()), lambda: run(core.tick(now_ms())))

    # losing the partition (or stopping): run(core.close(now_ms(), ErrorCode.NOT_COORDINATOR))
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
