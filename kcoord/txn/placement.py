"""Which transaction coordinator owns a transactional id: ``abs(java_hash(transactional_id)) % N``,
Kafka's placement of transactional ids on ``__transaction_state`` partitions, with the same
stable Java string hash that places groups (Python's ``hash(str)`` is salted per process).
"""

from __future__ import annotations

from ..group.placement import coordinator_for as _placed
from ..protocol import names

TRANSACTION_STATE_TOPIC = names.TRANSACTION_STATE_TOPIC


def coordinator_for(transactional_id: str, num_coordinators: int) -> int:
    """Index of the transaction coordinator (= the ``__transaction_state`` partition) that
    owns ``transactional_id``."""
    return _placed(transactional_id, num_coordinators)


def owner_name(index: int) -> str:
    """The owner name coordinator ``index`` asks the controller for its producer id and epoch
    with (``kcoord.replication.owned_producers``), as ``__consumer_offsets-<i>`` for groups."""
    return f"{TRANSACTION_STATE_TOPIC}-{index}"
