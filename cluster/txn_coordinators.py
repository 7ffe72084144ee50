"""A cluster's transaction coordinators: deploying them with their ``__transaction_state``
topic (docs/transactions.md, section 2)."""

from __future__ import annotations

from typing import Any, Mapping

import ray

from kcoord.client.cluster import ClusterClient
from kcoord.protocol import names
from kcoord.txn import TRANSACTION_STATE_TOPIC, TxnConfig
from kcoord.txn.driver import MAX_COORDINATORS
from kcoord.txn.records import TRANSACTION_STATE_SEGMENT_BYTES

from kcoord.actors.txn_coordinator import TransactionCoordinatorActor

from .coordinator_actors import coordinator_health, start_coordinators
from .internal_topics import ensure_internal_topic

RemoteTransactionCoordinator = ray.remote(TransactionCoordinatorActor)


def deploy_txn_coordinators(
    client: ClusterClient,
    count: int,
    group_coordinators: int,
    timeout_s: float = 120.0,
    config: Mapping[str, Any] | None = None,
) -> list[Any]:
    """Create ``__transaction_state`` (``count`` partitions; compacted, RF min(3, brokers),
    min ISR 2) if missing and the ``count`` coordinator actors (detached, restarted by Ray
    forever), and wait until each has loaded its partition. ``group_coordinators``: the
    number of ``__consumer_offsets`` partitions (AddOffsetsToTxn places a group's offsets by
    it). ``config``: Kafka-named settings (``transaction.max.timeout.ms``...). Idempotent:
    existing coordinators are reused."""
    if not 1 <= count <= MAX_COORDINATORS:
        raise ValueError(f"transaction coordinators must be in 1..{MAX_COORDINATORS}, got {count}")
    if group_coordinators < 1:
        raise ValueError("transactions need the group coordinators (AddOffsetsToTxn, TxnOffsetCommit)")
    TxnConfig.from_properties(dict(config or {}))  # a bad value fails before anything starts
    ensure_internal_topic(client, TRANSACTION_STATE_TOPIC, count, TRANSACTION_STATE_SEGMENT_BYTES, "transaction coordinators", timeout_s)
    return start_coordinators(
        client,
        count,
        names.transaction_coordinator,
        RemoteTransactionCoordinator,
        lambda i: (client.name, i, count, group_coordinators, client.namespace, dict(config or {})),
        timeout_s,
    )


def txn_coordinator_health(client: ClusterClient, count: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """Ping every transaction coordinator: alive, loaded (replayed its partition), ids."""
    return coordinator_health(client, count, names.transaction_coordinator, ("transactional_ids", "transactions"), timeout_s)
