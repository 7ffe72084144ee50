"""Where the group coordinators' cluster-wide setting overrides live: Ray's GCS key/value
store, so that a coordinator Ray restarts picks them up again (:func:`stored_config`).
They are written by :func:`kcoord.cluster.group_coordinators.configure_group_coordinators`.
"""

from __future__ import annotations

from typing import Any


# Key of the cluster-wide group config overrides in the cluster's GCS KV namespace.
CONFIG_KEY = "group-coordinator/config"


def stored_config(cluster: str) -> dict[str, Any]:
    """The runtime overrides saved by :func:`configure_group_coordinators` (or {})."""
    from .gcs_store import GcsStore

    return GcsStore.for_cluster(cluster).get_json_dict(CONFIG_KEY)
