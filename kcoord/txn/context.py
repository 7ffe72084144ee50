"""What every part of the transaction coordinator shares: one explicit object (as
:class:`kcoord.group.context.CoordinatorContext` for the group coordinator's parts).

The parts (persistence, producer ids, markers, ending, InitProducerId, partitions, expiry,
admin) read and change the same facts: the transactional ids of this ``__transaction_state``
partition, the timers, the config, the counters, the cluster's topics as last read, and the
actions decided so far. Each part gets this object in its constructor; whatever a part keeps
to itself stays in the part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..group.placement import coordinator_for as group_coordinator_for
from ..protocol import names
from ..runtime.actions import Outbox
from .actions import RefreshMetadata
from .config import TxnConfig
from .metadata import TransactionMetadata
from .placement import coordinator_for
from .records import TopicPartition
from .timers import Timers


@dataclass
class TxnCoordinatorStats:
    """Counters a shell may export as metrics."""

    transactions_committed: int = 0
    transactions_aborted: int = 0
    # ongoing transactions aborted by the coordinator: a newer instance fenced them, or ...
    fenced_transactions: int = 0
    # ... they outlived their timeout
    timed_out_transactions: int = 0
    expired_ids: int = 0
    markers_sent: int = 0
    marker_retries: int = 0
    # markers to partitions that no longer exist (dropped, as Kafka drops them)
    markers_dropped: int = 0
    # transactions whose markers a leader refused as from an older coordinator
    markers_fenced: int = 0
    persist_failures: int = 0
    # AddPartitionsToTxn / AddOffsetsToTxn held while their id was busy, and those whose
    # hold ran out (answered CONCURRENT_TRANSACTIONS)
    requests_held: int = 0
    holds_expired: int = 0
    # held adds served in the same append as the COMPLETE_* record they waited for
    adds_with_completion: int = 0
    # AddPartitionsToTxn from partition leaders on behalf of producers (KIP-890 part 2)
    implicit_adds: int = 0
    producer_id_blocks: int = 0


@dataclass
class TxnContext(Outbox):
    """The ids, timers, config, counters, topics and pending actions of one coordinator."""

    # Replaced whole by the shell when the operator reconfigures; parts read it at use.
    config: TxnConfig
    partition: int
    num_partitions: int
    # __consumer_offsets partitions (= group coordinators): where AddOffsetsToTxn points.
    offsets_partitions: int
    # Stamped on every marker; leaders refuse markers of an older coordinator epoch.
    coordinator_epoch: int = 0
    stats: TxnCoordinatorStats = field(default_factory=TxnCoordinatorStats)
    transactions: dict[str, TransactionMetadata] = field(default_factory=dict)
    timers: Timers = field(default_factory=Timers)
    # {topic: partition count} as last read from the cluster; None until first read.
    topics: dict[str, int] | None = None
    last_refresh_ms: int | None = None

    # -- placement -----------------------------------------------------------------------

    def owns(self, transactional_id: str) -> bool:
        return coordinator_for(transactional_id, self.num_partitions) == self.partition

    def not_mine(self, transactional_id: str) -> str:
        owner = coordinator_for(transactional_id, self.num_partitions)
        return f"transactional id {transactional_id!r} belongs to coordinator {owner}, this is {self.partition}"

    def offsets_partition(self, group_id: str) -> TopicPartition:
        """The ``__consumer_offsets`` partition holding ``group_id``'s offsets."""
        return names.OFFSETS_TOPIC, group_coordinator_for(group_id, self.offsets_partitions)

    # -- the cluster's topics ------------------------------------------------------------

    def partition_exists(self, topic: str, partition: int) -> bool | None:
        """Whether ``topic``-``partition`` exists as last read (None: nothing read yet)."""
        if topic == names.OFFSETS_TOPIC:
            return 0 <= partition < self.offsets_partitions
        if self.topics is None:
            return None
        count = self.topics.get(topic)
        return count is not None and 0 <= partition < count

    def refresh_metadata(self, now_ms: int) -> None:
        """Ask for the topics again, at most once per ``metadata_refresh_backoff_ms``."""
        if self.last_refresh_ms is not None and now_ms - self.last_refresh_ms < self.config.metadata_refresh_backoff_ms:
            return
        self.last_refresh_ms = now_ms
        self.emit(RefreshMetadata())

    def set_topics(self, partitions: Mapping[str, int]) -> None:
        self.topics = {str(t): int(n) for t, n in partitions.items()}
