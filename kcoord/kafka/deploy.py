"""Starting and stopping Kafka listeners is deployment: :mod:`kcoord.cluster.listeners`.
This module keeps the path it had before (``kcoord.kafka.deploy.restart_listeners``...)."""

from __future__ import annotations

from kcoord.cluster.listeners import (
    DEFAULT_KAFKA_PORT,
    bootstrap_servers,
    exposure_warnings,
    listener_actor_names,
    listener_name,
    listener_options,
    listener_stats,
    restart_listeners,
    start_listeners,
    stop_listeners,
)

__all__ = [
    "DEFAULT_KAFKA_PORT",
    "bootstrap_servers",
    "exposure_warnings",
    "listener_actor_names",
    "listener_name",
    "listener_options",
    "listener_stats",
    "restart_listeners",
    "start_listeners",
    "stop_listeners",
]
