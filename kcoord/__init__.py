"""kcoord: a Kafka-style replicated commit log with consumer groups, running on Ray.

The public API (see README) is imported lazily so that the pure core (``kcoord.records``,
``kcoord.log``, ``kcoord.replication``, ``kcoord.group``, ``kcoord.protocol``) can be used
and tested without importing Ray.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

__version__ = "0.1.0"

# The Ray actor shells and the deployment code keep their folders at the top of the
# repository (actors/, cluster/) and install as kcoord.actors and kcoord.cluster
# (pyproject's package-dir). Run from a source checkout (PYTHONPATH, a git worktree), the
# checkout's own folders must answer to those names, not an installed copy's.
_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "actors" / "replica.py").is_file() and (_checkout / "cluster" / "deploy.py").is_file():
    __path__.append(str(_checkout))  # type: ignore[name-defined]  # noqa: F821

_LAZY = {
    "local_cluster": "kcoord.cluster.local",
    "deploy": "kcoord.cluster.deploy",
    "teardown": "kcoord.cluster.deploy",
    "connect": "kcoord.client.cluster",
    "ClusterClient": "kcoord.client.cluster",
    "Admin": "kcoord.client.admin",
    "NewTopic": "kcoord.client.admin",
    "NewPartitions": "kcoord.client.admin",
    "ConfigResource": "kcoord.client.admin",
    # transactions for operators (KIP-664; kcoord.client.admin_transactions)
    "AbortTransactionSpec": "kcoord.client.admin_transactions",
    # users and ACLs, kafka-python's names (kcoord.client.security_admin)
    "ACL": "kcoord.client.security_admin",
    "ACLFilter": "kcoord.client.security_admin",
    "ACLOperation": "kcoord.client.security_admin",
    "ACLPermissionType": "kcoord.client.security_admin",
    "ACLResourcePatternType": "kcoord.client.security_admin",
    "ResourcePattern": "kcoord.client.security_admin",
    "ResourcePatternFilter": "kcoord.client.security_admin",
    "ResourceType": "kcoord.client.security_admin",
    "ScramMechanism": "kcoord.client.security_admin",
    "UserScramCredentialUpsertion": "kcoord.client.security_admin",
    "UserScramCredentialDeletion": "kcoord.client.security_admin",
    "AIOProducer": "kcoord.client.aio",
    "AIOConsumer": "kcoord.client.aio",
    "Producer": "kcoord.client.producer",
    "RecordMetadata": "kcoord.client.types",
    "Consumer": "kcoord.client.consumer",
    "ConsumerRecord": "kcoord.client.types",
    "TopicPartition": "kcoord.client.types",
    "OffsetAndMetadata": "kcoord.client.types",
    "ConsumerGroupMetadata": "kcoord.client.types",
    "OffsetAndTimestamp": "kcoord.client.types",
    "KafkaError": "kcoord.protocol.errors",
    "ErrorCode": "kcoord.protocol.errors",
    "NoOffsetForPartitionError": "kcoord.client.errors",
    "CommitFailedError": "kcoord.client.errors",
    "ClusterNotFoundError": "kcoord.client.errors",
    "SerializationError": "kcoord.client.errors",
    # transactions (kafka-python's names; KIP-939's PreparedTxnState)
    "IllegalStateError": "kcoord.client.errors",
    "TransactionAbortedError": "kcoord.client.errors",
    "PreparedTxnState": "kcoord.client.producer.transaction_manager",
}
# One exception class per Kafka error code, named as in kafka-python (kcoord.protocol.errors).
_LAZY.update(dict.fromkeys(importlib.import_module("kcoord.protocol.errors").ERROR_CLASS_NAMES, "kcoord.protocol.errors"))

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kcoord' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
