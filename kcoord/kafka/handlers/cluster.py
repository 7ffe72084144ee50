"""ApiVersions, Metadata, FindCoordinator, InitProducerId, CreateTopics, DeleteTopics,
DescribeConfigs: Kafka requests mapped onto the controller's msgpack messages (a
transactional InitProducerId goes on to handlers/transactions.py)."""

from __future__ import annotations

import logging
from typing import Any

from kafka.protocol.admin import (
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DescribeConfigsResponse,
)
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import InitProducerIdResponse

from ...group.placement import coordinator_for
from ...txn.placement import coordinator_for as txn_coordinator_for
from ...protocol.controller import CreateTopicsRequest, DeleteTopicsRequest, InitProducerIdRequest
from ...protocol.controller import DescribeConfigsRequest as ControllerDescribeConfigs
from ...protocol.errors import ErrorCode
from ...replication.topic_plan import default_replication_factor
from ...security.acl import CLUSTER_NAME, ACLOperation as Op, ResourceType as RT
from ...security.authorizer import OPERATIONS
from ._base import OFFSETS_TOPIC, ListenerContext, coordinator_broker
from .transactions import init_transactional_producer_id

logger = logging.getLogger("kcoord.kafka")

E = ErrorCode
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1  # FindCoordinator key types


# -- ApiVersions (18) ----------------------------------------------------------------------


