"""The one driver of the controller (FailoverCoordinator): everything but I/O.

:class:`ControllerDriver` owns the :class:`~kcoord.replication.controller.ControllerState`
core and performs its actions, strictly in order, through small interfaces: the metadata
store (``get/put/delete/keys``), a :class:`~kcoord.runtime.Transport` for LeaderAndIsr and
heartbeats, a :class:`ReplicaHost` that creates and deletes replica actors, and a
:class:`~kcoord.runtime.Clock`. The Ray actor (``actors/controller.py``) and the simulation
run this same class.

Rules it owns:

* **Persist, then tell.** A Persist runs (synchronously) before anything after it. If a
  store write fails -- refused, or timed out with the outcome unknown -- the driver stops
  executing that batch and *resigns*: it drops the core, whose memory may now be ahead of
  the store, reads the store back and boots a new core from it (a new controller epoch),
  as a Kafka controller resigns when its ZooKeeper writes fail. Nothing the failed write
  described is ever announced, and no leader epoch is reused for another leader.
* Requests that arrive while (re)booting wait and are served once the core is up. One whose
  batch hit a store failure is answered REQUEST_TIMED_OUT: it may or may not have applied.
* Every outcome (heartbeat, LeaderAndIsr answer, actor creation) goes back to the core that
  asked; outcomes for a core that resigned are dropped.
* Creating a replica's actor may take a while (the runtime's control plane is slow under
  load): the driver keeps serving meanwhile, holds the calls and deletion meant for that
  replica until its creation is done (an actor must exist before it is called), and starts
  no second creation of it.
* One timer, re-armed from ``next_deadline()``; before each tick the core learns which
  nodes are alive when brokers are bound to nodes (placement is core policy).
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, Callable, Protocol

from ..protocol.codec import Message
from ..protocol.controller import (
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeClusterResponse,
    HeartbeatResponse,
    IncrementalAlterConfigsRequest,
    LeaderAndIsrResponse,
)
from ..protocol import names
from ..protocol.errors import ErrorCode
from ..protocol.services import CONTROLLER, error_response
from ..runtime import Alarm, Clock, Outcome, ReplyFn, Transport
from ..runtime.actions import Action
from ..runtime.serving import Serving
from .controller import ControllerConfig, ControllerState
from .metastore import MetadataStore
from .placement import PLACEMENT_KEY
# CreateReplica's outcomes, re-exported for the replica hosts (actors/controller.py, the simulation)
from .controller_actions import CREATED, EXISTS, FAILED, REPLACED, CreateReplica, DeleteReplica, Persist, ReplicaId, Reply, SendHeartbeat, SendLeaderAndIsr

logger = logging.getLogger("kcoord.controller")


class ReplicaHost(Protocol):
    """Creates and removes replica actors (Ray: named detached actors; the simulation:
    simulated processes)."""

    def ensure(self, replica: ReplicaId, config: dict[str, str], node: str | None, replace_if_stuck: bool, done: Callable[[str], None]) -> None:
        """Make sure the replica's actor exists on ``node``; ``done(result)`` runs once, now
        or later (Ray's host asks the GCS off the event loop), with EXISTS, CREATED, REPLACED
        (it was stuck restarting and was killed; the next ensure creates it) or FAILED."""
        ...

    def delete(self, replica: ReplicaId, done: Callable[[], None]) -> None:
        """Stop the actor and delete its data; ``done()`` runs once, later."""
        ...


# Topic changes are answered once every replica heard of them (a new config is in force, new
# partitions have their leaders told) -- or failed to answer.
ANSWERED_WHEN_TOLD = (CreateTopicsRequest, DeleteTopicsRequest, IncrementalAlterConfigsRequest, CreatePartitionsRequest)


class ControllerDriver(Serving):
    service = CONTROLLER

    def __init__(
        self,
        cluster: str,
        brokers: list[int],
        *,
        store: MetadataStore,
        transport: Transport,
        clock: Clock,
        replicas: ReplicaHost,
        config: ControllerConfig | None = None,
        group_coordinators: int = 0,
        binding: dict[int, str] | None = None,
        alive_nodes: Callable[[], list[str]] | None = None,
        node_hosts: Callable[[], dict[str, str]] | None = None,
        call_timeout_ms: int = 60_000,
        boot_retry_ms: int = 200,
        idle_wake_ms: int = 1000,
        min_wake_gap_ms: int = 5,
        on_persist: Callable[[str, bytes | None], None] | None = None,
        after_tick: Callable[[int], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.brokers = sorted(brokers)
        self.config = config or ControllerConfig()
        self.group_coordinators = group_coordinators
        self.binding = dict(binding or {})
        self._store = store
        self._transport = transport
        self._clock = clock
        self._replicas = replicas
        self._alive_nodes = alive_nodes
        self._node_hosts = node_hosts
        self.call_timeout_ms = call_timeout_ms
        self.boot_retry_ms = boot_retry_ms
        self.min_wake_gap_ms = min_wake_gap_ms
        self._on_persist = on_persist
        self._after_tick = after_tick
        self.core: ControllerState | None = None
        self.booted = False
        self.closed = False
        self.generation = 0  # bumped on every (re)boot: outcomes of older cores are dropped
        self.resigns = 0
        self.store_failures = 0
        self._queued: list[tuple[Message, ReplyFn]] = []
        # replicas whose creation is under way -> what waits for it (calls, deletion)
        self._ensuring: dict[ReplicaId, list[Callable[[], None]]] = {}
        self._init_serving()
        self._on_boot: list[Callable[[], None]] = []
        self._alarm = Alarm(clock, self._on_alarm, idle_ms=idle_wake_ms)
        self._boot_timer: Any = None

    # ======================================================================================
    # lifecycle
    # ======================================================================================
    def start(self) -> None:
        self._boot()

    def when_booted(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` once the core is up (at once if it is)."""
        if self.booted:
            callback()
        else:
            self._on_boot.append(callback)

    def close(self) -> None:
        self.closed = True
        self.booted = False
        self._alarm.close()
        if self._boot_timer is not None:
            self._boot_timer.cancel()
        for request, reply in self._queued:
            reply(error_response(request, ErrorCode.NOT_CONTROLLER, "controller stopped"))
        self._queued.clear()

    def _boot(self) -> None:
        self._boot_timer = None
        if self.closed:
            return
        try:
            stored = self._store.load()
        except Exception as exc:
            logger.warning("controller for %r cannot load the metadata store (%s); retrying", self.cluster, exc)
            self._boot_timer = self._clock.call_at(self._clock.now_ms() + self.boot_retry_ms, self._boot)
            return
        self.generation += 1
        core = ControllerState(self.cluster, self.config, self.binding)
        self.core = core
        now = self._clock.now_ms()
        self._tell_nodes(core, force=PLACEMENT_KEY in stored)
        if not self._perform(core.start(stored, self.brokers, self.group_coordinators, now)):
            return  # resigned already; a new boot is scheduled
        self.booted = True
        logger.info("controller for %r started at epoch %d with %d topics", self.cluster, core.controller_epoch, len(core.topics))
        self._rearm()
        callbacks, self._on_boot = self._on_boot, []
        for callback in callbacks:
            callback()
        queued, self._queued = self._queued, []
        for request, reply in queued:
            self.serve(request, reply)

    def _resign(self, exc: BaseException) -> None:
        """A store write failed: the core's memory may be ahead of the store. Drop it and
        boot again from what the store holds."""
        self.resigns += 1
        self.store_failures += 1
        logger.warning("controller for %r: metadata store write failed (%s); reloading from the store", self.cluster, exc)
        self.booted = False
        self.core = None
        self.generation += 1
        self._alarm.close()
        self._alarm = Alarm(self._clock, self._on_alarm, idle_ms=self._alarm.idle_ms)
        if self._boot_timer is None and not self.closed:
            self._boot_timer = self._clock.call_at(self._clock.now_ms() + self.boot_retry_ms, self._boot)

    def _tell_nodes(self, core: ControllerState, force: bool = False) -> None:
        if self._alive_nodes is not None and (core.placement.bound or force):
            try:
                core.on_nodes(self._alive_nodes(), self._node_hosts() if self._node_hosts is not None else None, self._clock.now_ms())
            except Exception:
                logger.warning("could not list the cluster's nodes:\n%s", traceback.format_exc())

    # ======================================================================================
    # performing actions
    # ======================================================================================
    def _perform(self, actions: list) -> bool:
        """Run ``actions`` in order. Returns False if a store write failed (the driver
        resigned and the rest was not run). A Reply answers its waiter at once, or -- for
        a topic creation, deletion, config change or new partitions
        (:data:`ANSWERED_WHEN_TOLD`) -- once every LeaderAndIsr and DeleteReplica of the
        batch has finished."""
        core = self.core
        gen = self.generation
        pending = [1]
        deferred: list[tuple] = []

        def one_done() -> None:
            pending[0] -= 1
            if pending[0] == 0:
                for reply, response in deferred:
                    reply(response)
                deferred.clear()

        for action in actions:
            if self.generation != gen or core is None:
                return False
            if isinstance(action, Persist):
                try:
                    if action.value is None:
                        self._store.delete(action.key)
                    else:
                        self._store.put(action.key, action.value)
                except Exception as exc:
                    self._resign(exc)
                    return False
                if self._on_persist is not None:
                    self._on_persist(action.key, action.value)
            elif isinstance(action, CreateReplica):
                self._create_replica(core, gen, action)
            elif isinstance(action, SendLeaderAndIsr):
                pending[0] += 1
                self._once_created(action.replica, lambda a=action: self._send_leader_and_isr(core, gen, a, one_done))
            elif isinstance(action, SendHeartbeat):
                core.on_heartbeat_sent(action.replica, self._clock.now_ms())
                self._once_created(action.replica, lambda a=action: self._send_heartbeat(core, gen, a))
            elif isinstance(action, DeleteReplica):
                pending[0] += 1
                self._once_created(action.replica, lambda a=action: self._replicas.delete(a.replica, one_done))
            elif isinstance(action, Reply):
                waiter = self._waiters.pop(action.token)
                if waiter is None:
                    pass
                elif waiter.request is None or isinstance(waiter.request, ANSWERED_WHEN_TOLD):
                    deferred.append((waiter.reply, action.response))
                else:
                    waiter.reply(action.response)
            else:  # pragma: no cover - a new action kind this driver must learn
                raise TypeError(f"unknown controller action {action!r}")
        one_done()
        return True

    def _run(self, core: ControllerState, gen: int, actions: list) -> None:
        if self.generation == gen and not self.closed:
            self._perform(actions)
            self._rearm()

    def on_replica_unreachable(self, name: str) -> None:
        """The shell's hint that the replica actor ``name`` may be gone (its direct-call
        connection broke): heartbeat it now instead of at its next interval."""
        core = self.core
        if core is None or not self.booted or self.closed:
            return
        rid = next((r for r in core.detector.members() if self._replica_name(r) == name), None)
        if rid is not None:
            self._run(core, self.generation, core.on_replica_unreachable(rid, self._clock.now_ms()))

    def _create_replica(self, core: ControllerState, gen: int, action: CreateReplica) -> None:
        rid = action.replica
        if rid in self._ensuring:
            return  # one creation at a time; the ensure timer asks again if this one fails
        waiting: list[Callable[[], None]] = []
        self._ensuring[rid] = waiting

        def done(result: str) -> None:
            if self._ensuring.get(rid) is not waiting:
                return  # answered already
            if self.generation == gen and not self.closed:
                actions = core.on_replica_ensured(rid, result, self._clock.now_ms())
                if actions:
                    self._run(core, gen, actions)
            self._created(rid)

        try:
            self._replicas.ensure(rid, action.config, action.node, core.restart_stuck(rid, self._clock.now_ms()), done)
        except Exception:
            logger.error("could not create the actor of %s:\n%s", rid, traceback.format_exc())
            self._created(rid)

    def _created(self, rid: ReplicaId) -> None:
        """The creation of ``rid``'s actor is over: run what waited for it."""
        for call in self._ensuring.pop(rid, []):
            call()

    def _once_created(self, rid: ReplicaId, call: Callable[[], None]) -> None:
        """Run ``call`` now, or once the creation of ``rid``'s actor under way is done."""
        waiting = self._ensuring.get(rid)
        if waiting is None:
            call()
        else:
            waiting.append(call)

    def _replica_name(self, rid: ReplicaId) -> str:
        return names.replica(self.cluster, rid.topic, rid.partition, rid.broker)

    def _send_leader_and_isr(self, core: ControllerState, gen: int, action: SendLeaderAndIsr, done: Callable[[], None]) -> None:
        rid = action.replica

        def answered(response: LeaderAndIsrResponse | None, outcome: Outcome) -> None:
            try:
                if self.generation != gen or self.closed:
                    return
                now = self._clock.now_ms()
                if outcome == Outcome.DEAD:
                    self._run(core, gen, core.on_replica_dead(rid, now))
                self._run(core, gen, core.on_leader_and_isr_result(rid, action.request, response, self._clock.now_ms()))
            finally:
                done()

        self._transport.call(self._replica_name(rid), "leader_and_isr", action.request, LeaderAndIsrResponse, self.call_timeout_ms, answered)

    def _send_heartbeat(self, core: ControllerState, gen: int, action: SendHeartbeat) -> None:
        rid = action.replica

        def answered(status: HeartbeatResponse | None, outcome: Outcome) -> None:
            if self.generation != gen or self.closed:
                return
            now = self._clock.now_ms()
            if outcome == Outcome.OK:
                actions = core.on_heartbeat(rid, status, now)
            else:
                actions = core.on_heartbeat(rid, None, now, dead=outcome == Outcome.DEAD)
            self._run(core, gen, actions)

        self._transport.call(
            self._replica_name(rid),
            "heartbeat",
            action.request,
            HeartbeatResponse,
            self.config.session_timeout_ms,
            answered,
            probe_after_ms=self.config.liveness_probe_ms,
        )

    # ======================================================================================
    # timer
    # ======================================================================================
    def _rearm(self) -> None:
        core = self.core
        if core is None or not self.booted or self.closed:
            return
        now = self._clock.now_ms()
        deadline = core.next_deadline(now)
        # Never sooner than min_wake_gap_ms: heartbeats due within it go out together.
        self._alarm.arm(None if deadline is None else max(deadline, now + self.min_wake_gap_ms))

    def _on_alarm(self, now_ms: int) -> None:
        core = self.core
        if core is None or not self.booted or self.closed:
            return
        gen = self.generation
        self._tell_nodes(core)
        try:
            actions = core.tick(now_ms)
        except Exception:
            logger.error("controller tick failed:\n%s", traceback.format_exc())
            actions = []
        if not self._perform(actions) or self.generation != gen:
            return
        if self._after_tick is not None:
            try:
                self._after_tick(now_ms)
            except Exception:
                logger.warning("controller after-tick hook failed:\n%s", traceback.format_exc())
        self._rearm()

    # ======================================================================================
    # requests
    # ======================================================================================
    def _admit(self, request: Message, reply: ReplyFn) -> bool:
        """Requests wait while the core (re)boots; DescribeCluster is the driver's."""
        if self.closed:
            reply(error_response(request, ErrorCode.NOT_CONTROLLER, "controller stopped"))
            return False
        core = self.core
        if not self.booted or core is None:
            self._queued.append((request, reply))
            return False
        if isinstance(request, DescribeClusterRequest):
            reply(self._describe_cluster(core))
            return False
        return True

    def _handle(self, request: Message, token: int) -> list[Action]:
        assert self.core is not None
        return self.core.handle(request, token, self._clock.now_ms())

    def _served(self, request: Message, token: int, actions: list[Action]) -> None:
        if not self._perform(actions):
            # A store write failed before the answer: the change may or may not have landed.
            waiter = self._waiters.pop(token)
            if waiter is not None:
                waiter.reply(error_response(request, ErrorCode.REQUEST_TIMED_OUT, "controller metadata store write failed; the outcome is unknown, retry"))
        self._rearm()

    def _internal_error(self, where: str) -> None:
        logger.error("controller internal error %s:\n%s", where, traceback.format_exc())

    def _describe_cluster(self, core: ControllerState) -> DescribeClusterResponse:
        assert core.cluster is not None
        return DescribeClusterResponse(
            cluster=self.cluster,
            controller_epoch=core.controller_epoch,
            brokers=list(core.cluster.brokers),
            group_coordinators=core.cluster.group_coordinators,
            metrics=self.metrics_snapshot(),
        )

    # ======================================================================================
    # admin and views
    # ======================================================================================
    def rebalance_leaders(self, done: Callable[[int], None]) -> None:
        """Move leadership back to preferred replicas now; ``done(moved)`` once announced."""

        def run() -> None:
            core = self.core
            assert core is not None
            actions = core.rebalance_leaders(self._clock.now_ms())
            moved = sum(1 for a in actions if isinstance(a, Persist))
            token = self._waiters.add(lambda _: done(moved), None)  # answered once all are told
            if not self._perform([*actions, Reply(token, None)]):
                self._waiters.pop(token)
                done(0)
            self._rearm()

        self.when_booted(run)

    def metrics_snapshot(self) -> dict[str, float]:
        core = self.core
        if core is None:
            return {}
        snap = core.metrics_snapshot()
        snap["store_failures"] = self.store_failures
        snap["controller_resigns"] = self.resigns
        return snap

    def replica_health(self) -> dict[ReplicaId, bool]:
        core = self.core
        return {} if core is None else {r: core.detector.is_alive(r) for r in core.detector.members()}

    def replica_directories(self) -> dict[ReplicaId, tuple[str, bool]]:
        """Per replica: the log directory id last reported, and whether it replaced the one
        before (a wiped disk) and the replica is not in sync since."""
        core = self.core
        if core is None:
            return {}
        trust = core.trust
        return {r: (d, r in trust.replaced) for r, d in trust.directory.items()}

    def placement(self) -> dict[str, Any]:
        core = self.core
        return {} if core is None else core.placement.describe()
