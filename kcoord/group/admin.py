"""Group administration: DescribeGroups, ListGroups, DeleteGroups, FindCoordinator.

A part of :class:`kcoord.group.coordinator.GroupCoordinatorState`, working on the shared
:class:`~kcoord.group.context.CoordinatorContext`. Deleting a group tombstones its metadata
and offsets; the group is Dead while the tombstones are being persisted and comes back Empty
if they fail.
"""

from __future__ import annotations

from typing import Any

from ..protocol.errors import ErrorCode
from ..protocol.group import (
    KEY_TYPE_GROUP,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from .context import CoordinatorContext
from .metadata import DEAD, EMPTY, STABLE, GroupMetadata
from .persistence import DeleteWrite, Persistence, group_error_for_append
from .placement import coordinator_for
from .records import GroupKey, OffsetKey, Record, group_record, offset_record
from .retention import Retention
from .timers import TimerKind
from .txn_offsets import TxnOffsetStore

E = ErrorCode


class GroupAdmin:
    """Describe, list, delete and locate groups. A failed delete puts the group back under
    retention, hence the retention part it is given."""

    def __init__(self, ctx: CoordinatorContext, persistence: Persistence, retention: Retention) -> None:
        self.ctx = ctx
        self.persistence = persistence
        self.retention = retention

    def describe_groups(self, req: DescribeGroupsRequest, token: Any, now_ms: int) -> None:
        described = []
        for group_id in req.group_ids:
            if not group_id:
                described.append(DescribedGroup(group_id, error_code=E.INVALID_GROUP_ID))
                continue
            if not self.ctx.owns(group_id):
                described.append(DescribedGroup(group_id, error_code=E.NOT_COORDINATOR))
                continue
            group = self.ctx.groups.get(group_id)
            if group is None:
                described.append(DescribedGroup(group_id, error_code=E.GROUP_ID_NOT_FOUND, state=DEAD.value))
                continue
            stable = group.state == STABLE
            members = [
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(group.protocol) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            ]
            described.append(
                DescribedGroup(
                    group_id,
                    state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol=group.protocol or "",
                    generation_id=group.generation_id,
                    leader=group.leader or "",
                    members=members,
                )
            )
        self.ctx.reply(token, DescribeGroupsResponse(groups=described))

    def list_groups(self, req: ListGroupsRequest, token: Any, now_ms: int) -> None:
        wanted = {s.lower() for s in req.states_filter or []}

        def listed(g: GroupMetadata) -> bool:
            return g.state.value.lower() in wanted if wanted else g.state != DEAD

        groups = [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in sorted(self.ctx.groups.values(), key=lambda g: g.group_id)
            if listed(g)
        ]
        self.ctx.reply(token, ListGroupsResponse(groups=groups))

    def delete_groups(self, req: DeleteGroupsRequest, token: Any, now_ms: int) -> None:
        results: dict[str, int] = {}
        eligible: list[GroupMetadata] = []
        for group_id in req.group_ids:
            if group_id in results:
                continue
            group = self.ctx.groups.get(group_id)
            if not group_id:
                results[group_id] = E.INVALID_GROUP_ID
            elif not self.ctx.owns(group_id):
                results[group_id] = E.NOT_COORDINATOR
            elif group is None or group.state == DEAD:
                results[group_id] = E.GROUP_ID_NOT_FOUND
            elif group.state != EMPTY or group.members:
                results[group_id] = E.NON_EMPTY_GROUP
            else:
                results[group_id] = E.NONE
                eligible.append(group)
        if not eligible:
            self.ctx.reply(token, DeleteGroupsResponse(results=results))
            return
        records: list[Record] = []
        empty_since = {g.group_id: g.state_timestamp_ms for g in eligible}
        for group in eligible:
            partitions = set(group.offsets) | set(group.pending_offset_commits)
            records.extend(offset_record(OffsetKey(group.group_id, t, p), None) for t, p in sorted(partitions))
            records.extend(TxnOffsetStore.tombstones(group))  # pending transactional offsets go too
            records.append(group_record(GroupKey(group.group_id), None))
            for member_id in list(group.pending_members):
                self.ctx.timers.cancel((TimerKind.SESSION, group.group_id, member_id))
            group.pending_members.clear()
            self.ctx.timers.cancel((TimerKind.JOIN, group.group_id))
            self.ctx.timers.cancel((TimerKind.RETENTION, group.group_id))
            group.transition(DEAD, now_ms)
        pending_ids = [g.group_id for g in eligible]
        others = {g: c for g, c in results.items() if g not in pending_ids}
        self.persistence.persist(
            records, DeleteWrite(token, others, pending_ids, empty_since), f"delete groups {pending_ids}"
        )


    def complete_delete(self, pending: DeleteWrite, code: int, now_ms: int) -> None:
        """The tombstones of a DeleteGroups were persisted (or not): forget the groups, or
        put them back Empty, and answer."""
        ok = code == E.NONE
        results = dict(pending.results)
        for group_id in pending.group_ids:
            group = self.ctx.groups.get(group_id)
            if ok:
                if group is not None and group.state == DEAD:
                    del self.ctx.groups[group_id]
                results[group_id] = E.NONE
            else:
                if group is not None and group.state == DEAD:
                    since = pending.empty_since.get(group_id)
                    group.transition(EMPTY, now_ms if since is None else since)
                    self.retention.reschedule(group, now_ms)
                results[group_id] = group_error_for_append(code)
        self.ctx.reply(pending.token, DeleteGroupsResponse(results={g: results[g] for g in sorted(results)}))

    def find_coordinator(self, req: FindCoordinatorRequest, token: Any, now_ms: int) -> None:
        if req.key_type != KEY_TYPE_GROUP:
            self.ctx.reply(token, FindCoordinatorResponse(error_code=E.INVALID_REQUEST, error_message="only group keys are served"))
        elif not req.key:
            self.ctx.reply(token, FindCoordinatorResponse(error_code=E.INVALID_GROUP_ID, error_message="group id is empty"))
        else:
            self.ctx.reply(token, FindCoordinatorResponse(coordinator=coordinator_for(req.key, self.ctx.num_partitions)))
