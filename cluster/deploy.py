"""Deploy a kcoord cluster onto a Ray cluster, inspect it, tear it down.

A deployment is a FailoverCoordinator (the controller) and GroupCoordinatorActors, all
named ``"{cluster}/..."`` in one Ray namespace; replica actors are created per topic by the
controller. Every one of them is detached (the cluster outlives the script or CLI that
deployed it) and restartable.

Placement: on a multi-node Ray cluster each broker id is bound to a node
(:mod:`kcoord.replication.placement`) so the replicas of a partition run on distinct nodes; the
controller is pinned (softly) to the head node, which holds the GCS anyway. On one node
brokers are logical.

What a deployment remembers in Ray's GCS key/value store (namespace ``kcoord/{cluster}``):
the controller's metadata (topics, partitions, leaders, ISR, broker binding), the group
coordinators' settings, and ``deploy/info`` (data directory, sizes) so that ``teardown``
and ``status`` work from any process. ``teardown(delete_data=False)`` keeps all of it and
the logs: deploying the same name again brings the topics back, and the controller prefers
the stored broker -> node binding to the fresh one, so brokers return to the nodes that
hold their logs (brokers whose node is gone are re-bound as after a node failure).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

import platformdirs
import ray
from ray.exceptions import GetTimeoutError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kcoord.client.cluster import ClusterClient, ensure_ray
from kcoord.client.errors import ClusterNotFoundError
from kcoord.protocol import names

from .deploy_info import DEPLOY_INFO_KEY, deploy_info
from .listeners import create_users
from .named_actors import kill_named, wait_gone
from .broker_nodes import broker_placement, ray_alive_nodes, ray_head_node

# A per-user data directory (~/.local/share/kcoord/data on Linux): logs must outlive reboots
# and temp-directory cleaners. KCOORD_DATA_DIR overrides it.
DEFAULT_DATA_ROOT = Path(os.environ.get("KCOORD_DATA_DIR") or platformdirs.user_data_path("kcoord") / "data")
logger = logging.getLogger("kcoord.deploy")

__all__ = [
    "ClusterExistsError",
    "ClusterNotFoundError",
    "DEFAULT_DATA_ROOT",
    "broker_placement",
    "deploy",
    "deploy_info",
    "status",
    "teardown",
]


class ClusterExistsError(RuntimeError):
    """A cluster of that name is already running."""


def _controller_exists(name: str, namespace: str) -> bool:
    try:
        ray.get_actor(names.controller(name), namespace=namespace)
        return True
    except ValueError:
        return False


def _exists_error(name: str, namespace: str) -> ClusterExistsError:
    return ClusterExistsError(
        f"a kcoord cluster named {name!r} is already running in Ray namespace {namespace!r}; "
        f"connect to it with kcoord.connect({name!r}) or remove it first with `kcoord down --name {name}`"
    )


def controller_actor_options(actor_name: str, namespace: str) -> dict[str, Any]:
    """The Ray options of a cluster's controller actor (``benchmarks/_controller_restart.py``
    deploys a bare actor with them to time Ray's part of a restart)."""
    return dict(
        name=actor_name,
        namespace=namespace,
        num_cpus=0,
        max_restarts=-1,
        max_task_retries=0,
        max_concurrency=10_000,
        # Always detached: the cluster must outlive the script that deployed it, and a
        # non-detached actor dies with its owner (taking the replicas it owns with it).
        lifetime="detached",
    )


