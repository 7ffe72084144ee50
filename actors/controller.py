"""FailoverCoordinator: the Ray shell around the controller's driver.

One per cluster, a named, restartable (and, when deployed, detached) asyncio actor. The
logic -- ordered persist-then-tell execution, resigning on store failures, timers, placement
decisions -- is in :class:`~kcoord.replication.controller_driver.ControllerDriver`, the same
driver the simulation runs. This shell supplies the Ray world: the GCS metadata store, Ray
actor calls, replica actors created and deleted by name, the list of alive Ray nodes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import time
import uuid
import traceback
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from kcoord import channel
from kcoord.calls import CallFailed, Handles, actor_state
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.services import CONTROLLER
from kcoord.replication.controller import ControllerConfig, ReplicaId
from kcoord.replication.controller_driver import CREATED, EXISTS, FAILED, REPLACED, ControllerDriver
from kcoord.replication.fenced_store import FencedStore
from kcoord.replication.metadata import PartitionState, is_controller_key
from kcoord.replication.metastore import FileStore, MemoryStore

from .metrics import ControllerMetricsExporter
from .runtime import AsyncioClock, RayTransport, ray_nodes, rpc_methods, serve_encoded

logger = logging.getLogger("kcoord.controller")


@functools.cache
def _remote_replica() -> Any:
    """The replica actor class, imported when a replica is first created rather than when
    this module loads: its import tree (the log, the replica driver, the codecs) is two
    thirds of the controller's, and a restarted controller must answer as soon as it can
    (under CPU contention an import costs ~10x its idle time)."""
    from .replica import ReplicaActor

    return ray.remote(ReplicaActor)

_NODES_TTL_S = 0.5
_METRICS_EVERY_S = 1.0


def make_store(spec: str, cluster: str) -> FencedStore:
    """The metadata log on ``"gcs"`` (Ray's GCS key/value store), ``"memory"`` or a
    directory path; this process writes it under an id of its own."""
    raw: Any
    if spec == "gcs":
        from .gcs_store import GcsStore

        raw = GcsStore.for_cluster(cluster)
    elif spec == "memory":
        raw = MemoryStore()
    else:
        raw = FileStore(spec)
    return FencedStore(raw, f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}", legacy=is_controller_key)


class RayNodes:
    """Ids of the alive Ray nodes and the host of every node (dead ones included), asked
    of the GCS at most every ``ttl_s``, off the event loop: the driver asks before every
    tick, and a GCS call there would hold the loop. The first answer waits for the GCS;
    after that a stale answer is given while the next one is fetched."""

    def __init__(self, executor: Executor, ttl_s: float = _NODES_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._executor = executor
        self._at = -1e9
        self._fetching = False
        self._nodes: list[str] | None = None
        self._hosts: dict[str, str] = {}

    def _fetch(self) -> None:
        try:
            self._nodes, self._hosts = ray_nodes()
            self._at = time.monotonic()
        finally:
            self._fetching = False

    def _refresh(self) -> None:
        if self._nodes is None:
            self._fetching = True
            self._fetch()
        elif time.monotonic() - self._at > self.ttl_s and not self._fetching:
            self._fetching = True
            self._executor.submit(self._fetch)

    def __call__(self) -> list[str]:
        self._refresh()
        return list(self._nodes or [])

    def hosts(self) -> dict[str, str]:
        self._refresh()
        return self._hosts


class RayReplicaHost:
    """Replica actors by name: created detached (pinned to a node when brokers are bound
    to nodes), replaced when Ray has been restarting one for too long, deleted on request.

    Every GCS call (looking an actor up, its state, registering a new named actor, a kill)
    runs on ``executor``'s threads, never on the controller's event loop: under load one
    takes from milliseconds to seconds, and the loop serves heartbeats and metadata."""

    def __init__(self, cluster: str, namespace: str, data_dir: str, handles: Handles, executor: Executor) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.data_dir = data_dir
        self.handles = handles
        self._executor = executor
        self._tasks: set[asyncio.Task] = set()

    def _name(self, rid: ReplicaId) -> str:
        return names.replica(self.cluster, rid.topic, rid.partition, rid.broker)

    def ensure(self, rid: ReplicaId, config: dict[str, str], node: str | None, replace_if_stuck: bool, done: Callable[[str], None]) -> None:
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._ensure, rid, config, node, replace_if_stuck)

        def finished(f: asyncio.Future) -> None:
            if f.exception() is not None:
                logger.error("could not create the actor of %s: %r", self._name(rid), f.exception())
            done(FAILED if f.exception() is not None else f.result())

        future.add_done_callback(finished)

    def _ensure(self, rid: ReplicaId, config: dict[str, str], node: str | None, replace_if_stuck: bool) -> str:
        """On an executor thread: the GCS calls of one ensure."""
        name = self._name(rid)
        try:
            handle = ray.get_actor(name, namespace=self.namespace)
            if not (replace_if_stuck and actor_state(handle) == "RESTARTING"):
                return EXISTS  # alive, or being restarted by Ray
            # Ray has been "restarting" it for longer than any start should take (its
            # constructor hangs, or its worker never comes up): replace it with a new actor
            # of the same name (same log directory) rather than wait.
            logger.warning("[%s-%d broker=%d] Ray has been restarting %s for too long; recreating it", rid.topic, rid.partition, rid.broker, name)
            ray.kill(handle, no_restart=True)
            self.handles.forget(name)
            return REPLACED  # the name is free once the kill lands; the ensure timer creates it then
        except ValueError:
            pass
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
        if node:
            # Hard affinity and no Ray restarts: if the node dies the replica dies with it
            # (rather than Ray restarting it next to another replica of its partition) and
            # the controller recreates it wherever the placement then says.
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            options["max_restarts"] = 0
        try:
            _remote_replica().options(**options).remote(self.cluster, rid.topic, rid.partition, rid.broker, self.data_dir, config, self.namespace)
        except ValueError:
            return EXISTS  # created concurrently (name taken): fine
        except Exception:
            logger.error("could not create %s:\n%s", name, traceback.format_exc())
            return FAILED
        self.handles.forget(name)
        logger.info("[%s-%d broker=%d] created replica actor %s%s", rid.topic, rid.partition, rid.broker, name, f" on node {node}" if node else "")
        return CREATED

    def delete(self, rid: ReplicaId, done: Callable[[], None]) -> None:
        task = asyncio.get_running_loop().create_task(self._delete(rid, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _delete(self, rid: ReplicaId, done: Callable[[], None]) -> None:
        name = self._name(rid)
        try:
            await self.handles.call(name, "delete", timeout=30)
        except CallFailed:
            pass
        await asyncio.get_running_loop().run_in_executor(self._executor, self._kill, name)
        self.handles.forget(name)
        done()

    def _kill(self, name: str) -> None:
        try:
            ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
        except Exception:
            pass


@rpc_methods(CONTROLLER)
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
        self.config = ControllerConfig(**(controller_config or {}))
        # Broker -> node binding made at deploy time ({} on one node); the driver prefers
        # the one in the store, which holds re-bindings made since.
        self.binding = {int(b): str(n) for b, n in (placement or {}).items()}
        self.driver: ControllerDriver | None = None
        self._direct: channel.DirectCalls | None = None
        self._exporter = ControllerMetricsExporter(cluster)
        self._last_export = 0.0
        self._logged: dict[tuple[str, int], tuple] = {}
        # Boot now, not on the first request: after a Ray restart nobody may call us for a
        # while, yet failure detection must resume at once.
        ray.get_runtime_context().current_actor.ready.remote()

    # -- lifecycle ------------------------------------------------------------------------
    def _driver(self) -> ControllerDriver:
        if self.driver is None:
            loop = asyncio.get_running_loop()
            # Heartbeats to replicas on this node go over their direct-call channels
            # (kcoord.channel): the controller's steady load on an idle cluster. Such a
            # connection breaking is the quickest news of a replica's death: beat it now.
            direct = (
                channel.DirectCalls(ray.get_runtime_context().get_node_id(), on_lost=self._replica_unreachable)
                if channel.enabled()
                else None
            )
            self._direct = direct
            transport = RayTransport(self.namespace, loop, direct=direct, direct_methods=("heartbeat",))
            # GCS calls that need no answer before the loop goes on (creations, node lists)
            gcs = ThreadPoolExecutor(max_workers=4, thread_name_prefix="controller-gcs")
            nodes = RayNodes(gcs)
            self.driver = ControllerDriver(
                self.cluster,
                self.brokers,
                store=self.store,
                transport=transport,
                clock=AsyncioClock(loop),
                replicas=RayReplicaHost(self.cluster, self.namespace, self.data_dir, transport.handles, gcs),
                config=self.config,
                group_coordinators=self.group_coordinators,
                binding=self.binding,
                alive_nodes=nodes,
                node_hosts=nodes.hosts,
                on_persist=self._on_persist,
                after_tick=self._export_metrics,
            )
            self.driver.start()
        return self.driver

    def _replica_unreachable(self, name: str) -> None:
        if self.driver is not None:
            self.driver.on_replica_unreachable(name)

    async def _booted(self) -> ControllerDriver:
        driver = self._driver()
        if not driver.booted:
            fut = asyncio.get_running_loop().create_future()
            driver.when_booted(lambda: fut.done() or fut.set_result(None))
            await fut
        return driver

    async def ready(self) -> int:
        driver = await self._booted()
        assert driver.core is not None
        return driver.core.controller_epoch

    def _on_persist(self, key: str, value: bytes | None) -> None:
        """One log line per persisted partition change (election, ISR change), tagged like
        the replicas' lines with the partition and its leader epoch."""
        if value is None or not key.startswith("partition/"):
            return
        p = PartitionState.decode(value)
        seen = (p.leader, p.leader_epoch, tuple(p.isr))
        if self._logged.get((p.topic, p.partition)) != seen:
            self._logged[(p.topic, p.partition)] = seen
            logger.info("[%s-%d epoch=%d] leader=%d isr=%s replicas=%s", p.topic, p.partition, p.leader_epoch, p.leader, p.isr, p.replicas)

    def _export_metrics(self, _now_ms: int) -> None:
        now = time.monotonic()
        if now - self._last_export >= _METRICS_EVERY_S and self.driver is not None and self.driver.core is not None:
            self._last_export = now
            self._exporter.export(self.driver.core)

    # -- APIs (msgpack bytes in and out) ---------------------------------------------------
    async def _serve(self, data: bytes, request_type: type[Message]) -> bytes:
        """Every RPC method (``CONTROLLER``'s table): msgpack bytes in and out."""
        return (await serve_encoded(data, request_type, lambda req, reply: self._driver().serve(req, reply))).encode()

    async def rebalance_leaders(self) -> int:
        """Move leadership back to preferred replicas now (admin/testing)."""
        driver = self._driver()
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        driver.rebalance_leaders(lambda moved: fut.done() or fut.set_result(moved))
        return await fut

    async def replica_health(self) -> dict[str, bool]:
        """{replica name: alive?} as the failure detector sees it."""
        driver = await self._booted()
        return {names.replica(self.cluster, r.topic, r.partition, r.broker): alive for r, alive in driver.replica_health().items()}

    async def replica_directories(self) -> dict[str, dict]:
        """{replica name: {"directory_id", "replaced"}}: the log directory each replica last
        reported, and whether it came back in a new one (a wiped disk) and is not in sync
        since -- such a replica does not lead (Kafka's log directory ids, KIP-858)."""
        driver = await self._booted()
        return {
            names.replica(self.cluster, r.topic, r.partition, r.broker): {"directory_id": d, "replaced": replaced}
            for r, (d, replaced) in driver.replica_directories().items()
        }

    async def placement(self) -> dict:
        """The broker -> node binding, which nodes are alive, and brokers waiting for one."""
        driver = await self._booted()
        return driver.placement()

    async def pid(self) -> int:
        return os.getpid()

    async def direct_calls(self) -> dict:
        """Heartbeats over direct-call channels: calls made, calls sent through Ray instead,
        and the replicas whose process this controller holds a connection to (a death
        there is noticed at once, without waiting for the next heartbeat)."""
        d = self._direct
        if d is None:
            return {"enabled": False, "calls": 0, "fallbacks": 0, "connected": []}
        return {"enabled": True, "calls": d.calls, "fallbacks": d.fallbacks, "connected": d.connected()}
