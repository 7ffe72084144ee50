"""Deploy a kcoord cluster onto a Ray cluster, inspect it, tear it down.

A deployment is a FailoverCoordinator (and, with consumer groups, GroupCoordinatorActors),
all named ``"{cluster}/..."`` in one Ray namespace; replica actors are created per topic by
the controller. Deployed actors are detached by default so the cluster outlives the script
that created it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import ray

from kcoord.client.cluster import ClusterClient, ClusterNotFoundError, ensure_ray
from kcoord.protocol import names

DEFAULT_DATA_ROOT = Path(os.environ.get("KCOORD_DATA_DIR", Path(tempfile.gettempdir()) / "kcoord-data"))


class ClusterExistsError(RuntimeError):
    """A cluster of that name is already running."""


def _controller_exists(name: str, namespace: str) -> bool:
    try:
        ray.get_actor(names.controller(name), namespace=namespace)
        return True
    except ValueError:
        return False


def broker_placement(brokers: int) -> dict[int, str]:
    """Bind broker ids to distinct alive Ray nodes when there are enough of them, so the
    replicas of a partition (always on distinct brokers) land on distinct nodes. On a
    single machine brokers are logical and no binding is made."""
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
    if len(nodes) < 2:
        return {}
    return {b: nodes[b % len(nodes)] for b in range(brokers)}


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
    timeout_s: float = 120.0,
) -> ClusterClient:
    """Create cluster ``name`` on the Ray cluster at ``address`` and return a client.

    Refuses (``ClusterExistsError``) if a cluster of that name is already running.
    """
    if brokers < 1:
        raise ValueError(f"brokers must be >= 1, got {brokers}")
    if group_coordinators < 0:
        raise ValueError(f"group_coordinators must be >= 0, got {group_coordinators}")
    ensure_ray(address, namespace)
    if _controller_exists(name, namespace):
        raise ClusterExistsError(
            f"a kcoord cluster named {name!r} is already running in namespace {namespace!r}; "
            f"connect to it with kcoord.connect({name!r}) or remove it with `kcoord down --name {name}`"
        )
    data_path = Path(data_dir) if data_dir is not None else DEFAULT_DATA_ROOT / name
    data_path.mkdir(parents=True, exist_ok=True)
    cfg = dict(controller_config or {})
    if default_topic_config:
        cfg["default_topic_config"] = {str(k): str(v) for k, v in default_topic_config.items()}

    from actors.controller import FailoverCoordinator

    options: dict[str, Any] = dict(
        name=names.controller(name),
        namespace=namespace,
        num_cpus=0,
        max_restarts=-1,
        max_task_retries=0,
        max_concurrency=10_000,
        # Always detached: the cluster must outlive the script that deployed it, and a
        # non-detached actor dies with its owner (taking the replicas it owns with it).
        lifetime="detached",
    )
    controller = ray.remote(FailoverCoordinator).options(**options).remote(
        name,
        list(range(brokers)),
        str(data_path),
        namespace,
        store,
        cfg,
        group_coordinators,
        broker_placement(brokers),
    )
    ray.get(controller.ready.remote(), timeout=timeout_s)
    client = ClusterClient(name, namespace=namespace, address=address)
    if group_coordinators:
        _deploy_group_coordinators(client, group_coordinators, str(data_path), timeout_s)
    return client


def _deploy_group_coordinators(client: ClusterClient, count: int, data_dir: str, timeout_s: float) -> None:
    try:
        from actors.group_coordinator import deploy_group_coordinators
    except ImportError:  # consumer groups not available in this build
        return
    deploy_group_coordinators(client, count, data_dir, timeout_s)


def _cluster_actor_names(name: str, namespace: str) -> list[str]:
    """Every actor of cluster ``name``: from the controller's view plus the fixed ones."""
    found: list[str] = []
    try:
        controller = ray.get_actor(names.controller(name), namespace=namespace)
        found += list(ray.get(controller.replica_health.remote(), timeout=30))
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


def teardown(
    name: str = "kcoord",
    delete_data: bool = False,
    address: str | None = "auto",
    namespace: str = names.DEFAULT_NAMESPACE,
    data_dir: str | os.PathLike | None = None,
) -> int:
    """Kill every actor of cluster ``name``; with ``delete_data`` also remove its data
    directory and stored metadata. Returns the number of actors killed."""
    ensure_ray(address, namespace)
    killed = 0
    actor_names = _cluster_actor_names(name, namespace)
    # The controller goes first so it does not recreate what we kill next.
    ordered = sorted(actor_names, key=lambda n: n != names.controller(name))
    for actor_name in ordered:
        try:
            ray.kill(ray.get_actor(actor_name, namespace=namespace), no_restart=True)
            killed += 1
        except ValueError:
            pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(n, namespace) for n in ordered):
        time.sleep(0.05)
    if delete_data:
        from actors.gcs_store import GcsStore

        GcsStore(namespace=f"kcoord/{name}").clear()
        path = Path(data_dir) if data_dir is not None else DEFAULT_DATA_ROOT / name
        shutil.rmtree(path, ignore_errors=True)
    return killed


def _alive(actor_name: str, namespace: str) -> bool:
    try:
        ray.get_actor(actor_name, namespace=namespace)
        return True
    except ValueError:
        return False


def status(name: str = "kcoord", address: str | None = "auto", namespace: str = names.DEFAULT_NAMESPACE) -> dict:
    """A snapshot of cluster ``name``: brokers, controller metrics, topics and partitions."""
    from kcoord.client.admin import Admin

    try:
        client = ClusterClient(name, namespace=namespace, address=address)
    except ClusterNotFoundError:
        raise
    admin = Admin(client)
    cluster = admin.describe_cluster()
    topics = {t: admin.describe_topic(t) for t in admin.list_topics(internal=True)}
    return {"cluster": cluster, "topics": topics}
