"""The chaos run's Ray cluster: a head and two worker raylets on this machine
(``ray.cluster_utils.Cluster``), so that brokers bound one per node put the replicas of every
partition on three nodes and a node can be lost."""

from __future__ import annotations

import os
import sys

from tests.chaos.settings import NAMESPACE, RAY_ENV, log

#: The exit status of a run whose Ray nodes did not start (the test retries it once).
EXIT_RAY_STARTUP = 75
HEAD_ARGS = {
    "num_cpus": 1,
    "include_dashboard": False,
    # Notice a removed node within ~10 s, yet not declare a merely slow raylet on a
    # saturated 2-core machine dead (as tests/integration/multinode_scenario.py).
    "_system_config": {
        "health_check_period_ms": 1000,
        "health_check_timeout_ms": 2000,
        "health_check_failure_threshold": 8,
        "health_check_initial_delay_ms": 0,
    },
}
WORKER_ARGS = {"num_cpus": 1}


def start_ray():
    """Start the three nodes and connect this process to them; exits with
    :data:`EXIT_RAY_STARTUP` if a node's startup timed out."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.update(RAY_ENV)
    rc = Cluster(initialize_head=False, shutdown_at_exit=True)
    try:
        rc.add_node(**HEAD_ARGS)
        for _ in range(2):
            rc.add_node(**WORKER_ARGS)
    except Exception as exc:
        rc.shutdown()
        if "timed out during startup" in str(exc):
            log(f"Ray node startup timed out: {exc}")
            sys.exit(EXIT_RAY_STARTUP)
        raise
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
