"""Membership and liveness: who is in a group, and who has been silent too long.

A part of :class:`kcoord.group.coordinator.GroupCoordinatorState`, working on the shared
:class:`~kcoord.group.context.CoordinatorContext`. Here: session expiry (heartbeats, commits and joins restart the timer with
``CoordinatorContext.touch``; expiry removes the member), GroupHeartbeat and LeaveGroup.
A member leaving changes the group, so this part is given the join phase it restarts.
"""

from __future__ import annotations

from typing import Any

from ..protocol.errors import ErrorCode
from ..protocol.group import (
    GroupHeartbeatRequest,
    GroupHeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupResponse,
    error_response,
)
from .context import CoordinatorContext
from .join import JoinPhase
from .member_checks import generation_member, member_error
from .metadata import COMPLETING, DEAD, EMPTY, PREPARING, STABLE, GroupMetadata, MemberMetadata
from .retention import Retention
from .timers import TimerKind


E = ErrorCode


class Membership:
    """Heartbeats, leaving and session expiry."""

    def __init__(self, ctx: CoordinatorContext, join: JoinPhase, retention: Retention) -> None:
        self.ctx = ctx
        self.join = join
        self.retention = retention

    # ======================================================================================
    # GroupHeartbeat / LeaveGroup / session expiry
    # ======================================================================================

    def heartbeat(self, req: GroupHeartbeatRequest, token: Any, now_ms: int) -> None:
        def answer(code: int, message: str | None = None) -> None:
            self.ctx.reply(token, GroupHeartbeatResponse(error_code=code, error_message=message))

        group, error, message = generation_member(
            self.ctx.groups, req.group_id, req.member_id, req.group_instance_id, req.generation_id
        )
        if group is None:
            answer(error, message)
            return
        if group.state == EMPTY:
            answer(E.UNKNOWN_MEMBER_ID)
            return
        self.ctx.touch(group, group.members[req.member_id], now_ms)
        if group.state == PREPARING:
            answer(E.REBALANCE_IN_PROGRESS, "rejoin the group")
        else:
            answer(E.NONE)

    def leave_group(self, req: LeaveGroupRequest, token: Any, now_ms: int) -> None:
        group = self.ctx.groups.get(req.group_id)
        if group is not None and group.state == DEAD:
            self.ctx.reply(token, error_response(req, E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted"))
            return
        results = []
        for leaving in req.members:
            code = E.UNKNOWN_MEMBER_ID if group is None else self._leave_one(group, leaving, now_ms)
            results.append(LeaveGroupMemberResponse(leaving.member_id, leaving.group_instance_id, code))
        self.ctx.reply(token, LeaveGroupResponse(members=results))

    def _leave_one(self, group: GroupMetadata, leaving: LeaveGroupMember, now_ms: int) -> int:
        member_id, instance = leaving.member_id, leaving.group_instance_id
        if not member_id:
            # KIP-345: an operator may remove a static member by instance id alone.
            member_id = group.static_member_id(instance) or ""
            if not member_id:
                return E.UNKNOWN_MEMBER_ID
        elif member_id in group.pending_members and instance is None:
            del group.pending_members[member_id]
            self.ctx.timers.cancel((TimerKind.SESSION, group.group_id, member_id))
            self._after_pending_member_gone(group, now_ms)
            return E.NONE
        else:
            error = member_error(group, member_id, instance)
            if error != E.NONE:
                return error
        self._remove_member_and_update_group(group, group.members[member_id], now_ms)
        return E.NONE

    def on_session_expired(self, group: GroupMetadata, member_id: str, now_ms: int) -> None:
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._after_pending_member_gone(group, now_ms)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if member.awaiting_join or member.awaiting_sync:
            # Blocked in a long-poll we have not answered: alive by definition. The timer
            # restarts when the answer goes out; re-arm in case that path is missed.
            self.ctx.touch(group, member, now_ms)
            return
        self.ctx.stats.members_expired += 1
        self._remove_member_and_update_group(group, member, now_ms)

    def _after_pending_member_gone(self, group: GroupMetadata, now_ms: int) -> None:
        self.join.try_complete_join(group, now_ms)
        self.retention.reschedule(group, now_ms)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, now_ms: int) -> None:
        if member.awaiting_join:
            self.ctx.reply_join(member, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        if member.awaiting_sync:
            self.ctx.reply_sync(member, SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self.ctx.timers.cancel((TimerKind.SESSION, group.group_id, member.member_id))
        if group.state in (STABLE, COMPLETING):
            self.join.prepare_rebalance(group, now_ms)
        elif group.state == PREPARING:
            self.join.try_complete_join(group, now_ms)
