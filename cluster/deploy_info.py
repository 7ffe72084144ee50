"""A deployment's record in its cluster's GCS key/value store: what ``kcoord up`` (or
:func:`kcoord.deploy`) was asked for -- data directory, brokers, the Kafka listeners' port,
host and options -- so that later commands (``kcoord status``, ``listeners restart``,
``down``) act on the cluster as it was deployed."""

from __future__ import annotations

from typing import Any

# Key of the deployment record in the cluster's GCS KV namespace.
DEPLOY_INFO_KEY = "deploy/info"


def deploy_info(name: str) -> dict[str, Any]:
    """The deployment record of cluster ``name`` ({} if none); needs a Ray connection."""
    from kcoord.actors.gcs_store import GcsStore

    return GcsStore.for_cluster(name).get_json_dict(DEPLOY_INFO_KEY)
