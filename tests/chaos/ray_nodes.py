"""The chaos run's Ray cluster: a head and two worker raylets on this machine
(``ray.cluster_utils.Cluster``), so that brokers bound one per node put the replicas of every
partition on three nodes and a node can be lost."""

from __future__ import annotations

import os
import sys

from tests.chaos.settings import NAMESPACE, RAY_ENV, log
from tests.local_nodes import EXIT_RAY_STARTUP, WORKER_ARGS, add_nodes


def start_ray():
    """Start the three nodes and connect this process to them; exits with
    :data:`EXIT_RAY_STARTUP` if a node's startup timed out."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.update(RAY_ENV)
    rc = Cluster(initialize_head=False, shutdown_at_exit=True)
    try:
        nodes = add_nodes(rc, workers=2)
    except BaseException:
        rc.shutdown()
        raise
    if nodes is None:
        rc.shutdown()
        log("Ray node startup timed out")
        sys.exit(EXIT_RAY_STARTUP)
    ray.init(address=rc.address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
    _quiet_raylet_messages()
    rc.wait_for_nodes()
    return rc


def _quiet_raylet_messages() -> None:
    """A Ray driver prints every worker death and node loss the raylets report (to stdout,
    ~1 KB each): hundreds in a chaos run, which kills on purpose and logs each fault
    itself. Drop those; anything else Ray prints still goes through."""
    try:
        import ray._private.worker as ray_worker

        original = ray_worker.print_to_stdstream

        def print_to_stdstream(data, ignore_prefix: bool, *args, **kwargs):
            if data.get("pid") == "raylet":
                return None
            return original(data, ignore_prefix, *args, **kwargs)

        ray_worker.print_to_stdstream = print_to_stdstream
    except Exception:  # noqa: BLE001 - another Ray version: noisier output, nothing else
        pass


__all__ = ["EXIT_RAY_STARTUP", "WORKER_ARGS", "start_ray"]
