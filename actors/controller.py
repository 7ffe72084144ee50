"""FailoverCoordinator: the Ray shell around the controller state machine.

One per cluster, a named, restartable (and, when deployed, detached) asyncio actor. It
executes the core's actions in order -- metadata-store writes first, synchronously, then
actor creation and LeaderAndIsr / heartbeat calls as concurrent tasks -- and feeds every
outcome back to the core. On (re)start it reloads the store and resumes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    HeartbeatResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderAndIsrResponse,
    MetadataRequest,
    MetadataResponse,
)
from kcoord.protocol.errors import DecodeError, ErrorCode
from kcoord.replication.controller import (
    ControllerConfig,
    ControllerState,
    CreateReplica,
    DeleteReplica,
    Persist,
    ReplicaId,
    SendHeartbeat,
    SendLeaderAndIsr,
)
from kcoord.replication.metadata import PartitionState
from kcoord.client.liveness import actor_state
from kcoord.replication.metastore import FileStore, MemoryStore

from cluster.placement import ReplicaPlacement

from .calls import DEAD, CallFailed, Handles
from .metrics import ControllerMetricsExporter
from .replica import ReplicaActor

logger = logging.getLogger("kcoord.controller")

RemoteReplica = ray.remote(ReplicaActor)


def now_ms() -> int:
    return int(time.time() * 1000)


def make_store(spec: str, cluster: str) -> Any:
    """``"gcs"`` (Ray's GCS key/value store), ``"memory"`` or a directory path."""
    if spec == "gcs":
        from .gcs_store import GcsStore

        return GcsStore.for_cluster(cluster)
    if spec == "memory":
        return MemoryStore()
    return FileStore(spec)


class FailoverCoordinator:
    def __init__(
        self,
        cluster: str,
        brokers: list[int],
        data_dir: str,
        namespace: str = names.DEFAULT_NAMESPACE,
        store: str = "gcs",
        controller_config: dict | None = None,
        group_coordinators: int = 0,
        placement: dict[int, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.brokers = sorted(brokers)
        self.data_dir = data_dir
        self.namespace = namespace
        self.group_coordinators = group_coordinators
        self.store = make_store(store, cluster)
        # Broker -> node binding; re-binds brokers whose node died (cluster/placement.py).
        self._placement = ReplicaPlacement(placement, self.store.put)
        self.core = ControllerState(cluster, ControllerConfig(**(controller_config or {})))
        self._handles = Handles(namespace)
        self._boot: asyncio.Task | None = None
        self._ticker: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._exporter = ControllerMetricsExporter(cluster)
        self._tasks: set[asyncio.Task] = set()
        self._logged: dict[tuple[str, int], tuple] = {}
        # Boot now, not on the first request: after a Ray restart nobody may call us for a
        # while, yet failure detection must resume at once.
        ray.get_runtime_context().current_actor.ready.remote()

    # -- lifecycle ------------------------------------------------------------------------
    async def _started(self) -> None:
        if self._boot is None:
            self._boot = asyncio.get_running_loop().create_task(self._do_boot())
        await asyncio.shield(self._boot)

    async def _do_boot(self) -> None:
        stored = {k: v for k in self.store.keys() if (v := self.store.get(k)) is not None}
        self._placement.load(stored)
        actions = self.core.start(stored, self.brokers, self.group_coordinators, now_ms())
        logger.info(
            "controller for %r started at epoch %d with %d topics", self.cluster, self.core.controller_epoch, len(self.core.topics)
        )
        await self._execute(actions, wait=False)
        self._wake = asyncio.Event()
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    async def _tick_loop(self) -> None:
        assert self._wake is not None
        last_export = 0
        while True:
            now = now_ms()
            deadline = self.core.next_deadline(now)
            delay = 0.1 if deadline is None else min(0.1, max(0.005, (deadline - now) / 1000))
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
            try:
                await self._execute(self.core.tick(now_ms()), wait=False)
                if now - last_export >= 1000:
                    last_export = now
                    self._exporter.export(self.core)
            except Exception:
                logger.error("controller tick failed:\n%s", traceback.format_exc())

    async def ready(self) -> int:
        await self._started()
        return self.core.controller_epoch

    # -- executing actions ----------------------------------------------------------------
    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _execute(self, actions: list, wait: bool) -> None:
        """Run actions in order. Store writes are synchronous so nothing that follows can
        overtake them; calls to replicas run as tasks (awaited when ``wait``)."""
        waiting: list[asyncio.Task] = []
        for action in actions:
            if isinstance(action, Persist):
                if action.value is None:
                    self.store.delete(action.key)
                else:
                    self.store.put(action.key, action.value)
                    if action.key.startswith("partition/"):
                        self._log_partition(action.value)
            elif isinstance(action, CreateReplica):
                self._create_replica(action)
            elif isinstance(action, SendLeaderAndIsr):
                waiting.append(self._spawn(self._send_leader_and_isr(action)))
            elif isinstance(action, SendHeartbeat):
                self.core.on_heartbeat_sent(action.replica, now_ms())
                self._spawn(self._send_heartbeat(action))
            elif isinstance(action, DeleteReplica):
                waiting.append(self._spawn(self._delete_replica(action)))
        if wait and waiting:
            await asyncio.gather(*waiting, return_exceptions=True)

    def _replica_name(self, rid: ReplicaId) -> str:
        return names.replica(self.cluster, rid.topic, rid.partition, rid.broker)

    def _log_partition(self, value: bytes) -> None:
        """One line per persisted partition change (election, ISR change), tagged like the
        replicas' lines with the partition and its leader epoch."""
        p = PartitionState.decode(value)
        key = (p.topic, p.partition)
        seen = (p.leader, p.leader_epoch, tuple(p.isr))
        if self._logged.get(key) != seen:
            self._logged[key] = seen
            logger.info("[%s-%d epoch=%d] leader=%d isr=%s replicas=%s", p.topic, p.partition, p.leader_epoch, p.leader, p.isr, p.replicas)

    def _create_replica(self, action: CreateReplica) -> None:
        rid = action.replica
        name = self._replica_name(rid)
        try:
            handle = ray.get_actor(name, namespace=self.namespace)
            if not (self.core.restart_stuck(rid, now_ms()) and actor_state(handle) == "RESTARTING"):
                return  # alive, or being restarted by Ray
            # Ray has been "restarting" it for longer than any start should take (its
            # constructor hangs, or its worker never comes up): replace it with a new actor
            # of the same name (same log directory) rather than wait.
            logger.warning("[%s-%d broker=%d] Ray has been restarting %s for over %.0f s; recreating it", rid.topic, rid.partition, rid.broker, name, self.core.config.restart_stuck_ms / 1000)
            ray.kill(handle, no_restart=True)
            self._handles.forget(name)
            self.core.on_replica_replaced(rid)
            return  # the name is free once the kill lands; the ensure timer creates it then
        except ValueError:
            pass
        decision = self._placement.decide(rid.broker, lambda: [p.replicas for p in self.core.partitions.values()])
        if decision.wait:
            return  # its broker has no acceptable node; the ensure timer asks again
        options: dict[str, Any] = dict(
            name=name,
            namespace=self.namespace,
            num_cpus=0,
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=10_000,
            # Detached: a non-detached actor dies with its owner, and replicas must survive
            # a controller restart.
            lifetime="detached",
        )
        if decision.node:
            # Hard affinity and no Ray restarts: if the node dies the replica dies with it
            # (rather than Ray restarting it next to another replica of its partition) and
            # this controller recreates it wherever the placement then says.
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=decision.node, soft=False)
            options["max_restarts"] = 0
        try:
            RemoteReplica.options(**options).remote(
                self.cluster, rid.topic, rid.partition, rid.broker, self.data_dir, action.config, self.namespace
            )
            self._handles.forget(name)
            self.core.on_replica_created(rid, True, now_ms())
            logger.info("[%s-%d broker=%d] created replica actor %s%s", rid.topic, rid.partition, rid.broker, name, f" on node {decision.node}" if decision.node else "")
        except ValueError:
            pass  # created concurrently (name taken): fine
        except Exception:
            logger.error("could not create %s:\n%s", name, traceback.format_exc())

    async def _send_leader_and_isr(self, action: SendLeaderAndIsr) -> None:
        rid = action.replica
        response = None
        try:
            raw = await self._handles.call(self._replica_name(rid), "leader_and_isr", action.request.encode(), timeout=60)
            response = LeaderAndIsrResponse.decode(raw)
        except CallFailed as exc:
            if exc.kind == DEAD:
                await self._execute(self.core.on_replica_dead(rid, now_ms()), wait=False)
        except DecodeError:
            pass
        actions = self.core.on_leader_and_isr_result(rid, action.request, response, now_ms())
        if actions:
            await self._execute(actions, wait=False)

    async def _send_heartbeat(self, action: SendHeartbeat) -> None:
        rid = action.replica
        timeout = self.core.config.session_timeout_ms / 1000
        try:
            raw = await self._handles.call(
                self._replica_name(rid),
                "heartbeat",
                action.request.encode(),
                timeout=timeout,
                probe_after=self.core.config.liveness_probe_ms / 1000,
            )
            status = HeartbeatResponse.decode(raw)
            actions = self.core.on_heartbeat(rid, status, now_ms())
        except CallFailed as exc:
            actions = self.core.on_heartbeat(rid, None, now_ms(), dead=exc.kind == DEAD)
        except DecodeError:
            actions = self.core.on_heartbeat(rid, None, now_ms())
        if actions:
            await self._execute(actions, wait=False)

    async def _delete_replica(self, action: DeleteReplica) -> None:
        name = self._replica_name(action.replica)
        try:
            await self._handles.call(name, "delete", timeout=30)
        except CallFailed:
            pass
        try:
            ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
        except (ValueError, Exception):
            pass
        self._handles.forget(name)

    # -- APIs (msgpack bytes in and out) ---------------------------------------------------
    async def _serve(self, data: bytes, request_type: type[Message], response_type: type[Message], handler) -> bytes:
        try:
            req = request_type.decode(data)
        except DecodeError as exc:
            return response_type(int(exc.code), exc.message).encode()
        await self._started()
        try:
            return (await handler(req)).encode()
        except Exception:
            logger.error("controller request failed:\n%s", traceback.format_exc())
            return response_type(ErrorCode.UNKNOWN_SERVER_ERROR, "internal error in controller; see its logs").encode()

    async def metadata(self, data: bytes) -> bytes:
        async def handle(req: MetadataRequest) -> MetadataResponse:
            return self.core.metadata(req)

        return await self._serve(data, MetadataRequest, MetadataResponse, handle)

    async def create_topic(self, data: bytes) -> bytes:
        async def handle(req: CreateTopicsRequest) -> CreateTopicsResponse:
            response, actions = self.core.create_topic(req, now_ms())
            await self._execute(actions, wait=True)
            return response

        return await self._serve(data, CreateTopicsRequest, CreateTopicsResponse, handle)

    async def delete_topic(self, data: bytes) -> bytes:
        async def handle(req: DeleteTopicsRequest) -> DeleteTopicsResponse:
            response, actions = self.core.delete_topic(req, now_ms())
            await self._execute(actions, wait=True)
            return response

        return await self._serve(data, DeleteTopicsRequest, DeleteTopicsResponse, handle)

    async def alter_partition(self, data: bytes) -> bytes:
        async def handle(req: AlterPartitionRequest) -> AlterPartitionResponse:
            response, actions = self.core.alter_partition(req, now_ms())
            await self._execute(actions, wait=False)
            return response

        return await self._serve(data, AlterPartitionRequest, AlterPartitionResponse, handle)

    async def init_producer_id(self, data: bytes) -> bytes:
        async def handle(req: InitProducerIdRequest) -> InitProducerIdResponse:
            response, actions = self.core.init_producer_id(req)
            await self._execute(actions, wait=True)
            return response

        return await self._serve(data, InitProducerIdRequest, InitProducerIdResponse, handle)

    async def describe_cluster(self, data: bytes) -> bytes:
        async def handle(req: DescribeClusterRequest) -> DescribeClusterResponse:
            assert self.core.cluster is not None
            return DescribeClusterResponse(
                cluster=self.cluster,
                controller_epoch=self.core.controller_epoch,
                brokers=list(self.core.cluster.brokers),
                group_coordinators=self.core.cluster.group_coordinators,
                metrics=self.core.metrics_snapshot(),
            )

        return await self._serve(data, DescribeClusterRequest, DescribeClusterResponse, handle)

    async def rebalance_leaders(self) -> int:
        """Move leadership back to preferred replicas now (admin/testing)."""
        await self._started()
        actions = self.core.rebalance_leaders(now_ms())
        await self._execute(actions, wait=True)
        return sum(1 for a in actions if isinstance(a, Persist))

    async def replica_health(self) -> dict[str, bool]:
        """{replica name: alive?} as the failure detector sees it."""
        await self._started()
        return {self._replica_name(r): self.core.detector.is_alive(r) for r in self.core.detector.members()}

    async def placement(self) -> dict:
        """The broker -> node binding, which nodes are alive, and brokers waiting for one."""
        await self._started()
        return self._placement.describe()

    async def pid(self) -> int:
        import os

        return os.getpid()
