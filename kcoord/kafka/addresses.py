"""Where a cluster's Kafka listeners are: each listener's record in the cluster's GCS
key/value store (its advertised host, one port per broker id, what it binds to and whether
it authenticates every client), written by the listener when it binds and read by
Metadata answers, ``bootstrap_servers``, deployment and ``kcoord status``."""

from __future__ import annotations

from typing import Any

# GCS key/value store (namespace of the cluster) where each listener records its address.
LISTENER_KEY_PREFIX = "kafka/listener/"


def _store(cluster: str) -> Any:
    from kcoord.actors.gcs_store import GcsStore  # the cluster's GCS KV namespace (deploy info, metadata)

    return GcsStore.for_cluster(cluster)


def record_listener(cluster: str, node_id: str, host: str, ports: dict[int, int], *, bind: str = "", protocol: str = "PLAINTEXT", authenticates: bool = False) -> None:
    """``bind``, ``protocol`` and whether every client is authenticated are what `kcoord
    status` reports (a listener open to anyone on a routable address is flagged)."""
    record = {"host": host, "ports": {str(b): p for b, p in ports.items()}, "bind": bind or host, "protocol": protocol, "authenticates": authenticates}
    _store(cluster).put_json(LISTENER_KEY_PREFIX + node_id, record)


def _parse(value: dict) -> dict | None:
    try:
        return {
            "host": str(value["host"]),
            "ports": {int(b): int(p) for b, p in value["ports"].items()},
            "bind": str(value.get("bind") or value["host"]),
            "protocol": str(value.get("protocol") or "PLAINTEXT"),
            "authenticates": bool(value.get("authenticates", False)),
        }
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def recorded_listener(cluster: str, node_id: str) -> dict | None:
    return _parse(_store(cluster).get_json_dict(LISTENER_KEY_PREFIX + node_id))


DEPLOY_INFO_KEY = "deploy/info"  # cluster/deploy_info.py writes the deployment record there


def deployment_record(cluster: str) -> dict:
    """The cluster's deployment record ({} if none): how many coordinators of each kind."""
    return _store(cluster).get_json_dict(DEPLOY_INFO_KEY) or {}


def listener_records(cluster: str) -> dict[str, dict]:
    store = _store(cluster)
    out = {}
    for key in store.keys(LISTENER_KEY_PREFIX):
        rec = _parse(store.get_json_dict(key))
        if rec is not None:
            out[key[len(LISTENER_KEY_PREFIX) :]] = rec
    return out


def listener_addresses(cluster: str) -> dict[str, str]:
    """Ray node id -> the bootstrap ``host:port`` of its listener."""
    return {node: f"{r['host']}:{r['ports'][min(r['ports'])]}" for node, r in listener_records(cluster).items() if r["ports"]}


def bootstrap_servers(cluster: str) -> str:
    """``host:port[,host:port...]`` of the cluster's listeners ("" when none runs)."""
    return ",".join(sorted(listener_addresses(cluster).values()))


def listener_nodes(cluster: str) -> list[str]:
    """Node ids with a listener record (parsable or not)."""
    return [k[len(LISTENER_KEY_PREFIX) :] for k in _store(cluster).keys(LISTENER_KEY_PREFIX)]


def forget_listeners(cluster: str) -> None:
    store = _store(cluster)
    for key in store.keys(LISTENER_KEY_PREFIX):
        store.delete(key)
