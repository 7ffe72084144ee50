"""The controller core (FailoverCoordinator's logic): one sans-I/O state machine in four parts.

It owns cluster metadata and is its only writer. Every decision is persisted before anyone
is told about it: the actions it returns always put :class:`Persist` ahead of the
LeaderAndIsr messages that depend on it, and the driver executes actions in order. A
restarted controller reloads the store, bumps the controller epoch and re-sends every
follower its current role, which completes an election that was persisted but not yet
delivered; one that was not persisted never happened and is simply redone. Leaders are
verified by their first heartbeat instead: one that restarted meanwhile is re-elected.

:class:`ControllerState` is the one entry point (``input, now_ms -> list[Action]``); the
decisions are its parts', each a concept with its own file, all sharing one
:class:`~.context.ControllerContext`:

* :mod:`.startup` -- start-up from the store and placement of replicas on nodes;
* :mod:`.topics` -- topic administration (and producer ids);
* :mod:`.isr_changes` -- the ISR and ELR of each partition;
* :mod:`.liveness` -- heartbeats, vouches, restarts, failover and elections.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from ...protocol.controller import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    HeartbeatResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    MetadataRequest,
    MetadataResponse,
)
from ...protocol.services import CONTROLLER
from ...runtime.actions import Handlers
from ..controller_actions import ControllerAction, ReplicaId, Reply
from ..controller_config import ControllerConfig
from ..metadata import NO_LEADER
from .context import ControllerContext
from .isr_changes import IsrChanges
from .liveness import Liveness
from .startup import StartUp
from .topics import TopicAdmin


def answers(query: Callable[[Any], Any]) -> Callable[[Any, Any, int], list[ControllerAction]]:
    """A request the controller answers from memory: ``query(request) -> response``."""
    return lambda request, token, now_ms: [Reply(token, query(request))]


def decides(decide: Callable[[Any, int], tuple[Any, list[ControllerAction]]]) -> Callable[[Any, Any, int], list[ControllerAction]]:
    """A request the controller decides: ``decide(request, now_ms) -> (response, actions)``;
    the answer goes after the actions it depends on."""

    def handler(request: Any, token: Any, now_ms: int) -> list[ControllerAction]:
        response, actions = decide(request, now_ms)
        return [*actions, Reply(token, response)]

    return handler


def _shared(name: str) -> property:
    """A piece of the shared context, read through the core (drivers, metrics, tests)."""
    return property(lambda self: getattr(self.ctx, name), doc=f"The context's ``{name}``.")


class ControllerState:
    """The controller core: every entry point takes its input and ``now_ms`` and returns
    the actions decided, in the order the driver must perform them."""

    def __init__(self, name: str, config: ControllerConfig | None = None, binding: dict[int, str] | None = None) -> None:
        """``binding``: the deploy-time broker -> node binding ({} on one node); a binding
        found in the store (re-bindings made since) takes precedence."""
        self.ctx = ctx = ControllerContext(name, config, binding)
        self._isr = IsrChanges(ctx)
        self._liveness = Liveness(ctx, self._isr)
        self._startup = StartUp(ctx, self._isr, self._liveness)
        self._topics = TopicAdmin(ctx, self._startup, self._isr, self._liveness)
        topics, security = self._topics, ctx.security
        self._handlers = Handlers(
            CONTROLLER.name,
            {
                MetadataRequest: answers(topics.metadata),
                DescribeConfigsRequest: answers(topics.describe_configs),
                IncrementalAlterConfigsRequest: decides(topics.alter_configs),
                CreatePartitionsRequest: decides(topics.create_partitions),
                CreateTopicsRequest: decides(topics.create_topic),
                DeleteTopicsRequest: decides(topics.delete_topic),
                AlterPartitionRequest: decides(self._isr.alter_partition),
                InitProducerIdRequest: decides(lambda req, now_ms: topics.init_producer_id(req)),
                **{t: decides(decide) for t, decide in security.decisions().items()},
            },
        )

    name = _shared("name")
    config = _shared("config")
    cluster = _shared("cluster")
    controller_epoch = _shared("controller_epoch")
    topics = _shared("topics")
    partitions = _shared("partitions")
    placement = _shared("placement")
    detector = _shared("detector")
    trust = _shared("trust")
    metrics = _shared("metrics")
    offline_logs = _shared("offline_logs")
    owned_producers = _shared("owned_producers")
    security = _shared("security")

    # -- requests ----------------------------------------------------------------------------
    def handle(self, request: Any, token: Any, now_ms: int) -> list[ControllerAction]:
        """Any request the controller serves but DescribeCluster (its driver answers that).
        Returns the actions it decided, ending with the :class:`Reply` for ``token`` (after
        the Persists it depends on). The typed methods below each decide one request: its
        answer and the actions it depends on."""
        return self._handlers.of(request)(request, token, now_ms)

    # -- timers ------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> list[ControllerAction]:
        """Failed sessions and heartbeats due, replicas due another ensure, the periodic
        preferred-leader check -- in that order."""
        actions = self._liveness.check(now_ms)
        actions += self._startup.ensure_due(now_ms)
        actions += self._liveness.rebalance_due(now_ms)
        return actions

    def next_deadline(self, now_ms: int) -> int | None:
        """When :meth:`tick` next has work (None: nothing timed)."""
        ctx = self.ctx
        deadlines = [d for d in (ctx.detector.next_deadline(now_ms),) if d is not None]
        deadlines += list(ctx.next_ensure.values())
        if ctx.config.auto_leader_rebalance:
            deadlines.append(ctx.next_rebalance_ms)
        return min(deadlines) if deadlines else None

    def on_replica_unreachable(self, replica: ReplicaId, now_ms: int) -> list[ControllerAction]:
        """A hint from the driver that ``replica`` may be gone (its connection broke): beat
        it now rather than at its next interval. Only the heartbeat's outcome decides."""
        if not self.ctx.detector.expedite(replica):
            return []
        return self.tick(now_ms)

    # -- start-up and placement (startup.py) -------------------------------------------------
    def start(self, stored: dict[str, bytes], brokers: list[int], group_coordinators: int, now_ms: int) -> list[ControllerAction]:
        return self._startup.start(stored, brokers, group_coordinators, now_ms)

    def on_nodes(self, alive: list[str], hosts: Mapping[str, str] | None, now_ms: int) -> list[ControllerAction]:
        return self._startup.on_nodes(alive, hosts, now_ms)

    # -- topic administration (topics.py) ----------------------------------------------------
    def metadata(self, req: MetadataRequest) -> MetadataResponse:
        return self._topics.metadata(req)

    def create_topic(self, req: CreateTopicsRequest, now_ms: int) -> tuple[CreateTopicsResponse, list[ControllerAction]]:
        return self._topics.create_topic(req, now_ms)

    def delete_topic(self, req: DeleteTopicsRequest, now_ms: int) -> tuple[DeleteTopicsResponse, list[ControllerAction]]:
        return self._topics.delete_topic(req, now_ms)

    def describe_configs(self, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
        return self._topics.describe_configs(req)

    def alter_configs(self, req: IncrementalAlterConfigsRequest, now_ms: int) -> tuple[IncrementalAlterConfigsResponse, list[ControllerAction]]:
        return self._topics.alter_configs(req, now_ms)

    def create_partitions(self, req: CreatePartitionsRequest, now_ms: int) -> tuple[CreatePartitionsResponse, list[ControllerAction]]:
        return self._topics.create_partitions(req, now_ms)

    def init_producer_id(self, req: InitProducerIdRequest) -> tuple[InitProducerIdResponse, list[ControllerAction]]:
        return self._topics.init_producer_id(req)

    # -- ISR changes (isr_changes.py) --------------------------------------------------------
    def alter_partition(self, req: AlterPartitionRequest, now_ms: int) -> tuple[AlterPartitionResponse, list[ControllerAction]]:
        return self._isr.alter_partition(req, now_ms)

    # -- liveness, failover and elections (liveness.py) --------------------------------------
    def on_heartbeat_sent(self, replica: ReplicaId, now_ms: int) -> list[ControllerAction]:
        return self._liveness.on_heartbeat_sent(replica, now_ms)

    def on_heartbeat(self, replica: ReplicaId, status: HeartbeatResponse | None, now_ms: int, *, dead: bool=False) -> list[ControllerAction]:
        return self._liveness.on_heartbeat(replica, status, now_ms, dead=dead)

    def on_replica_dead(self, replica: ReplicaId, now_ms: int) -> list[ControllerAction]:
        return self._liveness.on_replica_dead(replica, now_ms)

    def restart_stuck(self, replica: ReplicaId, now_ms: int) -> bool:
        return self._liveness.restart_stuck(replica, now_ms)

    def on_replica_ensured(self, replica: ReplicaId, result: str, now_ms: int) -> list[ControllerAction]:
        return self._liveness.on_replica_ensured(replica, result, now_ms)

    def on_leader_and_isr_result(self, replica: ReplicaId, request: LeaderAndIsrRequest, response: LeaderAndIsrResponse | None, now_ms: int) -> list[ControllerAction]:
        return self._liveness.on_leader_and_isr_result(replica, request, response, now_ms)

    def rebalance_leaders(self, now_ms: int, imbalanced_only: bool=False) -> list[ControllerAction]:
        return self._liveness.rebalance_leaders(now_ms, imbalanced_only)

    # -- views -----------------------------------------------------------------------------
    def pending_preferred_moves(self) -> list[tuple[str, int, int]]:
        """(topic, partition, preferred replica) for each move the periodic preferred-leader
        check would make now (none when auto.leader.rebalance.enable is off)."""
        if not self.ctx.config.auto_leader_rebalance:
            return []
        return [(p.topic, p.partition, target) for p, target in self._liveness.preferred_moves(imbalanced_only=True)]

    def partition_counts(self) -> dict[str, int]:
        partitions, ctx = self.ctx.partitions.values(), self.ctx
        under = sum(1 for p in partitions if p.leader != NO_LEADER and len(p.isr) < len(p.replicas))
        offline = sum(1 for p in partitions if p.leader == NO_LEADER)
        return {
            "partitions": len(ctx.partitions),
            "under_replicated_partitions": under,
            "offline_partitions": offline,
            "offline_log_replicas": len(ctx.offline_logs),  # KIP-112: logs an I/O error took offline
            # back with another log directory (a wiped disk) and not yet in sync again
            "replaced_directory_replicas": len(ctx.trust.replaced),
        }

    def metrics_snapshot(self) -> dict[str, float]:
        snap: dict[str, Any] = self.ctx.metrics.snapshot()
        snap.update(self.partition_counts())
        snap["controller_epoch"] = self.ctx.controller_epoch
        return snap