def api_versions_handler(apis: dict[int, Any]):
    async def handle(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
        return _api_versions(apis, 0)

    return handle


def _api_versions(apis: dict[int, Any], code: int) -> Any:
    R = ApiVersionsResponse
    keys = [R.ApiVersion(api_key=a.key, min_version=a.min_version, max_version=a.max_version) for a in sorted(apis.values(), key=lambda a: a.key)]
    return R(error_code=code, api_keys=keys, throttle_time_ms=0)


def api_versions_error(apis: dict[int, Any]):
    def error(req: Any, version: int, code: int, message: str | None) -> Any:
        return _api_versions(apis, code)

    return error


# -- Metadata (3) --------------------------------------------------------------------------


def _operations(ctx: ListenerContext, conn: Any, resource_type: RT, name: str) -> set[int]:
    """Kafka's authorized operations (a bit field on the wire; kafka-python takes the set
    of bit numbers): every operation of the type without an authorizer."""
    ops = OPERATIONS[resource_type] if ctx.security is None else ctx.security.authorized_operations(conn, resource_type, name)
    return {int(op) for op in ops}


async def metadata(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """Kafka's rules with ACLs: only topics the principal may DESCRIBE are listed; a topic
    named but not describable is answered TOPIC_AUTHORIZATION_FAILED without saying
    whether it exists; auto-creating a topic needs CREATE on the cluster or the topic."""
    R = MetadataResponse
    view = await ctx.broker_view()
    wanted = None if req.topics is None else [t.name for t in req.topics]
    if wanted == [] and version == 0:
        wanted = None
    denied: list[str] = []
    if ctx.security is not None and wanted is not None:
        denied = [n for n in wanted if not ctx.allowed(conn, Op.DESCRIBE, RT.TOPIC, n)]
        wanted = [n for n in wanted if n not in denied]
    if wanted == [] and denied:
        from ...protocol.controller import MetadataResponse as Answer

        resp = Answer()
    else:
        resp = await ctx.backend.metadata(wanted)
    topic_ops = version >= 8 and bool(getattr(req, "include_topic_authorized_operations", False))
    topics = []
    if resp.error_code:
        for name in wanted or []:
            topics.append(R.MetadataResponseTopic(error_code=resp.error_code, name=name, is_internal=False, partitions=[]))
    else:
        by_name = {t.name: t for t in resp.topics}
        for name in wanted if wanted is not None else sorted(by_name):
            if wanted is None and not ctx.allowed(conn, Op.DESCRIBE, RT.TOPIC, name):
                continue  # listing everything lists what this principal may describe
            t = by_name.get(name)
            if t is None or t.error_code == E.UNKNOWN_TOPIC_OR_PARTITION:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
                if wanted is not None and getattr(req, "allow_auto_topic_creation", True) and ctx.auto_create_topics:
                    if ctx.allowed(conn, Op.CREATE, RT.CLUSTER, CLUSTER_NAME) or ctx.allowed(conn, Op.CREATE, RT.TOPIC, name):
                        code = await _auto_create(ctx, name, view)
                    else:
                        code = E.TOPIC_AUTHORIZATION_FAILED
                topics.append(R.MetadataResponseTopic(error_code=code, name=name, is_internal=False, partitions=[]))
                continue
            parts = [
                R.MetadataResponseTopic.MetadataResponsePartition(
                    error_code=E.LEADER_NOT_AVAILABLE if p.leader < 0 else p.error_code,
                    partition_index=p.partition,
                    leader_id=p.leader,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=list(p.replicas),
                    isr_nodes=list(p.isr),
                    offline_replicas=list(p.offline_replicas),
                )
                for p in sorted(t.partitions, key=lambda p: p.partition)
            ]
            topic = R.MetadataResponseTopic(
                error_code=t.error_code,
                name=t.name,
                is_internal=bool(t.internal or t.name == OFFSETS_TOPIC),
                partitions=parts,
            )
            if topic_ops:
                topic.authorized_operations = _operations(ctx, conn, RT.TOPIC, t.name)
            topics.append(topic)
    topics += [R.MetadataResponseTopic(error_code=E.TOPIC_AUTHORIZATION_FAILED, name=n, is_internal=False, partitions=[]) for n in denied]
    answer = R(
        throttle_time_ms=0,
        brokers=[R.MetadataResponseBroker(node_id=b, host=h, port=p, rack=None) for b, h, p in view.brokers],
        cluster_id=ctx.cluster_id or None,
        controller_id=view.controller_id,
        topics=topics,
    )
    if version >= 8 and getattr(req, "include_cluster_authorized_operations", False):
        allowed = ctx.allowed(conn, Op.DESCRIBE, RT.CLUSTER, CLUSTER_NAME)
        answer.authorized_operations = _operations(ctx, conn, RT.CLUSTER, CLUSTER_NAME) if allowed else set()
    return answer


async def _auto_create(ctx: ListenerContext, name: str, view: Any) -> int:
    """Kafka's auto.create.topics.enable: create ``name`` with the defaults; the client is
    told LEADER_NOT_AVAILABLE and asks again, as with Kafka."""
    if not _valid_topic_name(name):
        return E.INVALID_TOPIC_EXCEPTION
    rf = default_replication_factor(len(view.brokers), ctx.default_replication_factor)
    resp = await ctx.backend.create_topic(CreateTopicsRequest(name=name, partitions=ctx.default_partitions, replication_factor=rf))
    if resp.error_code in (0, E.TOPIC_ALREADY_EXISTS):
        logger.info("auto-created topic %r (%d partitions, RF %d)", name, ctx.default_partitions, rf)
        return E.LEADER_NOT_AVAILABLE
    return resp.error_code


def _valid_topic_name(name: str) -> bool:
    import re

    return bool(name) and len(name) <= 249 and name not in (".", "..") and re.fullmatch(r"[A-Za-z0-9._-]+", name) is not None


def metadata_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = MetadataResponse
    names = [] if req is None or req.topics is None else [t.name for t in req.topics]
    return R(brokers=[], controller_id=-1, topics=[R.MetadataResponseTopic(error_code=code, name=n, is_internal=False, partitions=[]) for n in names])


# -- FindCoordinator (10) -------------------------------------------------------------------


async def find_coordinator(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """Key type 0: a group's coordinator; 1: a transactional id's (``kcoord.txn.coordinator_for``).
    Any listener reaches any coordinator, so the answer is a broker at a listener; which one
    is a function of the coordinator, so ListGroups/ListTransactions on each broker list
    each group and transaction once."""
    R = FindCoordinatorResponse
    key_type = getattr(req, "key_type", 0)
    if key_type == KEY_TYPE_TRANSACTION:
        if not ctx.allowed(conn, Op.DESCRIBE, RT.TRANSACTIONAL_ID, req.key):
            return R(error_code=E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error_message=None, node_id=-1, host="", port=-1)
        count = await ctx.backend.transaction_coordinators()
        if count < 1:
            return R(error_code=E.COORDINATOR_NOT_AVAILABLE, error_message="this kcoord cluster has no transaction coordinators", node_id=-1, host="", port=-1)
        view = await ctx.broker_view()
        broker = coordinator_broker(view, txn_coordinator_for(req.key, count))
        host, port = view.address(broker)
        return R(error_code=0, error_message=None, node_id=broker, host=host, port=port)
    if key_type != KEY_TYPE_GROUP:
        return R(error_code=E.INVALID_REQUEST, error_message=f"coordinator key type {key_type}: kcoord serves 0 (group) and 1 (transaction)", node_id=-1, host="", port=-1)
    if not ctx.allowed(conn, Op.DESCRIBE, RT.GROUP, req.key):
        return R(error_code=E.GROUP_AUTHORIZATION_FAILED, error_message=None, node_id=-1, host="", port=-1)
    count = await ctx.backend.group_coordinators()
    if count < 1:
        return R(error_code=E.COORDINATOR_NOT_AVAILABLE, error_message="this kcoord cluster has no group coordinators", node_id=-1, host="", port=-1)
    view = await ctx.broker_view()
    # Any listener reaches any coordinator; the broker named is a function of the group's
    # coordinator so that ListGroups on each broker lists each group once.
    broker = coordinator_broker(view, group_index(req.key, count))
    host, port = view.address(broker)
    return R(error_code=0, error_message=None, node_id=broker, host=host, port=port)


def find_coordinator_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return FindCoordinatorResponse(error_code=code, error_message=message, node_id=-1, host="", port=-1)


def group_index(group_id: str, count: int) -> int:
    return coordinator_for(group_id, count)


# -- InitProducerId (22) --------------------------------------------------------------------


async def init_producer_id(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """With a transactional id: its transaction coordinator (handlers/transactions.py).
    Without: the controller's allocator, a fresh producer id at epoch 0 (an idempotent
    producer's KIP-360 bump with its id and epoch gets a fresh id too)."""
    R = InitProducerIdResponse
    if req.transactional_id is not None:
        return await init_transactional_producer_id(ctx, conn, req, version)
    # KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on any topic
    if not (ctx.allowed(conn, Op.IDEMPOTENT_WRITE, RT.CLUSTER, CLUSTER_NAME) or ctx.allowed_any(conn, Op.WRITE, RT.TOPIC)):
        return R(error_code=E.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1)
    resp = await ctx.backend.init_producer_id(InitProducerIdRequest(count=1))
    if resp.error_code:
        code = E.COORDINATOR_NOT_AVAILABLE if resp.error_code in (E.NOT_CONTROLLER, E.REQUEST_TIMED_OUT) else resp.error_code
        return R(error_code=code, producer_id=-1, producer_epoch=-1)
    return R(error_code=0, producer_id=resp.producer_id, producer_epoch=resp.producer_epoch)


def init_producer_id_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return InitProducerIdResponse(error_code=code, producer_id=-1, producer_epoch=-1)


# -- CreateTopics (19) ----------------------------------------------------------------------


async def create_topics(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """CREATE on the cluster, or on each topic (TOPIC_AUTHORIZATION_FAILED)."""
    R = CreateTopicsResponse
    view = await ctx.broker_view()
    results = []
    cluster_create = ctx.allowed(conn, Op.CREATE, RT.CLUSTER, CLUSTER_NAME)
    for t in req.topics:
        if not cluster_create and not ctx.allowed(conn, Op.CREATE, RT.TOPIC, t.name):
            results.append(R.CreatableTopicResult(name=t.name, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed."))
            continue
        partitions = t.num_partitions if t.num_partitions > 0 else ctx.default_partitions
        rf = t.replication_factor if t.replication_factor > 0 else default_replication_factor(len(view.brokers), ctx.default_replication_factor)
        assignment = None
        if t.assignments:
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            partitions = len(assignment)
            rf = len(next(iter(assignment.values())))
        config = {c.name: c.value for c in (t.configs or []) if c.value is not None}
        if not _valid_topic_name(t.name):
            results.append(R.CreatableTopicResult(name=t.name, error_code=E.INVALID_TOPIC_EXCEPTION, error_message=f"invalid topic name {t.name!r}"))
            continue
        if getattr(req, "validate_only", False):
            results.append(R.CreatableTopicResult(name=t.name, error_code=0, error_message=None, num_partitions=partitions, replication_factor=rf))
            continue
        resp = await ctx.backend.create_topic(
            CreateTopicsRequest(name=t.name, partitions=partitions, replication_factor=rf, config=config or None, assignment=assignment)
        )
        results.append(
            R.CreatableTopicResult(
                name=t.name, error_code=resp.error_code, error_message=resp.error_message, num_partitions=partitions, replication_factor=rf
            )
        )
    return R(throttle_time_ms=0, topics=results)


def create_topics_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = CreateTopicsResponse
    topics = [] if req is None else req.topics
    return R(topics=[R.CreatableTopicResult(name=t.name, error_code=code, error_message=message) for t in topics])


# -- DeleteTopics (20) ----------------------------------------------------------------------


async def delete_topics(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = DeleteTopicsResponse
    out = []
    for name in req.topic_names or []:
        if not ctx.allowed(conn, Op.DELETE, RT.TOPIC, name):
            out.append(R.DeletableTopicResult(name=name, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message="Authorization failed."))
            continue
        resp = await ctx.backend.delete_topic(DeleteTopicsRequest(name=name))
        out.append(R.DeletableTopicResult(name=name, error_code=resp.error_code, error_message=resp.error_message))
    return R(throttle_time_ms=0, responses=out)


def delete_topics_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = DeleteTopicsResponse
    names = [] if req is None else (req.topic_names or [])
    return R(responses=[R.DeletableTopicResult(name=n, error_code=code, error_message=message) for n in names])


# -- DescribeConfigs (32) -------------------------------------------------------------------

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG
# Kafka topic keys kcoord has no setting for, described as Kafka's defaults so that tools
# listing them find them (a kcoord topic keeps the producer's compression).
LISTENER_ONLY_DEFAULTS = {"compression.type": "producer"}


async def describe_configs(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = DescribeConfigsResponse
    C = R.DescribeConfigsResult.DescribeConfigsResourceResult
    results = []
    for res in req.resources:
        keys = None if res.configuration_keys is None else set(res.configuration_keys)
        refused = config_authorization_error(ctx, conn, res.resource_type, res.resource_name, Op.DESCRIBE_CONFIGS)
        if refused:
            results.append(R.DescribeConfigsResult(error_code=refused, error_message=None, resource_type=res.resource_type, resource_name=res.resource_name, configs=[]))
            continue
        if res.resource_type == RESOURCE_TOPIC:
            # The controller's DescribeConfigs (value and Kafka's config source per key),
            # as Admin.describe_configs gets it.
            answer = await ctx.backend.describe_configs(ControllerDescribeConfigs(topic=res.resource_name))
            if answer.error_code:
                results.append(R.DescribeConfigsResult(error_code=answer.error_code, error_message=answer.error_message, resource_type=res.resource_type, resource_name=res.resource_name, configs=[]))
                continue
            entries = {e.name: (e.value, e.source, e.read_only) for e in answer.configs}
            for k, v in LISTENER_ONLY_DEFAULTS.items():
                entries.setdefault(k, (v, SOURCE_DEFAULT, True))
            configs = [
                C(name=k, value=v, read_only=ro, config_source=src, is_default=src == SOURCE_DEFAULT, is_sensitive=False, synonyms=[], config_type=0, documentation=None)
                for k, (v, src, ro) in sorted(entries.items())
                if keys is None or k in keys
            ]
            results.append(R.DescribeConfigsResult(error_code=0, error_message=None, resource_type=res.resource_type, resource_name=res.resource_name, configs=configs))
        elif res.resource_type == RESOURCE_BROKER:
            view = await ctx.broker_view()
            info = {"broker.id": res.resource_name, "auto.create.topics.enable": str(ctx.auto_create_topics).lower(), "num.partitions": str(ctx.default_partitions), "default.replication.factor": str(default_replication_factor(len(view.brokers), ctx.default_replication_factor))}
            configs = [
                C(name=k, value=v, read_only=True, config_source=SOURCE_DEFAULT, is_default=True, is_sensitive=False, synonyms=[], config_type=0, documentation=None)
                for k, v in sorted(info.items())
                if keys is None or k in keys
            ]
            results.append(R.DescribeConfigsResult(error_code=0, error_message=None, resource_type=res.resource_type, resource_name=res.resource_name, configs=configs))
        else:
            results.append(R.DescribeConfigsResult(error_code=E.INVALID_REQUEST, error_message=f"kcoord describes topic (2) and broker (4) configs, not resource type {res.resource_type}", resource_type=res.resource_type, resource_name=res.resource_name, configs=[]))
    return R(throttle_time_ms=0, results=results)


def config_authorization_error(ctx: ListenerContext, conn: Any, resource_type: int, name: str, operation: Op) -> int:
    """DESCRIBE_CONFIGS/ALTER_CONFIGS on a topic, or on the cluster for a broker's configs:
    0, or the authorization error Kafka answers."""
    if resource_type == RESOURCE_TOPIC and not ctx.allowed(conn, operation, RT.TOPIC, name):
        return E.TOPIC_AUTHORIZATION_FAILED
    if resource_type == RESOURCE_BROKER and not ctx.allowed(conn, operation, RT.CLUSTER, CLUSTER_NAME):
        return E.CLUSTER_AUTHORIZATION_FAILED
    return 0


def describe_configs_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = DescribeConfigsResponse
    resources = [] if req is None else req.resources
    return R(results=[R.DescribeConfigsResult(error_code=code, error_message=message, resource_type=r.resource_type, resource_name=r.resource_name, configs=[]) for r in resources])