def deploy(
    name: str = "kcoord",
    brokers: int = 3,
    data_dir: str | os.PathLike | None = None,
    group_coordinators: int = 3,
    address: str | None = "auto",
    namespace: str = names.DEFAULT_NAMESPACE,
    *,
    store: str = "gcs",
    controller_config: dict | None = None,
    default_topic_config: dict[str, str] | None = None,
    broker_config: dict[str, Any] | None = None,
    timeout_s: float = 120.0,
    kafka_port: int | None = None,
    kafka_host: str | None = None,
    kafka_local: bool = False,
    kafka_options: dict | None = None,
    kafka_security: dict | None = None,
    transaction_coordinators: int | None = None,
    txn_config: dict[str, Any] | None = None,
) -> ClusterClient:
    """Create cluster ``name`` on the Ray cluster at ``address`` and return a client.

    ``kafka_port`` starts a Kafka listener on every node (0 picks a free port; None: no
    listener), advertised at ``kafka_host`` or the node's address (loopback with
    ``kafka_local``); ``client.bootstrap_servers`` gives Kafka clients the addresses.
    ``kafka_options``: Kafka's broker settings for the listeners
    (``connections.max.idle.ms``, ``max.connections``, ``max.connections.per.ip``,
    ``sasl.server.max.receive.size``, ``connections.max.reauth.ms``).
    ``kafka_security``: TLS, SASL and ACLs on the listeners (see
    :mod:`kcoord.security.config` and docs/security.md); its ``users`` are created as
    SCRAM-SHA-256 and -512 credentials (salted and hashed; the passwords go nowhere).
    Without it a listener on a routable address is open to anyone, and a warning says so.

    ``broker_config``: cluster-wide settings under Kafka's broker config names, delivered
    to every replica: ``log.retention.check.interval.ms``, ``log.cleaner.enable``,
    ``log.cleaner.backoff.ms``. An unknown key or a bad value is a ValueError.

    ``transaction_coordinators``: how many transaction coordinators (and partitions of
    ``__transaction_state``) to start; None: as many as group coordinators (0 without
    them). ``txn_config``: their Kafka-named settings (``transaction.max.timeout.ms``,
    ``transactional.id.expiration.ms``...); ``transactional.id.expiration.ms`` goes to the
    group coordinators too (they expire idle transactional producers' records with it).

    Refuses (``ClusterExistsError``) if a cluster of that name is already running. If a
    step fails, whatever was created is removed again (the stored metadata of an earlier
    deployment of the same name is kept), so the deploy can simply be retried.
    """
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"cluster name must be a non-empty string without '/', got {name!r}")
    if brokers < 1:
        raise ValueError(f"brokers must be >= 1, got {brokers}")
    if group_coordinators < 0:
        raise ValueError(f"group_coordinators must be >= 0, got {group_coordinators}")
    if transaction_coordinators is None:
        transaction_coordinators = group_coordinators
    if transaction_coordinators < 0:
        raise ValueError(f"transaction_coordinators must be >= 0, got {transaction_coordinators}")
    if transaction_coordinators and not group_coordinators:
        raise ValueError("transaction coordinators need group coordinators (AddOffsetsToTxn, TxnOffsetCommit)")
    from kcoord.replication.config import validate_broker_config

    broker_cfg = validate_broker_config(broker_config)
    listener_opts = None
    if kafka_port is not None or kafka_security is not None:
        from .listeners import listener_options

        listener_opts = listener_options(kafka_security, kafka_options)  # ValueError before anything starts
    ensure_ray(address)
    if _controller_exists(name, namespace):
        raise _exists_error(name, namespace)
    data_path = Path(data_dir) if data_dir is not None else DEFAULT_DATA_ROOT / name
    data_path.mkdir(parents=True, exist_ok=True)
    cfg = dict(controller_config or {})
    if default_topic_config:
        cfg["default_topic_config"] = {str(k): str(v) for k, v in default_topic_config.items()}
    if broker_cfg:
        cfg["broker_config"] = broker_cfg

    from kcoord.actors.controller import FailoverCoordinator

    binding = broker_placement(brokers)
    options = controller_actor_options(names.controller(name), namespace)
    head = ray_head_node() if binding else None
    if head:
        # Soft: the head holds the GCS (whose loss ends the Ray cluster anyway), so the
        # controller survives any worker node's failure without a restart.
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=head, soft=True)
    try:
        controller = ray.remote(FailoverCoordinator).options(**options).remote(
            name,
            list(range(brokers)),
            str(data_path),
            namespace,
            store,
            cfg,
            group_coordinators,
            binding,
        )
    except ValueError:  # the name was taken between our check and the creation
        raise _exists_error(name, namespace) from None
    try:
        try:
            ray.get(controller.ready.remote(), timeout=timeout_s)
        except GetTimeoutError:
            raise TimeoutError(
                f"the controller of {name!r} did not start within {timeout_s:.0f} s (is the Ray cluster overloaded?)"
            ) from None
        from kcoord.actors.gcs_store import GcsStore

        info = {
            "name": name,
            "namespace": namespace,
            "brokers": brokers,
            "group_coordinators": group_coordinators,
            "transaction_coordinators": transaction_coordinators,
            "data_dir": str(data_path),
            "store": store,
            "placement": {str(b): n for b, n in binding.items()},
            "deployed_at_ms": int(time.time() * 1000),
            "kafka": None
            if kafka_port is None
            else {
                "port": kafka_port,
                "host": kafka_host,
                "local": kafka_local,
                "security": (listener_opts or {}).get("security"),
                "options": {k: v for k, v in (listener_opts or {}).items() if k != "security"},
            },
        }
        GcsStore.for_cluster(name).put_json(DEPLOY_INFO_KEY, info)
        client = ClusterClient(name, namespace=namespace, address=address)
        if kafka_security is not None:
            from kcoord.security.config import SecurityConfig

            users = SecurityConfig.parse(kafka_security).users
            if users:
                create_users(client, users)
        if group_coordinators:
            # the group side expires idle transactional producers' records at the same horizon
            horizon = {k: v for k, v in (txn_config or {}).items() if str(k).replace(".", "_") == "transactional_id_expiration_ms"}
            _deploy_group_coordinators(client, group_coordinators, str(data_path), timeout_s, horizon)
        if transaction_coordinators:
            from .txn_coordinators import deploy_txn_coordinators

            deploy_txn_coordinators(client, transaction_coordinators, group_coordinators, timeout_s, txn_config)
        if kafka_port is not None:
            from kcoord.kafka.addresses import listener_records

            from .listeners import exposure_warnings, start_listeners

            start_listeners(name, namespace, kafka_port, kafka_host, local=kafka_local, options=listener_opts, timeout_s=timeout_s)
            for line in exposure_warnings(listener_records(name)):
                logger.warning("%s", line)
                warnings.warn(line, stacklevel=2)
    except BaseException:
        _kill_quietly(name, namespace)
        raise
    return client


