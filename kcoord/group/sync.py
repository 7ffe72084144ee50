"""SyncGroup: the leader's assignment, persisted, then handed to every member.

A part of :class:`kcoord.group.coordinator.GroupCoordinatorState`, working on the shared
:class:`~kcoord.group.context.CoordinatorContext`. The leader's SyncGroup is persisted
before anyone hears of the assignment (the durability rule of docs/architecture.md); the
group turns Stable when the write is acknowledged.
"""

from __future__ import annotations

from typing import Any

from ..protocol.errors import ErrorCode
from ..protocol.group import SyncGroupRequest, SyncGroupResponse
from .context import CoordinatorContext
from .join import JoinPhase
from .member_checks import generation_member
from .metadata import COMPLETING, EMPTY, PREPARING, STABLE, GroupMetadata
from .persistence import Persistence, SyncWrite, group_error_for_append

E = ErrorCode


class SyncPhase:
    """SyncGroup handling and the assignment's persistence. A failed assignment write
    starts a new rebalance, hence the join phase it is given."""

    def __init__(self, ctx: CoordinatorContext, persistence: Persistence, join: JoinPhase) -> None:
        self.ctx = ctx
        self.persistence = persistence
        self.join = join

    def sync_group(self, req: SyncGroupRequest, token: Any, now_ms: int) -> None:
        def fail(code: int, message: str | None = None) -> None:
            self.ctx.reply(token, SyncGroupResponse(error_code=code, error_message=message))

        group, error, message = generation_member(
            self.ctx.groups, req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        if group is None:
            fail(error, message)
            return
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol
        ):
            fail(E.INCONSISTENT_GROUP_PROTOCOL)
            return
        member = group.members[req.member_id]
        if group.state == EMPTY:
            fail(E.UNKNOWN_MEMBER_ID)
        elif group.state == PREPARING:
            fail(E.REBALANCE_IN_PROGRESS, "rejoin the group")
        elif group.state == STABLE:
            self.ctx.touch(group, member, now_ms)
            self.ctx.reply(token, self._sync_response(group, member.assignment))
        else:  # COMPLETING
            self.ctx.await_sync(member, token)
            if member.member_id == group.leader and group.sync_persist_id is None:
                assignments = {a.member_id: a.assignment for a in req.assignments if group.has(a.member_id)}
                full = {m: assignments.get(m, b"") for m in group.members}
                group.sync_persist_id = self.persistence.persist(
                    [self.persistence.group_record(group, full, now_ms)],
                    SyncWrite(group.group_id, group.generation_id, full),
                    f"assignment of group {group.group_id} generation {group.generation_id}",
                )

    def _sync_response(self, group: GroupMetadata, assignment: bytes) -> SyncGroupResponse:
        return SyncGroupResponse(protocol_type=group.protocol_type, protocol_name=group.protocol, assignment=assignment)

    def complete_sync_write(self, persist_id: int, pending: SyncWrite, code: int, now_ms: int) -> None:
        """The assignment record ``persist_id`` was persisted (or not): hand every waiting
        member its share and turn Stable, or fail the SyncGroups and rebalance again."""
        ok = code == E.NONE
        group = self.ctx.groups.get(pending.group_id)
        if group is None:
            return
        if ok:
            group.has_persisted_metadata = True
        if group.state != COMPLETING or group.generation_id != pending.generation_id or group.sync_persist_id != persist_id:
            return  # the generation moved on; its members were already told
        group.sync_persist_id = None
        if ok:
            for member in group.members.values():
                member.assignment = pending.assignments.get(member.member_id, b"")
            group.transition(STABLE, now_ms)
            for member in group.members.values():
                if member.awaiting_sync:
                    self.ctx.reply_sync(member, self._sync_response(group, member.assignment))
                    self.ctx.touch(group, member, now_ms)
        else:
            self.join.reset_and_propagate_assignment_error(group, group_error_for_append(code), now_ms)
            self.join.prepare_rebalance(group, now_ms)
