"""The classic group protocol, field by field onto kcoord's group coordinators.

kcoord's coordinators implement Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup/
OffsetCommit/OffsetFetch semantics and treat member metadata and assignments as opaque
bytes, so a Kafka client's ConsumerProtocol payloads pass through untouched. The group
goes to coordinator ``coordinator_for(group_id, N)``, as with kcoord's own clients.

JoinGroup before v4 has no MEMBER_ID_REQUIRED round (KIP-394): for those clients the
listener makes the second join itself with the member id the coordinator assigned.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.admin import DescribeGroupsResponse, ListGroupsResponse

from ...group.placement import coordinator_for
from ...protocol import group as G
from ...protocol.errors import ErrorCode
from ...security.acl import CLUSTER_NAME, ACLOperation as Op, ResourceType as RT
from ._base import ListenerContext

E = ErrorCode


async def _coordinator(ctx: ListenerContext, group_id: str) -> int | None:
    count = await ctx.backend.group_coordinators()
    if count < 1:
        return None
    return coordinator_for(group_id, count)


async def _call(ctx: ListenerContext, method: str, req: Any, group_id: str) -> Any:
    index = await _coordinator(ctx, group_id)
    if index is None:
        return G.error_response(req, E.COORDINATOR_NOT_AVAILABLE, "no group coordinators")
    return await ctx.backend.group_call(method, req, index)


# -- JoinGroup (11) ------------------------------------------------------------------------


async def join_group(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = JoinGroupResponse
    if not ctx.allowed(conn, Op.READ, RT.GROUP, req.group_id):
        return join_group_error(req, version, E.GROUP_AUTHORIZATION_FAILED, None)
    kreq = G.JoinGroupRequest(
        group_id=req.group_id,
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms,
        member_id=req.member_id or "",
        group_instance_id=getattr(req, "group_instance_id", None) if version >= 5 else None,
        protocol_type=req.protocol_type,
        protocols=[G.JoinGroupProtocol(name=p.name, metadata=bytes(p.metadata or b"")) for p in req.protocols],
        client_id=conn.client_id,
        client_host=conn.client_host,
    )
    resp = await _call(ctx, "join_group", kreq, req.group_id)
    if resp.error_code == E.MEMBER_ID_REQUIRED and version < 4 and resp.member_id:
        kreq.member_id = resp.member_id
        resp = await _call(ctx, "join_group", kreq, req.group_id)
    return R(
        throttle_time_ms=0,
        error_code=resp.error_code,
        generation_id=resp.generation_id,
        protocol_type=resp.protocol_type,
        protocol_name=resp.protocol_name if resp.protocol_name is not None else ("" if version < 7 else None),
        leader=resp.leader or "",
        member_id=resp.member_id or "",
        members=[R.JoinGroupResponseMember(member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata) for m in resp.members],
    )


def join_group_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return JoinGroupResponse(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_name="", leader="", member_id=getattr(req, "member_id", "") or "", members=[])


# -- SyncGroup (14) ------------------------------------------------------------------------


async def sync_group(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    if not ctx.allowed(conn, Op.READ, RT.GROUP, req.group_id):
        return sync_group_error(req, version, E.GROUP_AUTHORIZATION_FAILED, None)
    kreq = G.SyncGroupRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None) if version >= 3 else None,
        protocol_type=getattr(req, "protocol_type", None) if version >= 5 else None,
        protocol_name=getattr(req, "protocol_name", None) if version >= 5 else None,
        assignments=[G.SyncGroupAssignment(member_id=a.member_id, assignment=bytes(a.assignment or b"")) for a in req.assignments],
    )
    resp = await _call(ctx, "sync_group", kreq, req.group_id)
    return SyncGroupResponse(throttle_time_ms=0, error_code=resp.error_code, protocol_type=resp.protocol_type, protocol_name=resp.protocol_name, assignment=resp.assignment or b"")


def sync_group_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return SyncGroupResponse(throttle_time_ms=0, error_code=code, assignment=b"")


# -- Heartbeat (12) ------------------------------------------------------------------------


async def heartbeat(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    if not ctx.allowed(conn, Op.READ, RT.GROUP, req.group_id):
        return heartbeat_error(req, version, E.GROUP_AUTHORIZATION_FAILED, None)
    kreq = G.GroupHeartbeatRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=getattr(req, "group_instance_id", None) if version >= 3 else None,
    )
    resp = await _call(ctx, "heartbeat", kreq, req.group_id)
    return HeartbeatResponse(throttle_time_ms=0, error_code=resp.error_code)


def heartbeat_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


# -- LeaveGroup (13) -----------------------------------------------------------------------


async def leave_group(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = LeaveGroupResponse
    if not ctx.allowed(conn, Op.READ, RT.GROUP, req.group_id):
        return leave_group_error(req, version, E.GROUP_AUTHORIZATION_FAILED, None)
    if version >= 3:
        members = [G.LeaveGroupMember(member_id=m.member_id or "", group_instance_id=m.group_instance_id) for m in req.members]
    else:
        members = [G.LeaveGroupMember(member_id=req.member_id)]
    resp = await _call(ctx, "leave_group", G.LeaveGroupRequest(group_id=req.group_id, members=members), req.group_id)
    code = resp.error_code
    if version < 3 and not code and resp.members:
        code = resp.members[0].error_code
    return R(
        throttle_time_ms=0,
        error_code=code,
        members=[R.MemberResponse(member_id=m.member_id, group_instance_id=m.group_instance_id, error_code=m.error_code) for m in resp.members],
    )


def leave_group_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return LeaveGroupResponse(throttle_time_ms=0, error_code=code, members=[])


# -- OffsetCommit (8) ----------------------------------------------------------------------


async def offset_commit(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """READ on the group (else GROUP_AUTHORIZATION_FAILED everywhere), then READ on each
    topic: a topic refused is answered TOPIC_AUTHORIZATION_FAILED and not committed."""
    R = OffsetCommitResponse
    if not ctx.allowed(conn, Op.READ, RT.GROUP, req.group_id):
        return offset_commit_error(req, version, E.GROUP_AUTHORIZATION_FAILED, None)
    refused = {t.name for t in req.topics if not ctx.allowed(conn, Op.READ, RT.TOPIC, t.name)}
    topics = {
        t.name: {
            p.partition_index: G.OffsetCommitPartition(
                offset=p.committed_offset,
                metadata=p.committed_metadata,
                leader_epoch=getattr(p, "committed_leader_epoch", -1) if version >= 6 else -1,
            )
            for p in t.partitions
        }
        for t in req.topics
        if t.name not in refused
    }
    if not topics and refused:
        return offset_commit_error(req, version, E.TOPIC_AUTHORIZATION_FAILED, None)
    kreq = G.OffsetCommitRequest(
        group_id=req.group_id,
        generation_id=req.generation_id_or_member_epoch,
        member_id=req.member_id or "",
        group_instance_id=getattr(req, "group_instance_id", None) if version >= 7 else None,
        retention_time_ms=getattr(req, "retention_time_ms", -1) if 2 <= version <= 4 else -1,
        topics=topics,
    )
    resp = await _call(ctx, "offset_commit", kreq, req.group_id)
    out = []
    for t in req.topics:
        if t.name in refused:
            P = R.OffsetCommitResponseTopic.OffsetCommitResponsePartition
            out.append(R.OffsetCommitResponseTopic(name=t.name, partitions=[P(partition_index=p.partition_index, error_code=E.TOPIC_AUTHORIZATION_FAILED) for p in t.partitions]))
            continue
        codes = resp.topics.get(t.name, {})
        out.append(
            R.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    R.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=codes.get(p.partition_index, resp.error_code or E.UNKNOWN_SERVER_ERROR)
                    )
                    for p in t.partitions
                ],
            )
        )
    return R(throttle_time_ms=0, topics=out)


def offset_commit_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = OffsetCommitResponse
    topics = [] if req is None else req.topics
    return R(
        throttle_time_ms=0,
        topics=[
            R.OffsetCommitResponseTopic(name=t.name, partitions=[R.OffsetCommitResponseTopic.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code) for p in t.partitions])
            for t in topics
        ],
    )


# -- OffsetFetch (9) -----------------------------------------------------------------------


async def offset_fetch(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED); offsets only of topics the
    principal may DESCRIBE (a named one refused: TOPIC_AUTHORIZATION_FAILED; all topics:
    the others left out). v7's ``require_stable`` (read_committed consumers): a partition
    with a transactional offset pending its marker is UNSTABLE_OFFSET_COMMIT, retried."""
    R = OffsetFetchResponse
    T = R.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    if not ctx.allowed(conn, Op.DESCRIBE, RT.GROUP, req.group_id):
        return offset_fetch_error(req, version, E.GROUP_AUTHORIZATION_FAILED, None)
    wanted = None if req.topics is None else {t.name: list(t.partition_indexes) for t in req.topics}
    refused = {} if wanted is None else {n: ps for n, ps in wanted.items() if not ctx.allowed(conn, Op.DESCRIBE, RT.TOPIC, n)}
    if refused:
        wanted = {n: ps for n, ps in (wanted or {}).items() if n not in refused}
    if wanted == {} and refused:
        return R(throttle_time_ms=0, error_code=0, topics=[T(name=n, partitions=[P(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=E.TOPIC_AUTHORIZATION_FAILED) for p in ps]) for n, ps in refused.items()])
    stable = bool(getattr(req, "require_stable", False)) if version >= 7 else False  # KIP-447
    resp = await _call(ctx, "offset_fetch", G.OffsetFetchRequest(group_id=req.group_id, topics=wanted, require_stable=stable), req.group_id)
    if resp.error_code and version < 2:
        # v0/v1 have no top-level error: put it on every partition
        return R(topics=[T(name=t, partitions=[P(partition_index=p, committed_offset=-1, metadata="", error_code=resp.error_code) for p in ps]) for t, ps in (wanted or {}).items()])
    topics = []
    offsets = resp.offsets
    names = list(wanted) if wanted is not None else [n for n in sorted(offsets) if ctx.allowed(conn, Op.DESCRIBE, RT.TOPIC, n)]
    for name, ps in refused.items():
        topics.append(T(name=name, partitions=[P(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=E.TOPIC_AUTHORIZATION_FAILED) for p in ps]))
    for name in names:
        got = offsets.get(name, {})
        parts = wanted[name] if wanted is not None else sorted(got)
        rows = []
        for p in parts:
            o = got.get(p)
            if o is None:
                rows.append(P(partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="", error_code=0))
            else:
                rows.append(P(partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch, metadata=o.metadata if o.metadata is not None else "", error_code=o.error_code))
        topics.append(T(name=name, partitions=rows))
    return R(throttle_time_ms=0, topics=topics, error_code=resp.error_code)