def _kill_quietly(name: str, namespace: str) -> None:
    try:
        teardown(name, delete_data=False, address=None, namespace=namespace)
    except Exception:
        pass


def _deploy_group_coordinators(client: ClusterClient, count: int, data_dir: str, timeout_s: float, config: dict[str, Any] | None = None) -> None:
    try:
        from .group_coordinators import deploy_group_coordinators
    except ImportError:  # consumer groups not available in this build
        return
    deploy_group_coordinators(client, count, data_dir, timeout_s, config)


def _cluster_actor_names(name: str, namespace: str) -> list[str]:
    """Every actor of cluster ``name``: the controller, the replicas it knows, the group
    coordinators, plus any other ``{name}/...`` actor the state API lists (it needs the
    dashboard, so it is only a supplement)."""
    found: list[str] = [names.controller(name)]
    coordinators = int(deploy_info(name).get("group_coordinators", 0) or 0)
    try:
        controller = ray.get_actor(names.controller(name), namespace=namespace)
        found += list(ray.get(controller.replica_health.remote(), timeout=30))
        from kcoord.protocol.controller import DescribeClusterRequest, DescribeClusterResponse

        raw = ray.get(controller.describe_cluster.remote(DescribeClusterRequest().encode()), timeout=30)
        coordinators = max(coordinators, DescribeClusterResponse.decode(raw).group_coordinators)
    except Exception:
        pass
    found += [names.group_coordinator(name, i) for i in range(coordinators)]
    found += [names.transaction_coordinator(name, i) for i in range(int(deploy_info(name).get("transaction_coordinators", 0) or 0))]
    try:
        from .listeners import listener_actor_names

        found += listener_actor_names(name)
    except Exception:
        pass
    try:
        from ray.util.state import list_actors

        for a in list_actors(filters=[("state", "!=", "DEAD")], limit=10_000, raise_on_missing_output=False):
            n = a.get("name") if isinstance(a, dict) else getattr(a, "name", None)
            ns = a.get("ray_namespace") if isinstance(a, dict) else getattr(a, "ray_namespace", None)
            if n and n.startswith(names.prefix(name)) and (ns is None or ns == namespace):
                found.append(n)
    except Exception:
        pass
    return sorted(set(found))


@ray.remote(num_cpus=0, max_retries=0)
def _remove_dir(path: str) -> str:
    """Runs on one node: remove that node's copy of a data directory."""
    shutil.rmtree(path, ignore_errors=True)
    return ray.get_runtime_context().get_node_id()


