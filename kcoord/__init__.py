"""kcoord: a Kafka-style replicated commit log with consumer groups, running on Ray.

The public API (see README) is imported lazily so that the pure core (``kcoord.records``,
``kcoord.log``, ``kcoord.replication``, ``kcoord.group``, ``kcoord.protocol``) can be used
and tested without importing Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "local_cluster": "cluster.local",
    "connect": "kcoord.client.cluster",
    "ClusterClient": "kcoord.client.cluster",
    "Admin": "kcoord.client.admin",
    "Producer": "kcoord.client.producer",
    "RecordMetadata": "kcoord.client.types",
    "Consumer": "kcoord.client.consumer",
    "ConsumerRecord": "kcoord.client.types",
    "TopicPartition": "kcoord.client.types",
    "OffsetAndMetadata": "kcoord.client.types",
    "KafkaError": "kcoord.protocol.errors",
    "ErrorCode": "kcoord.protocol.errors",
}

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
