"""AlterConfigs, IncrementalAlterConfigs, CreatePartitions and DeleteRecords: the admin
calls operators' tools make (kafka-configs, kafka-topics --alter, kafka-delete-records),
mapped onto what ``kcoord.Admin`` calls, each behind its ACL.

* IncrementalAlterConfigs (v0-1) sets or deletes topic keys (the controller refuses
  APPEND and SUBTRACT, and validates like a creation config); ALTER_CONFIGS on the topic.
* AlterConfigs (v0-2) is Kafka's legacy form: the given keys become the topic's whole
  config -- a key set on the topic and not named goes back to its default.
* Broker resources: ALTER_CONFIGS on the cluster, then INVALID_REQUEST -- kcoord's broker
  configs are set at deploy time, not changed at run time.
* CreatePartitions (v0-3): ALTER on the topic. DeleteRecords (v0-2): DELETE on the topic;
  each partition's leader moves its log start offset.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsResponse,
    CreatePartitionsResponse,
    DeleteRecordsResponse,
    IncrementalAlterConfigsResponse,
)

from ...protocol.controller import AlterConfigOp, CreatePartitionsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest
from ...protocol.errors import ErrorCode
from ...protocol.replication import DeleteRecordsRequest
from ...replication.topic_configs import AlterOp, ConfigSource
from ...security.acl import ACLOperation as Op, ResourceType as RT
from ._base import ListenerContext
from .cluster import RESOURCE_BROKER, RESOURCE_TOPIC, config_authorization_error

E = ErrorCode
BROKER_CONFIGS_STATIC = "kcoord's broker configs are set when the cluster is deployed (broker_config), not changed at run time"


async def _alter_topic(ctx: ListenerContext, topic: str, ops: list[AlterConfigOp], validate_only: bool) -> tuple[int, str | None]:
    resp = await ctx.backend.alter_configs(IncrementalAlterConfigsRequest(topic=topic, ops=ops, validate_only=validate_only))
    return resp.error_code, resp.error_message


async def _alter_resources(ctx: ListenerContext, conn: Any, req: Any, ops_for) -> list[tuple[int, str | None, Any]]:
    out = []
    for res in req.resources:
        code = config_authorization_error(ctx, conn, res.resource_type, res.resource_name, Op.ALTER_CONFIGS)
        message = None
        if code:
            pass
        elif res.resource_type == RESOURCE_BROKER:
            code, message = E.INVALID_REQUEST, BROKER_CONFIGS_STATIC
        elif res.resource_type != RESOURCE_TOPIC:
            code, message = E.INVALID_REQUEST, f"kcoord has topic (2) and broker (4) configs, not resource type {res.resource_type}"
        else:
            ops = await ops_for(res)
            if isinstance(ops, tuple):
                code, message = ops
            else:
                code, message = await _alter_topic(ctx, res.resource_name, ops, bool(req.validate_only))
        out.append((code, message, res))
    return out


def _alter_response(R: Any, results: list[tuple[int, str | None, Any]]) -> Any:
    """An (Incremental)AlterConfigs response of ``R``: per resource, its error code and message."""
    return R(throttle_time_ms=0, responses=[R.AlterConfigsResourceResponse(error_code=c, error_message=m, resource_type=r.resource_type, resource_name=r.resource_name) for c, m, r in results])


# -- IncrementalAlterConfigs (44) -------------------------------------------------------------


async def incremental_alter_configs(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    async def ops(res: Any) -> list[AlterConfigOp]:
        return [AlterConfigOp(name=c.name, op=c.config_operation, value=c.value) for c in res.configs]

    return _alter_response(IncrementalAlterConfigsResponse, await _alter_resources(ctx, conn, req, ops))


def incremental_alter_configs_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return _alter_response(IncrementalAlterConfigsResponse, [(code, message, r) for r in ([] if req is None else req.resources)])


# -- AlterConfigs (33) ------------------------------------------------------------------------


async def alter_configs(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    async def ops(res: Any) -> list[AlterConfigOp] | tuple[int, str | None]:
        # the whole set: keys set on the topic today and not named go back to their default
        current = await ctx.backend.describe_configs(DescribeConfigsRequest(topic=res.resource_name))
        if current.error_code:
            return current.error_code, current.error_message
        given = {c.name: c.value for c in res.configs}
        out = [AlterConfigOp(name=k, op=AlterOp.DELETE if v is None else AlterOp.SET, value=v) for k, v in given.items()]
        out += [AlterConfigOp(name=e.name, op=AlterOp.DELETE) for e in current.configs if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG and e.name not in given]
        return out

    return _alter_response(AlterConfigsResponse, await _alter_resources(ctx, conn, req, ops))


def alter_configs_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return _alter_response(AlterConfigsResponse, [(code, message, r) for r in ([] if req is None else req.resources)])


# -- CreatePartitions (37) --------------------------------------------------------------------


async def create_partitions(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = CreatePartitionsResponse
    results = []
    for t in req.topics:
        if not ctx.allowed(conn, Op.ALTER, RT.TOPIC, t.name):
            results.append(R.CreatePartitionsTopicResult(name=t.name, error_code=E.TOPIC_AUTHORIZATION_FAILED, error_message="The topic authorization is failed."))
            continue
        assignment = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        resp = await ctx.backend.create_partitions(CreatePartitionsRequest(topic=t.name, count=t.count, assignment=assignment, validate_only=bool(req.validate_only)))
        results.append(R.CreatePartitionsTopicResult(name=t.name, error_code=resp.error_code, error_message=resp.error_message))
    return R(throttle_time_ms=0, results=results)


def create_partitions_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = CreatePartitionsResponse
    topics = [] if req is None else req.topics
    return R(throttle_time_ms=0, results=[R.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message) for t in topics])


# -- DeleteRecords (21) -----------------------------------------------------------------------


async def delete_records(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = DeleteRecordsResponse
    T = R.DeleteRecordsTopicResult
    P = T.DeleteRecordsPartitionResult

    async def one(topic: str, p: Any) -> Any:
        resp = await ctx.backend.delete_records(DeleteRecordsRequest(topic=topic, partition=p.partition_index, offset=p.offset))
        return P(partition_index=p.partition_index, low_watermark=resp.low_watermark if not resp.error_code else -1, error_code=resp.error_code)

    topics = []
    for t in req.topics:
        if not ctx.allowed(conn, Op.DELETE, RT.TOPIC, t.name):
            topics.append(T(name=t.name, partitions=[P(partition_index=p.partition_index, low_watermark=-1, error_code=E.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions]))
            continue
        topics.append(T(name=t.name, partitions=list(await asyncio.gather(*(one(t.name, p) for p in t.partitions)))))
    return R(throttle_time_ms=0, topics=topics)


def delete_records_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = DeleteRecordsResponse
    T = R.DeleteRecordsTopicResult
    P = T.DeleteRecordsPartitionResult
    topics = [] if req is None else req.topics
    return R(throttle_time_ms=0, topics=[T(name=t.name, partitions=[P(partition_index=p.partition_index, low_watermark=-1, error_code=code) for p in t.partitions]) for t in topics])
