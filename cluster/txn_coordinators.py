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
    handles = []
    for i in range(count):
        name = names.transaction_coordinator(client.name, i)
        try:
            handles.append(ray.get_actor(name, namespace=client.namespace))
            continue
        except ValueError:
            pass
        try:
            handle = RemoteTransactionCoordinator.options(
                name=name,
                namespace=client.namespace,
                lifetime="detached",
                num_cpus=0,
                max_restarts=-1,
                max_task_retries=0,
                max_concurrency=10_000,
            ).remote(client.name, i, count, group_coordinators, client.namespace, dict(config or {}))
        except ValueError:  # created concurrently
            handle = ray.get_actor(name, namespace=client.namespace)
        handles.append(handle)
    ray.get([h.ready.remote() for h in handles], timeout=timeout_s)
    return handles


def txn_coordinator_health(client: ClusterClient, count: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """Ping every transaction coordinator: alive, loaded (replayed its partition), ids."""
    refs = {}
    out: list[dict[str, Any]] = []
    for i in range(count):
        try:
            refs[i] = ray.get_actor(names.transaction_coordinator(client.name, i), namespace=client.namespace).describe.remote()
        except ValueError:
            pass
    for i in range(count):
        entry: dict[str, Any] = {"index": i, "name": names.transaction_coordinator(client.name, i), "alive": False, "loaded": False, "transactional_ids": 0}
        if i in refs:
            try:
                d = ray.get(refs[i], timeout=timeout_s)
                entry.update(alive=True, loaded=bool(d.get("loaded")), transactional_ids=len(d.get("transactions", {})), pid=d.get("pid"))
            except Exception as exc:
                entry["error"] = type(exc).__name__
        out.append(entry)
    return out
