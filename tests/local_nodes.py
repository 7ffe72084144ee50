"""Several Ray raylets on this machine standing in for a multi-node cluster
(``ray.cluster_utils.Cluster``): the node settings and the startup that the multi-node
scenario and the chaos run share."""

from __future__ import annotations

from typing import Any

#: Exit status of a run whose Ray nodes did not start in time (Ray waits a fixed 30 s for a
#: raylet to register, which a saturated 2-core machine can miss): its test runs it again.
EXIT_RAY_STARTUP = 75
HEAD_ARGS = {
    "num_cpus": 1,
    "include_dashboard": False,
    # Notice a removed node within ~10 s instead of Ray's default ~30 s, yet not declare a
    # merely slow raylet on a saturated 2-core machine dead.
    "_system_config": {
        "health_check_period_ms": 1000,
        "health_check_timeout_ms": 2000,
        "health_check_failure_threshold": 8,
        "health_check_initial_delay_ms": 0,
    },
}
WORKER_ARGS = {"num_cpus": 1}


def add_nodes(rc: Any, workers: int = 2) -> list[Any] | None:
    """Add a head and ``workers`` worker nodes to the Cluster ``rc``; returns the worker
    nodes, or None if a node's startup timed out (see :data:`EXIT_RAY_STARTUP`)."""
    try:
        rc.add_node(**HEAD_ARGS)
        return [rc.add_node(**WORKER_ARGS) for _ in range(workers)]
    except Exception as exc:
        if "timed out during startup" in str(exc):
            return None
        raise