def offset_fetch_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = OffsetFetchResponse
    T = R.OffsetFetchResponseTopic
    P = T.OffsetFetchResponsePartition
    topics = [] if req is None or req.topics is None else req.topics
    return R(
        throttle_time_ms=0,
        error_code=code,
        topics=[T(name=t.name, partitions=[P(partition_index=p, committed_offset=-1, metadata="", error_code=code) for p in t.partition_indexes]) for t in topics],
    )


# -- DescribeGroups (15) / ListGroups (16) -------------------------------------------------


async def describe_groups(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    R = DescribeGroupsResponse
    D = R.DescribedGroup
    M = D.DescribedGroupMember
    out = []
    for gid in req.groups:
        if not ctx.allowed(conn, Op.DESCRIBE, RT.GROUP, gid):
            out.append(D(error_code=E.GROUP_AUTHORIZATION_FAILED, error_message=None, group_id=gid, group_state="", protocol_type="", protocol_data="", members=[]))
            continue
        resp = await _call(ctx, "describe_groups", G.DescribeGroupsRequest(group_ids=[gid]), gid)
        g = resp.groups[0] if resp.groups else G.DescribedGroup(gid, error_code=resp.error_code or E.UNKNOWN_SERVER_ERROR)
        code = g.error_code
        state = g.state
        if code == E.GROUP_ID_NOT_FOUND:  # Kafka describes an unknown group as Dead, no error
            code, state = 0, "Dead"
        out.append(
            D(
                error_code=code,
                error_message=None,
                group_id=gid,
                group_state=state,
                protocol_type=g.protocol_type,
                protocol_data=g.protocol,
                members=[
                    M(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                    for m in g.members
                ],
            )
        )
    return R(throttle_time_ms=0, groups=out)


def describe_groups_error(req: Any, version: int, code: int, message: str | None) -> Any:
    R = DescribeGroupsResponse
    groups = [] if req is None else req.groups
    return R(throttle_time_ms=0, groups=[R.DescribedGroup(error_code=code, error_message=message, group_id=g, group_state="", protocol_type="", protocol_data="", members=[]) for g in groups])


async def list_groups(ctx: ListenerContext, conn: Any, req: Any, version: int) -> Any:
    """The groups whose coordinator FindCoordinator names as this connection's broker, so
    a client asking every broker (admin tools do) sees each group once."""
    from .cluster import coordinator_broker

    R = ListGroupsResponse
    count = await ctx.backend.group_coordinators()
    view = await ctx.broker_view()
    states = list(getattr(req, "states_filter", None) or []) if version >= 4 else None
    groups = []
    code = 0
    every = ctx.allowed(conn, Op.DESCRIBE, RT.CLUSTER, CLUSTER_NAME)  # else the groups it may DESCRIBE
    for i in range(count):
        if coordinator_broker(view, i) != conn.broker:
            continue
        resp = await ctx.backend.group_call("list_groups", G.ListGroupsRequest(states_filter=states or None), i, timeout=30.0)
        if resp.error_code:
            code = resp.error_code
            continue
        groups += [R.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state) for g in resp.groups if every or ctx.allowed(conn, Op.DESCRIBE, RT.GROUP, g.group_id)]
    return R(throttle_time_ms=0, error_code=code if not groups else 0, groups=groups)


def list_groups_error(req: Any, version: int, code: int, message: str | None) -> Any:
    return ListGroupsResponse(throttle_time_ms=0, error_code=code, groups=[])
