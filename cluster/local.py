"""The embedded default: a kcoord cluster on a local Ray instance, for scripts and tests.

``with kcoord.local_cluster(brokers=3) as cluster:`` starts Ray on this machine if this
process is not connected to one yet, deploys a cluster with a unique name and a temporary
data directory, and removes both on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from typing import Iterator

import ray

from kcoord.client.cluster import ClusterClient
from kcoord.protocol import names

from .deploy import deploy, teardown

# Ray settings that matter for a log made of many small actors on a small machine. They
# apply to the Ray instance local_cluster starts (its processes inherit them) and only
# where the user has not set them; the user's process environment is restored afterwards.
LOCAL_RAY_ENV = {
    # Start worker processes for many actors at once instead of num_cpus at a time.
    "RAY_worker_maximum_startup_concurrency": "8",
    # Per-task event reporting costs ~30% of a small actor call; kcoord does not need it.
    "RAY_task_events_report_interval_ms": "0",
    # Ray runs worker processes at nice 15 so that drivers stay responsive. kcoord's
    # replicas, controller and listener are servers: at nice 15 any busy client process
    # on the node takes the CPU from them, acknowledgements wait, and on a small machine
    # they miss heartbeats. They run at the clients' priority.
    "RAY_worker_niceness": "0",
}


# Ray's token authentication is left to Ray and the user: kcoord does not turn it off.
# Ray 2.60 turns it on for a new local Ray (using ~/.ray/auth_token, made if missing)
# unless RAY_AUTH_MODE=disabled; whoever reaches Ray's ports otherwise could call kcoord's
# actors directly, past the Kafka listener's SASL and ACLs (docs/security.md).


def start_local_ray(num_cpus: int | None = None, **kwargs) -> bool:
    """Start a private local Ray instance tuned for kcoord (:data:`LOCAL_RAY_ENV`, no
    dashboard unless ``include_dashboard=True``), with Ray's token authentication as Ray
    and the environment decide (``RAY_AUTH_MODE``). Returns False if already connected: a
    Ray the user started is used as it is. The driver stays in Ray's anonymous namespace."""
    if ray.is_initialized():
        return False
    with _scoped_env(LOCAL_RAY_ENV):
        _init_local(num_cpus, kwargs)
    return True


@contextlib.contextmanager
def _scoped_env(settings: dict[str, str]) -> Iterator[None]:
    """``settings`` in os.environ (where unset) while Ray's processes start, then the
    process environment as it was."""
    added = [k for k in settings if k not in os.environ]
    for key in added:
        os.environ[key] = settings[key]
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def _init_local(num_cpus: int | None, kwargs: dict) -> None:
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("logging_level", "WARNING")
    kwargs.setdefault("log_to_driver", False)
    # "local" always starts a private instance, even when `ray start` runs on this machine.
    kwargs.setdefault("address", "local")
    for attempt in range(3):
        try:
            ray.init(num_cpus=num_cpus, **kwargs)
            break
        except Exception as exc:
            # Ray gives its raylet a fixed 30 s to register; on an overloaded machine it can
            # miss that. Start again rather than fail.
            if "timed out during startup" not in str(exc) or attempt == 2:
                raise
            ray.shutdown()


@contextlib.contextmanager
def local_cluster(
    brokers: int = 3,
    name: str | None = None,
    group_coordinators: int = 1,
    data_dir: str | os.PathLike | None = None,
    controller_config: dict | None = None,
    default_topic_config: dict[str, str] | None = None,
    broker_config: dict | None = None,
    namespace: str = names.DEFAULT_NAMESPACE,
    ray_init: dict | None = None,
    kafka_port: int | None = None,
    kafka_security: dict | None = None,
    kafka_options: dict | None = None,
) -> Iterator[ClusterClient]:
    """Run a kcoord cluster for the duration of a ``with`` block.

    ``kafka_port``: also start the Kafka listener on loopback at that port (0: a free one);
    ``cluster.bootstrap_servers`` is then the address to give any Kafka client.
    ``kafka_security``: TLS, SASL and ACLs on it (``{"protocol": "SASL_SSL", "users":
    {...}, "super_users": [...], "certfile": ...}``; see :mod:`kcoord.security.config`);
    ``kafka_options``: Kafka's listener settings (``connections.max.idle.ms``, ...).
    ``broker_config``: cluster-wide Kafka broker configs, as for :func:`deploy`
    (e.g. ``{"log.retention.check.interval.ms": 1000}``)."""
    started = start_local_ray(**(ray_init or {}))
    name = name or f"local-{uuid.uuid4().hex[:8]}"
    tmp = None
    if data_dir is None:
        tmp = tempfile.mkdtemp(prefix=f"kcoord-{name}-")
        data_dir = tmp
    try:
        client = deploy(
            name,
            brokers=brokers,
            data_dir=data_dir,
            group_coordinators=group_coordinators,
            address=None,
            namespace=namespace,
            controller_config=controller_config,
            default_topic_config=default_topic_config,
            broker_config=broker_config,
            kafka_port=kafka_port,
            kafka_local=True,
            kafka_options=kafka_options,
            kafka_security=kafka_security,
        )
        yield client
    finally:
        try:
            teardown(name, delete_data=True, address=None, namespace=namespace, data_dir=data_dir)
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if started:
                ray.shutdown()
