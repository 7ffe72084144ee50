"""ReplicaActor: the Ray shell around one partition replica's driver.

It owns the replica's log directory and hands everything else to
:class:`~kcoord.replication.replica_driver.ReplicaDriver` (the same driver the simulation
runs): the shell only decodes msgpack requests, awaits the driver's reply, and exports
metrics. It is an asyncio actor so that long-poll fetches park as futures and never block
produce. Malformed bytes get an error response and the actor carries on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import ray

from kcoord import channel
from kcoord.log import Log, LogConfig
from kcoord.log.hints import read_hinted
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.services import REPLICA
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.replica import Replica
from kcoord.replication.replica_driver import ReplicaDriver
from kcoord.records import warm_up_codecs

# Import the record codecs now, at process start, not inside the first produce or fetch
# that needs one: an import runs on the actor's event loop, and a first burst of Kafka
# batches on a new topic made every new leader import aiokafka at once on a busy machine,
# long enough to miss the controller's heartbeats.
warm_up_codecs()

from .metrics import ReplicaMetricsExporter
from .runtime import AsyncioClock, RayTransport, rpc_methods, serve_encoded, wall_ms

logger = logging.getLogger("kcoord.replica")

_LOCK_WAIT_S = 30.0  # a predecessor process still exiting holds the log directory lock


def now_ms() -> int:
    return wall_ms()


def replica_dir(data_dir: str, topic: str, partition: int, broker: int) -> Path:
    return Path(data_dir) / f"broker-{broker}" / f"{topic}-{partition}"


@rpc_methods(REPLICA)
class ReplicaActor:
    """Its RPC methods (produce, fetch, ... heartbeat) are ``REPLICA``'s table."""

    def __init__(
        self,
        cluster: str,
        topic: str,
        partition: int,
        broker: int,
        data_dir: str,
        config: dict[str, str],
        namespace: str = names.DEFAULT_NAMESPACE,
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.broker = broker
        self.namespace = namespace
        self.directory = replica_dir(data_dir, topic, partition, broker)
        self.incarnation = uuid.uuid4().hex
        self.started_ms = now_ms()
        # A restart can begin before the previous process of this replica has exited and
        # dropped its lock on the directory; wait for that rather than fail the restart.
        # ``config`` is the one this actor was created with, which Ray passes again when it
        # restarts the actor, however old: the core runs it as of unknown version (no
        # retention or cleaning, no trust in its flush setting) until the controller's
        # first LeaderAndIsr -- sent to every process it sees restarted, and before any
        # role -- carries the current one (Replica.config_known).
        log = Log(self.directory, LogConfig.from_topic_config(config), now_ms=self.started_ms, lock_wait_s=_LOCK_WAIT_S)
        report = log.recovery_report
        self.node_id = ray.get_runtime_context().get_node_id()
        self.replica = Replica(
            topic,
            partition,
            broker,
            log,
            ReplicationConfig.from_topic_config(config),
            self.started_ms,
            node_id=self.node_id,
            incarnation=self.incarnation,
            storage=storage_lineage(self.node_id),
        )
        self.driver: ReplicaDriver | None = None
        self._channel: asyncio.Future | None = None  # -> ChannelServer | None (kcoord.channel)
        self._direct: channel.DirectCalls | None = None  # our calls to other replicas' channels
        self._exporter = ReplicaMetricsExporter(cluster, topic, partition, broker)
        # Start the timer now rather than on the first request (after a restart).
        ray.get_runtime_context().current_actor.ready.remote()
        self._log(
            "opened log at %s: LEO %d, log start %d, HW %d%s",
            self.directory,
            log.log_end_offset,
            log.log_start_offset,
            log.high_watermark,
            f"; recovery cut {report.truncated_bytes} bytes ({report.reason})" if getattr(report, "truncated_bytes", 0) else "",
        )

    # -- plumbing -------------------------------------------------------------------------
    def _log(self, fmt: str, *args: Any, level: int = logging.INFO) -> None:
        r = self.replica
        prefix = f"[{self.topic}-{self.partition} broker={self.broker} role={r.role} epoch={r.leader_epoch}] "
        logger.log(level, prefix + fmt, *args)

    def _ensure_started(self) -> ReplicaDriver:
        if self.driver is None:
            loop = asyncio.get_running_loop()
            self._direct = channel.DirectCalls(self.node_id) if channel.enabled() else None
            self.driver = ReplicaDriver(
                self.replica,
                cluster=self.cluster,
                transport=RayTransport(self.namespace, loop, direct=self._direct),
                clock=AsyncioClock(loop),
                read_hint=read_hinted,
                trace=lambda message: self._log("%s", message),
                after_step=self._export_metrics,
            )
            self.driver.start()
        return self.driver

    def _export_metrics(self, _now_ms: int) -> None:
        now = time.monotonic()
        if self.replica.role != "offline" and self._exporter.due(now):
            try:
                self._exporter.export(self.replica, now)
            except Exception:
                self._log("metrics export failed:\n%s", traceback.format_exc(), level=logging.WARNING)

    async def _serve(self, data: bytes, request_type: type[Message]) -> bytes:
        """Every RPC method: msgpack bytes of the request in, of the response out."""
        return (await serve_encoded(data, request_type, lambda req, reply: self._ensure_started().serve(req, reply))).encode()

    async def channel(self) -> list[str] | None:
        """This process's endpoint for direct calls from its own node (``kcoord.channel``:
        produce, fetch, list_offsets, offsets_for_leader_epoch, heartbeat), or None when
        channels are off. Started on first use, once."""
        if self._channel is None:
            self._channel = asyncio.ensure_future(self._start_channel())
        server = await asyncio.shield(self._channel)
        return server.endpoint.to_wire() if server is not None else None

    async def _start_channel(self) -> channel.ChannelServer | None:
        if not channel.enabled():
            return None
        server = channel.ChannelServer(self._direct_call, self.node_id)
        try:
            await server.start()
        except OSError:
            self._log("no direct-call channel (calls go through Ray):\n%s", traceback.format_exc(), level=logging.WARNING)
            return None
        return server

    async def _direct_call(self, method: str, data: bytes) -> bytes:
        return await getattr(self, method)(data)

    # -- operations -----------------------------------------------------------------------
    async def describe(self) -> dict:
        """Everything about this replica, for Admin, tests and debugging."""
        driver = self._ensure_started()
        r = self.replica
        status = r.status()
        log = r.log
        fs = r.follower_state
        offline = r.role == "offline"
        return {
            "topic": self.topic,
            "partition": self.partition,
            "broker": self.broker,
            "role": status.role,
            "leader": status.leader,
            "leader_epoch": status.leader_epoch,
            "partition_epoch": status.partition_epoch,
            "isr": status.isr,
            "log_start_offset": status.log_start_offset,
            "log_end_offset": status.log_end_offset,
            "high_watermark": status.high_watermark,
            "follower_leo": status.follower_leo,
            "lag": (fs.leader_log_end_offset - log.log_end_offset) if fs and fs.leader_log_end_offset >= 0 else 0,
            "epochs": [] if offline else list(log.epoch_cache.entries),
            "offline_reason": r.offline_reason,
            "config_version": r.config_version,
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "node_id": self.node_id,
            "directory": str(self.directory),
            "directory_id": log.directory_id,
            "size_bytes": 0 if offline else log.size_bytes,
            "metrics": dict(r.metrics),
            "parked_fetches": r.parked_fetches(),
            "hinted_fetches": driver.hinted_fetches,
            # Direct calls (kcoord.channel): answered by this process, and made by it.
            "direct_calls_served": self._channel.result().served if self._channel is not None and self._channel.done() and self._channel.result() is not None else 0,
            "direct_calls_made": self._direct.calls if self._direct is not None else 0,
            "pending_requests": driver.pending_requests,
        }

    async def read_log(self, from_offset: int, max_bytes: int = 64 << 20) -> bytes:
        """Raw local log bytes regardless of role (tests compare replicas byte for byte)."""
        log = self.replica.log
        if from_offset >= log.log_end_offset:
            return b""
        return log.read(max(from_offset, log.log_start_offset), max_bytes)

    async def delete(self) -> bool:
        """Stop serving and remove this replica's data (topic deletion)."""
        driver = self._ensure_started()
        if self._channel is not None and self._channel.done() and self._channel.result() is not None:
            self._channel.result().close()
        try:
            driver.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
        return True

    async def ready(self) -> str:
        self._ensure_started()
        return self.incarnation


def storage_lineage(node_id: str) -> str:
    """Which page cache this process's log writes live in: the machine's boot and the Ray
    node. A replica process that dies and restarts under both unchanged finds every byte
    it had written (os.write is not undone by SIGKILL); a reboot or another node may have
    dropped what was not fsynced. Without a boot id (not Linux) every restart counts as a
    possible loss."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        return ""
    return f"{boot}/{node_id}" if boot and node_id else ""
