"""Start and stop a cluster's Kafka listeners: one KafkaListener actor per alive Ray node;
their options (``kafka_options`` with ``kafka_security``'s listener part), the SCRAM users
given with them, and which of them are open to anyone on a routable address.
(``kcoord.kafka.deploy`` re-exports this module, its old path.)"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any, Mapping

from kcoord.kafka import addresses
from kcoord.kafka.addresses import bootstrap_servers  # noqa: F401 - part of this module's API
from kcoord.protocol import names

from .deploy_info import DEPLOY_INFO_KEY, deploy_info
from .named_actors import kill_named, wait_gone

logger = logging.getLogger("kcoord.kafka")

DEFAULT_KAFKA_PORT = 9092


def create_users(client: Any, users: dict[str, str]) -> None:
    """Create (or replace) each user's SCRAM-SHA-256 and SCRAM-SHA-512 credentials from
    its password, through the controller. Raises KafkaError naming a refused user."""
    from kcoord.client.security_admin import alter_user_scram_credentials, user_upsertions
    from kcoord.protocol.errors import ErrorCode, KafkaError

    per_user = {user: user_upsertions(user, password) for user, password in users.items()}
    for i in range(2):  # one request per mechanism: Kafka alters a user once per request
        errors = alter_user_scram_credentials(client, [ups[i] for ups in per_user.values()])
        refused = {u: e for u, e in errors.items() if e}
        if refused:
            raise KafkaError(ErrorCode.UNACCEPTABLE_CREDENTIAL, f"could not create users {refused}")


def listener_name(cluster: str, node_id: str) -> str:
    return f"{names.prefix(cluster)}kafka/{node_id}"


def start_listeners(
    cluster: str,
    namespace: str = names.DEFAULT_NAMESPACE,
    port: int = DEFAULT_KAFKA_PORT,
    host: str | None = None,
    *,
    local: bool = False,
    options: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> str:
    """One listener per alive node; returns the bootstrap servers string.

    ``local``: bind to loopback (an embedded local cluster). Otherwise each listener binds
    to its node's address; ``host`` overrides the advertised address (one node only, or a
    name that resolves to every node's own address)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from kcoord.actors.kafka_listener import KafkaListener

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if local:
        nodes = nodes[:1] if nodes else []
    handles = []
    for n in nodes:
        node_id = n["NodeID"]
        bind = "127.0.0.1" if local else n.get("NodeManagerAddress") or "0.0.0.0"
        name = listener_name(cluster, node_id)
        opts: dict[str, Any] = dict(
            name=name,
            namespace=namespace,
            num_cpus=0,
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=100_000,
            lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        )
        if not local:
            opts["get_if_exists"] = True
        handle = ray.remote(KafkaListener).options(**opts).remote(cluster, namespace, bind, port, host or bind, options)
        handles.append(handle)
    addresses = ray.get([h.start.remote() for h in handles], timeout=timeout_s)
    return ",".join(addresses)


def stop_listeners(cluster: str, namespace: str = names.DEFAULT_NAMESPACE) -> int:
    """Kill every listener of ``cluster`` recorded in the GCS; forget their addresses."""
    names_ = [listener_name(cluster, node_id) for node_id in addresses.listener_nodes(cluster)]
    killed = kill_named(names_, namespace)
    addresses.forget_listeners(cluster)
    # Gone before anyone starts a listener of the same name again (restart_listeners).
    wait_gone(names_, namespace)
    return killed


def listener_actor_names(cluster: str) -> list[str]:
    return [listener_name(cluster, node) for node in addresses.listener_nodes(cluster)]


def listener_options(kafka_security: Any = None, kafka_options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The options a listener actor gets: ``kafka_options`` (validated) and, with
    ``kafka_security``, its listener part (no password: users' passwords are turned into
    credentials by whoever deploys). ValueError naming the problem."""
    from kcoord.kafka.listener_security import ConnectionLimits
    from kcoord.security.config import SecurityConfig

    options = dict(kafka_options or {})
    if "security" in options:
        raise ValueError("kafka_options['security'] is set by kafka_security=..., not directly")
    security = SecurityConfig.parse(kafka_security) if kafka_security is not None else None
    ConnectionLimits.from_options(options, secure=security is not None)  # ValueError for a bad limit
    if security is not None:
        options["security"] = security.listener_options()
    return options


def _routable(host: str) -> bool:
    if host in ("localhost", ""):
        return host != "localhost"
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a name: assume it resolves to a routable address


def exposure_warnings(records: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per listener bound to a non-loopback address that does not authenticate
    every client (PLAINTEXT, or SSL without required client certificates): anyone who
    reaches it may produce, read every topic, join any group and delete topics."""
    out = []
    for node, rec in sorted(records.items()):
        if rec.get("authenticates") or not _routable(str(rec.get("bind") or rec.get("host") or "")):
            continue
        where = f"{rec.get('bind') or rec.get('host')}:{min(rec['ports'].values()) if rec.get('ports') else '?'}"
        protocol = rec.get("protocol", "PLAINTEXT")
        what = "no authentication and no ACLs" if protocol == "PLAINTEXT" else f"{protocol} without client authentication"
        out.append(
            f"the Kafka listener on {where} (node {node[:12]}) is open to anyone who can reach it ({what}): "
            "start it with kafka_security=... (`kcoord listeners restart --kafka-security-protocol SASL_SSL ...`, docs/security.md)"
        )
    return out


def restart_listeners(
    cluster: str,
    namespace: str = names.DEFAULT_NAMESPACE,
    *,
    kafka_security: Any = None,
    kafka_options: Mapping[str, Any] | None = None,
    timeout_s: float = 60.0,
) -> str:
    """Stop the cluster's listeners and start them again with new security and options,
    on the port and host the cluster was deployed with (how security is turned on, or
    changed, for a running cluster: docs/security.md). Users in ``kafka_security`` are
    created (or their passwords replaced) first. Returns the bootstrap servers."""
    from kcoord.actors.gcs_store import GcsStore

    options = listener_options(kafka_security, kafka_options)
    info = deploy_info(cluster)
    kafka = dict(info.get("kafka") or {})
    if kafka_security is not None:
        from kcoord.client.cluster import ClusterClient
        from kcoord.security.config import SecurityConfig

        users = SecurityConfig.parse(kafka_security).users
        if users:
            create_users(ClusterClient(cluster, namespace=namespace, address=None), users)
    stop_listeners(cluster, namespace)
    port = int(kafka.get("port", DEFAULT_KAFKA_PORT) or 0)
    bootstrap = start_listeners(cluster, namespace, port, kafka.get("host"), local=bool(kafka.get("local")), options=options, timeout_s=timeout_s)
    if info:
        kafka.update({"port": port, "security": options.get("security"), "options": {k: v for k, v in options.items() if k != "security"}})
        info["kafka"] = kafka
        GcsStore.for_cluster(cluster).put_json(DEPLOY_INFO_KEY, info)
    return bootstrap


def listener_stats(cluster: str, namespace: str = names.DEFAULT_NAMESPACE, timeout_s: float = 30.0) -> list[dict]:
    """Every listener's ``stats()`` (connections, requests, refusals, authentication)."""
    import ray

    out = []
    for name in listener_actor_names(cluster):
        try:
            out.append(ray.get(ray.get_actor(name, namespace=namespace).stats.remote(), timeout=timeout_s))
        except Exception as exc:  # noqa: BLE001 - a listener gone or restarting: say so
            out.append({"actor": name, "error": repr(exc)})
    return out
