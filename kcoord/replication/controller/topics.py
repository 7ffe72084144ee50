"""Topic administration: Metadata, topic creation and deletion, configs, new partitions,
and producer ids.
"""

from __future__ import annotations

from dataclasses import replace
from ...protocol.controller import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    MetadataRequest,
    MetadataResponse,
    TopicMetadata,
)
from ...protocol.errors import ErrorCode, KafkaError
from ..controller_actions import ControllerAction, DeleteReplica, Persist, ReplicaId
from ..owned_producers import grant, owned_producer_key
from ..metadata import (
    NO_LEADER,
    PartitionState,
    TopicState,
    cluster_key,
    partition_key,
    topic_key,
    topic_metadata,
)
from ..topic_configs import apply_alter_ops, describe_config, plan_new_partitions
from ..topic_plan import plan_topic
from .context import ControllerContext
from .startup import StartUp
from .isr_changes import IsrChanges
from .liveness import Liveness


class TopicAdmin:
    """The requests that read or change topics (and hand out producer ids)."""

    def __init__(self, ctx: ControllerContext, startup: StartUp, isr: IsrChanges, liveness: Liveness) -> None:
        self.ctx = ctx
        self.startup = startup
        self.isr = isr
        self.liveness = liveness

    def metadata(self, req: MetadataRequest) -> MetadataResponse:
        names = sorted(self.ctx.topics) if req.topics is None else req.topics
        out: list[TopicMetadata] = []
        for name in names:
            topic = self.ctx.topics.get(name)
            if topic is None:
                out.append(TopicMetadata(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"))
                continue
            parts = [self.ctx.partitions[(name, i)] for i in range(topic.num_partitions)]
            offline = {p.partition: [b for b in p.replicas if not self.ctx.detector.is_alive(ReplicaId(name, p.partition, b))] for p in parts}
            out.append(topic_metadata(topic, parts, offline, self.ctx.effective_config(topic)))
        assert self.ctx.cluster is not None
        return MetadataResponse(
            cluster=self.ctx.name,
            controller_epoch=self.ctx.controller_epoch,
            brokers=list(self.ctx.cluster.brokers),
            topics=out,
        )

    def create_topic(self, req: CreateTopicsRequest, now_ms: int) -> tuple[CreateTopicsResponse, list[ControllerAction]]:
        try:
            assert self.ctx.cluster is not None
            topic, parts = plan_topic(req, self.ctx.cluster.brokers, self.ctx.topics, self.ctx.config.default_topic_config, now_ms)
        except KafkaError as exc:
            return CreateTopicsResponse(int(exc.code), exc.message), []
        actions = self._add_partitions(topic, parts, now_ms)
        return CreateTopicsResponse(topic=topic_metadata(topic, parts, config=self.ctx.effective_config(topic))), actions

    def _add_partitions(self, topic: TopicState, parts: list[PartitionState], now_ms: int) -> list[ControllerAction]:
        """New partitions of a topic being created or grown: persisted, then the topic
        record last -- it is what makes them exist on reload, so a change cut short by a
        store failure leaves no half topic (start() drops them) -- then their replicas are
        created and told their roles."""
        self.ctx.topics[topic.name] = topic
        actions: list[ControllerAction] = []
        for p in parts:
            self.ctx.partitions[(p.topic, p.partition)] = p
            actions.append(self.ctx.persist(p))
        actions.append(Persist(topic_key(topic.name), topic.encode()))
        for p in parts:
            for b in p.replicas:
                rid = ReplicaId(p.topic, p.partition, b)
                self.ctx.detector.add(rid, now_ms, self.ctx.config.replica_startup_grace_ms)
                actions += self.startup.ensure_replica(rid, now_ms)
        for p in parts:
            actions += self.ctx.send_state(p, p.replicas)
        return actions

    def delete_topic(self, req: DeleteTopicsRequest, now_ms: int) -> tuple[DeleteTopicsResponse, list[ControllerAction]]:
        topic = self.ctx.topics.get(req.name)
        if topic is None:
            return DeleteTopicsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {req.name!r} does not exist"), []
        if topic.internal:
            return DeleteTopicsResponse(ErrorCode.POLICY_VIOLATION, f"{req.name!r} is an internal topic and cannot be deleted"), []
        actions: list[ControllerAction] = []
        for i in range(topic.num_partitions):
            p = self.ctx.partitions.pop((req.name, i))
            actions.append(Persist(partition_key(req.name, i), None))
            for b in p.replicas:
                rid = ReplicaId(req.name, i, b)
                self.ctx.detector.remove(rid)
                self.ctx.next_ensure.pop(rid, None)
                self.ctx.last_status.pop(rid, None)
                self.ctx.offline_logs.pop(rid, None)
                self.ctx.trust.forget(rid)
                actions.append(DeleteReplica(rid))
            self.ctx.failover_started.pop((req.name, i), None)
        del self.ctx.topics[req.name]
        actions.insert(0, Persist(topic_key(req.name), None))
        return DeleteTopicsResponse(), actions

    def describe_configs(self, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
        topic = self.ctx.topics.get(req.topic)
        if topic is None:
            return DescribeConfigsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {req.topic!r} does not exist", topic=req.topic)
        try:
            configs = describe_config(topic, self.ctx.config.default_topic_config, req.keys)
        except KafkaError as exc:
            return DescribeConfigsResponse(int(exc.code), exc.message, topic=req.topic)
        return DescribeConfigsResponse(topic=req.topic, configs=configs)

    def alter_configs(self, req: IncrementalAlterConfigsRequest, now_ms: int) -> tuple[IncrementalAlterConfigsResponse, list[ControllerAction]]:
        """Persist the topic's new config (after any ELR it voids is cleared), then tell
        every live replica (a LeaderAndIsr at the partition's current epochs carries it;
        replicas apply it without a restart, and replicas created or recovered later get it
        as they always get the config)."""
        topic = self.ctx.topics.get(req.topic)
        if topic is None:
            return IncrementalAlterConfigsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {req.topic!r} does not exist"), []
        try:
            config = apply_alter_ops(topic, req.ops, self.ctx.config.default_topic_config)
        except KafkaError as exc:
            return IncrementalAlterConfigsResponse(int(exc.code), exc.message), []
        after = replace(topic, config=config, config_version=topic.config_version + 1)
        described = describe_config(after, self.ctx.config.default_topic_config)
        if req.validate_only or config == topic.config:
            return IncrementalAlterConfigsResponse(configs=described), []
        actions: list[ControllerAction] = []
        if self.isr.elr_basis(after) != self.isr.elr_basis(topic):
            # An ELR holds every acknowledged record only under the min ISR and durability
            # it was formed under (the leader's HW stood still below that min ISR): clear it
            # (KIP-966's ClearElrRecord; recomputed, it could name replicas missing records
            # committed under a lower min ISR). Written before the topic record, so that no
            # reload finds the new config next to an old ELR; a cleared ELR is safe under
            # either config.
            for i in range(after.num_partitions):
                actions += self.isr.clear_elr(self.ctx.partitions[(after.name, i)])
        self.ctx.topics[req.topic] = after
        actions.append(Persist(topic_key(after.name), after.encode()))
        for i in range(after.num_partitions):
            p = self.ctx.partitions[(after.name, i)]
            if p.leader == NO_LEADER:
                # The new config may make a leader electable (unclean.leader.election.enable
                # set to recover a partition whose every in-sync copy is gone); the election
                # announces the config with the new state.
                elected = self.liveness.elect(p, now_ms, failed_leader=False)
                if elected:
                    actions += elected
                    continue
            alive = self.ctx.alive(p)
            actions += self.ctx.send_state(p, [b for b in p.replicas if alive(b)])
        return IncrementalAlterConfigsResponse(configs=described), actions

    def create_partitions(self, req: CreatePartitionsRequest, now_ms: int) -> tuple[CreatePartitionsResponse, list[ControllerAction]]:
        """Like a topic's creation, for the new partitions only (_add_partitions)."""
        topic = self.ctx.topics.get(req.topic)
        if topic is None:
            return CreatePartitionsResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {req.topic!r} does not exist"), []
        assert self.ctx.cluster is not None
        try:
            parts = plan_new_partitions(topic, req.count, self.ctx.cluster.brokers, req.assignment)
        except KafkaError as exc:
            return CreatePartitionsResponse(int(exc.code), exc.message), []
        grown = replace(topic, num_partitions=req.count)
        old = [self.ctx.partitions[(topic.name, i)] for i in range(topic.num_partitions)]
        config = self.ctx.effective_config(topic)
        if req.validate_only:
            return CreatePartitionsResponse(topic=topic_metadata(grown, old + parts, config=config)), []
        actions = self._add_partitions(grown, parts, now_ms)
        return CreatePartitionsResponse(topic=topic_metadata(grown, old + parts, config=config)), actions

    def init_producer_id(self, req: InitProducerIdRequest) -> tuple[InitProducerIdResponse, list[ControllerAction]]:
        assert self.ctx.cluster is not None
        if req.owner is not None:
            return self._owned_producer(req)
        if req.count < 1 or req.count > 1_000_000:
            return InitProducerIdResponse(ErrorCode.INVALID_REQUEST, f"count must be in 1..1000000, got {req.count}"), []
        pid = self.ctx.cluster.next_producer_id
        self.ctx.cluster.next_producer_id += req.count
        return InitProducerIdResponse(producer_id=pid, producer_epoch=0, count=req.count), [Persist(cluster_key(), self.ctx.cluster.encode())]

    def _owned_producer(self, req: InitProducerIdRequest) -> tuple[InitProducerIdResponse, list[ControllerAction]]:
        """An owner's producer id at an epoch for one incarnation (owned_producers.py);
        persisted before the answer."""
        assert self.ctx.cluster is not None and req.owner is not None
        actions: list[ControllerAction] = []

        def fresh_id() -> int:
            assert self.ctx.cluster is not None
            pid = self.ctx.cluster.next_producer_id
            self.ctx.cluster.next_producer_id += 1
            actions.append(Persist(cluster_key(), self.ctx.cluster.encode()))  # never handed out twice
            return pid

        record, response = grant(self.ctx.owned_producers.get(req.owner), req, fresh_id)
        if record is not None:
            self.ctx.owned_producers[req.owner] = record
            actions.append(Persist(owned_producer_key(req.owner), record.encode()))
        return response, actions
