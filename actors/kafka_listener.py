"""KafkaListener: the Ray actor shell around one node's Kafka listener.

One per Ray node, pinned to it, restartable, with no state of its own: on (re)start it
binds its port (the one it had before, when it was started with port 0), records
``host:port`` in the cluster's GCS key/value store (Metadata answers place brokers at the
listener of their node from there) and serves until killed. With ``kafka_security``
(``options["security"]``) it serves TLS and/or SASL and checks ACLs, polling the
controller's credentials and ACLs (:mod:`kcoord.kafka.listener_security`).

Running clusters' listeners were created from ``kcoord.kafka.actor.KafkaListener`` (Ray
keeps that reference to restart them): that path re-exports this class.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kcoord.kafka import addresses, routing
from kcoord.kafka.handlers import ListenerContext, build_apis
from kcoord.kafka.handlers.data import STATS
from kcoord.kafka.listener_security import from_listener_options
from kcoord.kafka.server import DEFAULT_MAX_FRAME_BYTES, KafkaServer

logger = logging.getLogger("kcoord.kafka")


class KafkaListener:
    def __init__(
        self,
        cluster: str,
        namespace: str,
        bind_host: str = "127.0.0.1",
        port: int = 0,
        advertised_host: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        import ray

        self.cluster = cluster
        self.namespace = namespace
        self.bind_host = bind_host
        self.port = port
        self.advertised_host = advertised_host or bind_host
        self.options = dict(options or {})
        self.node_id = ray.get_runtime_context().get_node_id()
        self._server: KafkaServer | None = None
        self._security = None  # kcoord.kafka.listener_security.ListenerSecurity with kafka_security
        self._address = ""
        self._binding: asyncio.Future[str] | None = None
        # Bind now, not on the first call: after a Ray restart nobody may call us.
        ray.get_runtime_context().current_actor.start.remote()

    async def start(self) -> str:
        """Bind and serve; returns the advertised bootstrap ``host:port``.

        Safe to call concurrently (the constructor calls it, and so do deployers): one bind
        runs and every caller gets its outcome. A failed bind leaves nothing bound, so the
        next call tries again."""
        if self._server is not None:
            return self._address
        if self._binding is None:
            self._binding = asyncio.ensure_future(self._bind())
        binding = self._binding
        try:
            return await asyncio.shield(binding)
        except BaseException:
            if binding.done() and self._binding is binding:
                self._binding = None  # failed: the next caller binds afresh
            raise

    async def _bind(self) -> str:
        backend = routing.Backend(self.cluster, self.namespace, node_id=self.node_id)
        info = await backend.describe_cluster()
        brokers = sorted(info.brokers) or [0]
        # One port per broker id: `port`, port+1, ... (0: free ports). A restart keeps the
        # ports clients already know.
        before = addresses.recorded_listener(self.cluster, self.node_id)
        if before and self.port == 0:
            endpoints = {b: before["ports"].get(b, 0) for b in brokers}
        else:
            endpoints = {b: (self.port + i if self.port else 0) for i, b in enumerate(brokers)}
        security, limits = from_listener_options(self.options, backend)
        ctx = ListenerContext(
            backend=backend,
            host=self.advertised_host,
            node_id=self.node_id,
            cluster_id=f"kcoord-{self.cluster}",
            auto_create_topics=bool(self.options.get("auto_create_topics", True)),
            default_partitions=int(self.options.get("num_partitions", 1)),
            default_replication_factor=int(self.options.get("default_replication_factor", 3)),
            listeners=backend.listeners,
            security=security,
        )
        max_frame = int(self.options.get("max_frame_bytes", DEFAULT_MAX_FRAME_BYTES))
        server = KafkaServer(build_apis(ctx), self.bind_host, endpoints, max_frame_bytes=max_frame, security=security, limits=limits)
        try:
            ports = await server.start()
        except OSError:
            if not before or self.port != 0:
                raise
            # the old ports are taken now: take free ones
            server = KafkaServer(server.apis, self.bind_host, {b: 0 for b in brokers}, max_frame_bytes=max_frame, security=security, limits=limits)
            ports = await server.start()
        protocol = security.config.protocol if security is not None else "PLAINTEXT"
        authenticates = security is not None and security.config.authenticates
        try:
            ctx.ports = dict(ports)
            addresses.record_listener(self.cluster, self.node_id, self.advertised_host, ports, bind=self.bind_host, protocol=protocol, authenticates=authenticates)
        except BaseException:
            await server.close()
            raise
        if security is not None:
            security.start()  # polls the controller's credentials and ACLs
            self._security = security
        self._server = server
        self._address = f"{self.advertised_host}:{ports[min(ports)]}"
        logger.info("[kafka] cluster %r: listening on %s ports %s (broker -> port), advertised as %s, %s", self.cluster, self.bind_host, ports, self.advertised_host, protocol)
        return self._address

    async def address(self) -> str:
        return await self.start()

    async def stats(self) -> dict[str, Any]:
        await self.start()
        assert self._server is not None
        security = self._security.stats if self._security is not None else {}
        return {"address": self._address, "node_id": self.node_id, **self._server.stats, **security, **STATS, **routing.CALL_STATS}

    async def pid(self) -> int:
        import os

        return os.getpid()
