"""Killing a cluster's named actors (``kcoord down``, stopping the Kafka listeners) and
waiting until their names are free again, so an actor started next under the same name is
a new one rather than the dying one found by name."""

from __future__ import annotations

import time
from typing import Iterable

GONE_WAIT_S = 30.0  # how long to wait for killed actors' names to be released


def kill_named(actor_names: Iterable[str], namespace: str) -> int:
    """Kill each named actor that exists, without restart; how many were killed."""
    import ray  # on use, as cluster.listeners imports it

    killed = 0
    for name in actor_names:
        try:
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
            killed += 1
        except ValueError:
            pass  # no such actor
    return killed


def named(actor_name: str, namespace: str) -> bool:
    """Whether Ray knows an actor by this name."""
    import ray

    try:
        ray.get_actor(actor_name, namespace=namespace)
        return True
    except ValueError:
        return False


def wait_gone(actor_names: Iterable[str], namespace: str, timeout_s: float = GONE_WAIT_S) -> None:
    """Until none of ``actor_names`` is known to Ray, at most ``timeout_s``."""
    actor_names = list(actor_names)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(named(n, namespace) for n in actor_names):
        time.sleep(0.05)
