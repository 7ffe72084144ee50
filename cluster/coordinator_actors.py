"""Starting a kind of coordinator actor (one per partition of its internal topic) and asking
each how it is: what the group and the transaction coordinators share in deployment."""

from __future__ import annotations

from typing import Any, Callable

import ray

from kcoord.client.cluster import ClusterClient

# Detached and restarted by Ray forever; a coordinator serves many calls at once (async).
COORDINATOR_OPTIONS: dict[str, Any] = dict(
    lifetime="detached", num_cpus=0, max_restarts=-1, max_task_retries=0, max_concurrency=10_000
)


def start_coordinators(
    client: ClusterClient,
    count: int,
    actor_name: Callable[[str, int], str],
    remote_cls: Any,
    args_of: Callable[[int], tuple],
    timeout_s: float,
) -> list[Any]:
    """Coordinator ``i`` for each ``i < count``, named ``actor_name(cluster, i)`` and created
    with ``args_of(i)`` unless it exists (or another process created it meanwhile); then wait
    until each has loaded its partition."""
    handles = []
    for i in range(count):
        name = actor_name(client.name, i)
        try:
            handles.append(ray.get_actor(name, namespace=client.namespace))
            continue
        except ValueError:
            pass
        try:
            handle = remote_cls.options(name=name, namespace=client.namespace, **COORDINATOR_OPTIONS).remote(*args_of(i))
        except ValueError:  # created concurrently
            handle = ray.get_actor(name, namespace=client.namespace)
        handles.append(handle)
    ray.get([h.ready.remote() for h in handles], timeout=timeout_s)
    return handles


def coordinator_health(
    client: ClusterClient,
    count: int,
    actor_name: Callable[[str, int], str],
    held: tuple[str, str],
    timeout_s: float = 5.0,
) -> list[dict[str, Any]]:
    """Ping every coordinator: alive, loaded (replayed its partition), pid, and how many
    things it holds: ``held`` = (the entry's key, the key of ``describe()``'s dict to count)."""
    entry_key, described_key = held
    refs = {}
    for i in range(count):
        try:
            refs[i] = ray.get_actor(actor_name(client.name, i), namespace=client.namespace).describe.remote()
        except ValueError:
            pass
    out: list[dict[str, Any]] = []
    for i in range(count):
        entry: dict[str, Any] = {"index": i, "name": actor_name(client.name, i), "alive": False, "loaded": False, entry_key: 0}
        if i in refs:
            try:
                d = ray.get(refs[i], timeout=timeout_s)
                entry.update(alive=True, loaded=bool(d.get("loaded")), pid=d.get("pid"))
                entry[entry_key] = len(d.get(described_key, {}))
            except Exception as exc:
                entry["error"] = type(exc).__name__
        out.append(entry)
    return out
