"""Cluster-wide group settings: runtime overrides of the group coordinators' config.

Kafka's ``group.*``/``offsets.*`` broker settings can be changed for a running cluster with
:func:`configure_group_coordinators`; the overrides live in Ray's GCS key/value store so a
coordinator that Ray restarts picks them up again (:func:`stored_config`).
"""

from __future__ import annotations

from typing import Any, Mapping

import ray

from kcoord.client.cluster import ClusterClient
from kcoord.group import GroupConfig
from kcoord.protocol import names

# Key of the cluster-wide group config overrides in the cluster's GCS KV namespace.
CONFIG_KEY = "group-coordinator/config"


def stored_config(cluster: str) -> dict[str, Any]:
    """The runtime overrides saved by :func:`configure_group_coordinators` (or {})."""
    from .gcs_store import GcsStore

    return GcsStore.for_cluster(cluster).get_json_dict(CONFIG_KEY)


def configure_group_coordinators(client: ClusterClient, properties: Mapping[str, Any], timeout_s: float = 60.0) -> dict[str, int]:
    """Change group settings of every coordinator of the cluster now and after restarts
    (merged into earlier overrides; kept in Ray's GCS KV store). Returns the effective
    config of coordinator 0. Unknown keys are ignored, bad values raise ValueError."""
    from .gcs_store import GcsStore

    merged = {**stored_config(client.name), **{str(k): v for k, v in properties.items()}}
    GroupConfig.from_properties(merged)  # validate before storing
    GcsStore.for_cluster(client.name).put_json(CONFIG_KEY, merged)
    from kcoord.client.admin import Admin

    count = Admin(client).describe_cluster()["group_coordinators"]
    handles = [ray.get_actor(names.group_coordinator(client.name, i), namespace=client.namespace) for i in range(count)]
    results = ray.get([h.reconfigure.remote(merged) for h in handles], timeout=timeout_s)
    return results[0] if results else {}