def _remove_data_everywhere(path: Path, timeout_s: float = 60.0) -> None:
    """Replica logs live on the node each replica ran on: remove the directory on every
    alive node (and locally, which covers single-node clusters and this machine)."""
    shutil.rmtree(path, ignore_errors=True)
    refs = [
        _remove_dir.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote(str(path))
        for node in ray_alive_nodes()
    ]
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout_s)


def teardown(
    name: str = "kcoord",
    delete_data: bool = False,
    address: str | None = "auto",
    namespace: str = names.DEFAULT_NAMESPACE,
    data_dir: str | os.PathLike | None = None,
) -> int:
    """Kill every actor of cluster ``name``; with ``delete_data`` also remove its data
    directory (on every node) and its metadata in the GCS. Returns the number of actors
    killed (0 if nothing was running)."""
    ensure_ray(address)
    info = deploy_info(name)
    actor_names = _cluster_actor_names(name, namespace)
    # The controller goes first so it does not recreate what we kill next.
    ordered = sorted(actor_names, key=lambda n: n != names.controller(name))
    killed = kill_named(ordered, namespace)
    wait_gone(ordered, namespace)
    try:  # the listeners are gone: their addresses are stale
        from kcoord.kafka.addresses import forget_listeners

        forget_listeners(name)
    except Exception:
        pass
    if delete_data:
        from kcoord.actors.gcs_store import GcsStore

        GcsStore.for_cluster(name).clear()
        if data_dir is not None:
            path = Path(data_dir)
        elif info.get("data_dir"):
            path = Path(info["data_dir"])
        else:
            path = DEFAULT_DATA_ROOT / name
        _remove_data_everywhere(path)
    return killed


def _coordinator_health(client: ClusterClient, count: int, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """Ping every group coordinator: alive, loaded (replayed its partition), groups."""
    from .coordinator_actors import coordinator_health

    return coordinator_health(client, count, names.group_coordinator, ("groups", "groups"), timeout_s)


def _txn_coordinator_health(client: ClusterClient, count: int) -> list[dict[str, Any]]:
    if not count:
        return []
    from .txn_coordinators import txn_coordinator_health

    return txn_coordinator_health(client, count)


def status(name: str = "kcoord", address: str | None = "auto", namespace: str = names.DEFAULT_NAMESPACE) -> dict:
    """A snapshot of cluster ``name``: brokers and controller metrics (``cluster``), every
    topic with its partitions (``topics``), the broker -> node binding (``placement``),
    the health of the controller, group and transaction coordinators (``coordinators``), the Ray nodes
    (``nodes``), the deployment record (``deploy``), the Kafka listeners (``listeners``)
    and ``warnings`` (a listener open to anyone). Raises ClusterNotFoundError."""
    from kcoord.client.admin import Admin

    client = ClusterClient(name, namespace=namespace, address=address)
    admin = Admin(client)
    cluster = admin.describe_cluster()
    topics = {t: admin.describe_topic(t) for t in admin.list_topics(internal=True)}
    try:
        placement = ray.get(client.controller.placement.remote(), timeout=10)
    except Exception:
        placement = {}
    coordinators = {
        "controller": {"name": names.controller(name), "alive": True, "epoch": cluster["controller_epoch"]},
        "groups": _coordinator_health(client, int(cluster.get("group_coordinators", 0))),
        "transactions": _txn_coordinator_health(client, int(deploy_info(name).get("transaction_coordinators", 0) or 0)),
    }
    nodes = [
        {"node_id": n["NodeID"], "address": n.get("NodeManagerAddress"), "alive": bool(n.get("Alive"))} for n in ray.nodes()
    ]
    try:
        from kcoord.kafka.addresses import listener_records

        from .listeners import exposure_warnings

        listeners = listener_records(name)
        exposure = exposure_warnings(listeners)
    except Exception:
        listeners, exposure = {}, []
    return {
        "cluster": cluster,
        "topics": topics,
        "placement": placement,
        "coordinators": coordinators,
        "nodes": nodes,
        "deploy": deploy_info(name),
        "bootstrap_servers": client.bootstrap_servers,
        # node -> {"host", "ports", "bind", "protocol", "authenticates"} of each Kafka listener
        "listeners": {node: {**rec, "ports": {str(b): p for b, p in rec["ports"].items()}} for node, rec in listeners.items()},
        "warnings": exposure,
    }
