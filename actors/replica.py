"""ReplicaActor: the Ray shell around one partition replica's state machine.

It owns the replica's log directory and does the I/O the core asks for: replies, Fetch and
OffsetsForLeaderEpoch calls to the leader, AlterPartition calls to the controller, and one
timer task. It is an asyncio actor so that long-poll fetches park as futures and never
block produce. Requests and responses are msgpack bytes (kcoord.protocol); malformed bytes
get an error response and the actor carries on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import shutil
import time
import traceback
import uuid
from pathlib import Path
from typing import Any, Callable

import ray

from kcoord.log import Log, LogConfig
from kcoord.log.hints import read_hinted
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import (
    AlterPartitionResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)
from kcoord.protocol.errors import DecodeError, ErrorCode
from kcoord.protocol.replication import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
)
from kcoord.replication.actions import Reply, SendAlterPartition, SendFetch, SendOffsetsForLeaderEpoch
from kcoord.replication.config import ReplicationConfig
from kcoord.replication.replica import Replica

from .calls import CallFailed, Handles
from .metrics import ReplicaMetricsExporter

logger = logging.getLogger("kcoord.replica")

_IDLE_WAKE_S = 1.0
_LOCK_WAIT_S = 30.0  # a predecessor process still exiting holds the log directory lock


def now_ms() -> int:
    return int(time.time() * 1000)


def replica_dir(data_dir: str, topic: str, partition: int, broker: int) -> Path:
    return Path(data_dir) / f"broker-{broker}" / f"{topic}-{partition}"


class ReplicaActor:
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
        log = Log(self.directory, LogConfig.from_topic_config(config), now_ms=self.started_ms, lock_wait_s=_LOCK_WAIT_S)
        report = log.recovery_report
        self.node_id = ray.get_runtime_context().get_node_id()
        self.replica = Replica(
            topic, partition, broker, log, ReplicationConfig.from_topic_config(config), self.started_ms, node_id=self.node_id
        )
        self.hinted_fetches = 0
        self._handles = Handles(namespace)
        self._controller = names.controller(cluster)
        self._tokens = itertools.count()
        self._waiters: dict[int, asyncio.Future] = {}
        self._wake: asyncio.Event | None = None
        self._timer: asyncio.Task | None = None
        self._scheduled_ms = 0
        self._closed = False
        self._exporter = ReplicaMetricsExporter(cluster, topic, partition, broker)
        # Start the timer loop now rather than on the first request (after a restart).
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
        r = self.replica if hasattr(self, "replica") else None
        prefix = (
            f"[{self.topic}-{self.partition} broker={self.broker} role={r.role} epoch={r.leader_epoch}] "
            if r is not None
            else f"[{self.topic}-{self.partition} broker={self.broker}] "
        )
        logger.log(level, prefix + fmt, *args)

    def _ensure_started(self) -> None:
        if self._timer is None:
            self._wake = asyncio.Event()
            self._timer = asyncio.get_running_loop().create_task(self._timer_loop())

    async def _timer_loop(self) -> None:
        assert self._wake is not None
        while not self._closed:
            deadline = self.replica.next_deadline()
            now = now_ms()
            delay = _IDLE_WAKE_S if deadline is None else min(_IDLE_WAKE_S, max(0.0, (deadline - now) / 1000))
            self._scheduled_ms = now + int(delay * 1000)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
            self._run(self.replica.tick, now_ms())
            if self._exporter.due(time.monotonic()):
                try:
                    self._exporter.export(self.replica, time.monotonic())
                except Exception:
                    self._log("metrics export failed:\n%s", traceback.format_exc(), level=logging.WARNING)

    def _run(self, fn: Callable[..., list], *args: Any) -> None:
        """Call the core and perform the actions it returns; a bug in the core must not
        take the actor down, so it is logged and the pending requests fail cleanly."""
        try:
            actions = fn(*args)
        except Exception:
            self._log("internal error:\n%s", traceback.format_exc(), level=logging.ERROR)
            return
        self._perform(actions)

    def _perform(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, Reply):
                fut = self._waiters.pop(action.token, None)
                if fut is not None and not fut.done():
                    fut.set_result(action.response.encode())
            elif isinstance(action, SendFetch):
                asyncio.get_running_loop().create_task(self._send_fetch(action))
            elif isinstance(action, SendOffsetsForLeaderEpoch):
                asyncio.get_running_loop().create_task(self._send_offsets_for_epoch(action))
            elif isinstance(action, SendAlterPartition):
                asyncio.get_running_loop().create_task(self._send_alter_partition(action))
        if self._wake is not None:
            deadline = self.replica.next_deadline()
            if deadline is not None and deadline < self._scheduled_ms:
                self._wake.set()

    async def _pending(self, fn: Callable[..., list], request: Message, error_type: type[Message]) -> bytes:
        self._ensure_started()
        token = next(self._tokens)
        fut = asyncio.get_running_loop().create_future()
        self._waiters[token] = fut
        try:
            actions = fn(request, token, now_ms())
        except Exception:
            self._waiters.pop(token, None)
            self._log("internal error:\n%s", traceback.format_exc(), level=logging.ERROR)
            return error_type(ErrorCode.UNKNOWN_SERVER_ERROR, "internal error in replica; see actor logs").encode()
        self._perform(actions)
        return await fut

    # -- client and replica APIs (msgpack bytes in, msgpack bytes out) ----------------------
    async def produce(self, data: bytes) -> bytes:
        try:
            req = ProduceRequest.decode(data)
        except DecodeError as exc:
            return ProduceResponse(int(exc.code), exc.message).encode()
        return await self._pending(self.replica.produce, req, ProduceResponse)

    async def fetch(self, data: bytes) -> bytes:
        try:
            req = FetchRequest.decode(data)
        except DecodeError as exc:
            return FetchResponse(int(exc.code), exc.message).encode()
        return await self._pending(self.replica.fetch, req, FetchResponse)

    async def list_offsets(self, data: bytes) -> bytes:
        try:
            req = ListOffsetsRequest.decode(data)
            return self.replica.list_offsets(req).encode()
        except DecodeError as exc:
            return ListOffsetsResponse(int(exc.code), exc.message).encode()

    async def offsets_for_leader_epoch(self, data: bytes) -> bytes:
        try:
            req = OffsetsForLeaderEpochRequest.decode(data)
            return self.replica.offsets_for_leader_epoch(req).encode()
        except DecodeError as exc:
            return OffsetsForLeaderEpochResponse(int(exc.code), exc.message).encode()

    async def leader_and_isr(self, data: bytes) -> bytes:
        self._ensure_started()
        try:
            req = LeaderAndIsrRequest.decode(data)
        except DecodeError as exc:
            return LeaderAndIsrResponse(int(exc.code), exc.message).encode()
        before = (self.replica.role, self.replica.leader_epoch, tuple(self.replica.isr))
        try:
            response, actions = self.replica.handle_leader_and_isr(req, now_ms())
        except Exception:
            self._log("internal error:\n%s", traceback.format_exc(), level=logging.ERROR)
            return LeaderAndIsrResponse(ErrorCode.UNKNOWN_SERVER_ERROR, "internal error; see actor logs").encode()
        after = (self.replica.role, self.replica.leader_epoch, tuple(self.replica.isr))
        if before != after:
            self._log("now %s (leader %d, ISR %s, LEO %d, HW %d)", self.replica.role, self.replica.leader, self.replica.isr, self.replica.log.log_end_offset, self.replica.hw)
        self._perform(actions)
        return response.encode()

    async def heartbeat(self, data: bytes) -> bytes:
        try:
            HeartbeatRequest.decode(data)
        except DecodeError as exc:
            return HeartbeatResponse(int(exc.code), exc.message).encode()
        return self.replica.status(self.incarnation).encode()

    # -- operations -----------------------------------------------------------------------
    async def describe(self) -> dict:
        """Everything about this replica, for Admin, tests and debugging."""
        status = self.replica.status(self.incarnation)
        log = self.replica.log
        fs = self.replica.follower_state
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
            "epochs": list(log.epoch_cache.entries),
            "incarnation": self.incarnation,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "directory": str(self.directory),
            "size_bytes": log.size_bytes,
            "metrics": dict(self.replica.metrics),
            "parked_fetches": self.replica.parked_fetches(),
            "hinted_fetches": self.hinted_fetches,
        }

    async def read_log(self, from_offset: int, max_bytes: int = 64 << 20) -> bytes:
        """Raw local log bytes regardless of role (tests compare replicas byte for byte)."""
        log = self.replica.log
        if from_offset >= log.log_end_offset:
            return b""
        return log.read(max(from_offset, log.log_start_offset), max_bytes)

    async def delete(self) -> bool:
        """Stop serving and remove this replica's data (topic deletion)."""
        self._closed = True
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_result(FetchResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic deleted").encode())
        self._waiters.clear()
        try:
            self.replica.log.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
        return True

    async def ready(self) -> str:
        self._ensure_started()
        return self.incarnation

    # -- outgoing calls -------------------------------------------------------------------
    async def _send_fetch(self, action: SendFetch) -> None:
        req = action.request
        name = names.replica(self.cluster, self.topic, self.partition, action.leader)
        response = None
        try:
            raw = await self._handles.call(name, "fetch", req.encode(), timeout=req.max_wait_ms / 1000 + 10)
            response = FetchResponse.decode(raw)
            if response.file_hint:
                data = read_hinted(response.file_hint, req.fetch_offset)
                if data is None:  # the leader's files moved under us: ask for the bytes
                    plain = dataclasses.replace(req, node_id="", max_wait_ms=0)
                    raw = await self._handles.call(name, "fetch", plain.encode(), timeout=10)
                    response = FetchResponse.decode(raw)
                else:
                    self.hinted_fetches += 1
                    response.records, response.file_hint = data, None
        except (CallFailed, DecodeError):
            response = None
        self._run(self.replica.on_fetch_response, req, response, now_ms())

    async def _send_offsets_for_epoch(self, action: SendOffsetsForLeaderEpoch) -> None:
        req = action.request
        name = names.replica(self.cluster, self.topic, self.partition, action.leader)
        response = None
        try:
            raw = await self._handles.call(name, "offsets_for_leader_epoch", req.encode(), timeout=10)
            response = OffsetsForLeaderEpochResponse.decode(raw)
        except (CallFailed, DecodeError):
            pass
        before = self.replica.log.log_end_offset
        self._run(self.replica.on_offsets_for_leader_epoch_response, req, response, now_ms())
        after = self.replica.log.log_end_offset
        if after < before:
            self._log("truncated log from %d to %d to match leader %d", before, after, action.leader, level=logging.WARNING)

    async def _send_alter_partition(self, action: SendAlterPartition) -> None:
        req = action.request
        response = None
        try:
            raw = await self._handles.call(self._controller, "alter_partition", req.encode(), timeout=10)
            response = AlterPartitionResponse.decode(raw)
        except (CallFailed, DecodeError):
            pass
        old = list(self.replica.isr)
        self._run(self.replica.on_alter_partition_response, req, response, now_ms())
        if self.replica.isr != old:
            self._log("ISR changed %s -> %s", old, self.replica.isr)
