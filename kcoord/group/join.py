"""JoinGroup and the join phase of a rebalance (the coordinator's side).

A part of :class:`kcoord.group.coordinator.GroupCoordinatorState`, working on the shared
:class:`~kcoord.group.context.CoordinatorContext`. Here: admitting members
(MEMBER_ID_REQUIRED, static-member replacement), opening a rebalance (PreparingRebalance, the
initial delay, failing the SyncGroups of the generation it replaces), and ending the join
phase (CompletingRebalance: the new generation and the JoinGroup answers). SyncGroup,
membership and the write outcomes start or finish a join phase through this part.
"""

from __future__ import annotations

from typing import Any, Callable

from ..protocol.errors import ErrorCode
from ..protocol.group import JoinGroupMember, JoinGroupRequest, JoinGroupResponse, SyncGroupResponse
from .context import CoordinatorContext
from .member_checks import member_error
from .metadata import COMPLETING, DEAD, EMPTY, PREPARING, STABLE, GroupMetadata, MemberMetadata
from .persistence import BackgroundWrite, Persistence, StaticJoinWrite, group_error_for_append
from .retention import Retention
from .timers import TimerKind

E = ErrorCode


class JoinPhase:
    """JoinGroup handling and the join phase."""

    def __init__(
        self,
        ctx: CoordinatorContext,
        persistence: Persistence,
        retention: Retention,
        member_id_factory: Callable[[str], str],
    ) -> None:
        """``member_id_factory(client_id)`` makes new member ids (seeded in simulation)."""
        self.ctx = ctx
        self.persistence = persistence
        self.retention = retention
        self._new_member_id = member_id_factory

    # ======================================================================================
    # JoinGroup
    # ======================================================================================

    def join_group(self, req: JoinGroupRequest, token: Any, now_ms: int) -> None:
        cfg = self.ctx.config

        def fail(code: int, message: str | None = None) -> None:
            self.ctx.reply(token, JoinGroupResponse(error_code=code, error_message=message, member_id=req.member_id))

        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            fail(
                E.INVALID_SESSION_TIMEOUT,
                f"session timeout must be within [{cfg.group_min_session_timeout_ms}, "
                f"{cfg.group_max_session_timeout_ms}] ms",
            )
            return
        group = self.ctx.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                fail(E.UNKNOWN_MEMBER_ID, "the group does not exist")
                return
            group = self.retention.new_group(req.group_id, now_ms)
        if group.state == DEAD:
            fail(E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted")
            return
        names = [p.name for p in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            fail(
                E.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol type {req.protocol_type!r} with {names} is not compatible with the group",
            )
            return
        known = group.has(req.member_id) or group.static_member_id(req.group_instance_id) is not None
        if not known and len(group.members) >= cfg.group_max_size:
            fail(E.GROUP_MAX_SIZE_REACHED, f"the group has reached its maximum size ({cfg.group_max_size})")
            return
        if not req.member_id:
            self._join_unknown_member(group, req, token, now_ms)
        else:
            self._join_known_member(group, req, token, now_ms)

    def _new_member(self, group: GroupMetadata, member_id: str, req: JoinGroupRequest) -> MemberMetadata:
        return MemberMetadata(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=_rebalance_timeout(req),
            protocol_type=req.protocol_type,
            protocols=[(p.name, p.metadata) for p in req.protocols],
        )

    def _fresh_member_id(self, group: GroupMetadata, client_id: str) -> str:
        while True:
            member_id = self._new_member_id(client_id)
            if member_id and not group.has(member_id) and member_id not in group.pending_members:
                return member_id

    def _join_unknown_member(self, group: GroupMetadata, req: JoinGroupRequest, token: Any, now_ms: int) -> None:
        member_id = self._fresh_member_id(group, req.client_id)
        if req.group_instance_id is not None:
            if group.static_member_id(req.group_instance_id) is not None:
                self._replace_static_member(group, req, member_id, token, now_ms)
            else:
                self._add_member_and_rebalance(group, self._new_member(group, member_id, req), token, now_ms)
            return
        # KIP-394: hand out the id first, so a client that times out and retries does not
        # leave a ghost member behind that holds up the next rebalance.
        deadline = now_ms + req.session_timeout_ms
        group.pending_members[member_id] = deadline
        self.ctx.timers.set((TimerKind.SESSION, group.group_id, member_id), deadline)
        self.ctx.reply(
            token,
            JoinGroupResponse(
                error_code=E.MEMBER_ID_REQUIRED,
                error_message="rejoin with the assigned member id",
                member_id=member_id,
            ),
        )

    def _join_known_member(self, group: GroupMetadata, req: JoinGroupRequest, token: Any, now_ms: int) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            if group.is_static_member_fenced(member_id, req.group_instance_id):
                self.ctx.reply(token, JoinGroupResponse(error_code=E.FENCED_INSTANCE_ID, member_id=member_id))
                return
            del group.pending_members[member_id]
            self.ctx.timers.cancel((TimerKind.SESSION, group.group_id, member_id))
            self._add_member_and_rebalance(group, self._new_member(group, member_id, req), token, now_ms)
            return
        error = member_error(group, member_id, req.group_instance_id)
        if error == E.NONE and group.state in (EMPTY, DEAD):
            error = E.UNKNOWN_MEMBER_ID
        if error != E.NONE:
            self.ctx.reply(token, JoinGroupResponse(error_code=error, member_id=member_id))
            return
        member = group.members[member_id]
        protocols = [(p.name, p.metadata) for p in req.protocols]
        if group.state == PREPARING:
            self._update_member_and_rebalance(group, member, req, token, now_ms)
        elif group.state == COMPLETING:
            if protocols == member.protocols:
                # The member lost our response; repeat it.
                self.ctx.touch(group, member, now_ms)
                self.ctx.reply(token, self._join_response(group, member))
            else:
                self._update_member_and_rebalance(group, member, req, token, now_ms)
        else:  # STABLE
            if member_id == group.leader or protocols != member.protocols:
                # A leader's rejoin means it saw metadata change (e.g. new partitions).
                self._update_member_and_rebalance(group, member, req, token, now_ms)
            else:
                self.ctx.touch(group, member, now_ms)
                self.ctx.reply(token, self._join_response(group, member, with_members=False))

    def _join_response(
        self, group: GroupMetadata, member: MemberMetadata, with_members: bool = True
    ) -> JoinGroupResponse:
        members: list[JoinGroupMember] = []
        if with_members and member.member_id == group.leader:
            members = [
                JoinGroupMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                for m in group.members.values()
            ]
        return JoinGroupResponse(
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol,
            leader=group.leader or "",
            member_id=member.member_id,
            members=members,
        )

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, token: Any, now_ms: int
    ) -> None:
        if group.state == PREPARING and group.in_initial_delay:
            group.new_member_added = True
        group.add(member)
        self.ctx.await_join(member, token)
        self.ctx.touch(group, member, now_ms)
        self._maybe_prepare_rebalance(group, now_ms)
        self.try_complete_join(group, now_ms)

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, req: JoinGroupRequest, token: Any, now_ms: int
    ) -> None:
        member.protocols = [(p.name, p.metadata) for p in req.protocols]
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = _rebalance_timeout(req)
        member.client_id, member.client_host = req.client_id, req.client_host
        self.ctx.await_join(member, token)
        self.ctx.touch(group, member, now_ms)
        self._maybe_prepare_rebalance(group, now_ms)
        self.try_complete_join(group, now_ms)

    def _replace_static_member(
        self, group: GroupMetadata, req: JoinGroupRequest, new_id: str, token: Any, now_ms: int
    ) -> None:
        instance = req.group_instance_id
        assert instance is not None
        old_id = group.static_members[instance]
        old = group.members[old_id]
        fenced = "a newer instance with the same group.instance.id joined"
        if old.awaiting_join:
            self.ctx.reply_join(old, JoinGroupResponse(error_code=E.FENCED_INSTANCE_ID, error_message=fenced, member_id=old_id))
        if old.awaiting_sync:
            self.ctx.reply_sync(old, SyncGroupResponse(error_code=E.FENCED_INSTANCE_ID, error_message=fenced))
        self.ctx.timers.cancel((TimerKind.SESSION, group.group_id, old_id))
        leader_before = group.leader or ""
        member = group.replace_static_member(instance, old_id, new_id)
        member.protocols = [(p.name, p.metadata) for p in req.protocols]
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = _rebalance_timeout(req)
        member.client_id, member.client_host = req.client_id, req.client_host
        self.ctx.touch(group, member, now_ms)
        if group.state == STABLE and group.select_protocol() == group.protocol:
            # KIP-345: a restarted static member takes its old place without a rebalance.
            # Reply with the leader as it was, so a replaced leader does not think it must
            # assign (its new id differs); it syncs and gets its old assignment back.
            pending = StaticJoinWrite(
                token, group.group_id, new_id, group.generation_id, group.protocol_type, group.protocol, leader_before
            )
            self.persistence.persist(
                [self.persistence.group_record(group, {m.member_id: m.assignment for m in group.members.values()}, now_ms)],
                pending,
                f"static member {instance} of group {group.group_id} rejoined as {new_id}",
            )
            return
        # Otherwise the old id may already be in the leader's hands, or the protocol would
        # change: the new incarnation joins a fresh rebalance like everyone else.
        self.ctx.await_join(member, token)
        if group.state == PREPARING:
            self.try_complete_join(group, now_ms)
        else:
            self.prepare_rebalance(group, now_ms)

    def complete_static_join(self, pending: StaticJoinWrite, code: int) -> None:
        """The record of a static member's replacement was persisted (or not): answer its
        JoinGroup."""
        ok = code == E.NONE
        group = self.ctx.groups.get(pending.group_id)
        if group is not None and ok:
            group.has_persisted_metadata = True
        if not ok:
            self.ctx.reply(pending.token, JoinGroupResponse(error_code=group_error_for_append(code), member_id=pending.member_id))
        elif group is None or not group.has(pending.member_id):
            self.ctx.reply(pending.token, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=pending.member_id))
        else:
            self.ctx.reply(
                pending.token,
                JoinGroupResponse(
                    generation_id=pending.generation_id,
                    protocol_type=pending.protocol_type,
                    protocol_name=pending.protocol,
                    leader=pending.leader,
                    member_id=pending.member_id,
                ),
            )

    # -- join phase ------------------------------------------------------------------------

    def reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int, now_ms: int) -> None:
        """The generation being synced is abandoned (a new rebalance, or its assignment
        failed to persist): drop every assignment and fail the waiting SyncGroups."""
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync:
                self.ctx.reply_sync(member, SyncGroupResponse(error_code=error))
                self.ctx.touch(group, member, now_ms)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state in (STABLE, COMPLETING, EMPTY):
            self.prepare_rebalance(group, now_ms)

    def prepare_rebalance(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state == COMPLETING:
            self.reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS, now_ms)
        was_empty = group.state == EMPTY
        group.transition(PREPARING, now_ms)
        group.sync_persist_id = None
        self.ctx.stats.rebalances += 1
        self.ctx.timers.cancel((TimerKind.RETENTION, group.group_id))
        delay = self.ctx.config.group_initial_rebalance_delay_ms
        if was_empty:
            group.in_initial_delay = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            self.ctx.timers.set((TimerKind.JOIN, group.group_id), now_ms + delay)
        else:
            group.in_initial_delay = False
            self.ctx.timers.set((TimerKind.JOIN, group.group_id), now_ms + group.rebalance_timeout_ms())
        self.try_complete_join(group, now_ms)

    def try_complete_join(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state != PREPARING:
            return
        if not group.members and not group.pending_members:
            self._complete_join(group, now_ms)
        elif not group.in_initial_delay and group.all_members_joined():
            self._complete_join(group, now_ms)

    def on_join_deadline(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state != PREPARING:
            return
        if group.in_initial_delay and group.new_member_added and group.initial_delay_remaining_ms > 0:
            delay = min(self.ctx.config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms -= delay
            group.new_member_added = False
            self.ctx.timers.set((TimerKind.JOIN, group.group_id), now_ms + delay)
            return
        self._complete_join(group, now_ms)

    def _complete_join(self, group: GroupMetadata, now_ms: int) -> None:
        for member in list(group.members.values()):
            if not member.awaiting_join and not member.is_static:
                group.remove(member.member_id)
                self.ctx.timers.cancel((TimerKind.SESSION, group.group_id, member.member_id))
        group.in_initial_delay = False
        if group.members and not any(m.awaiting_join for m in group.members.values()):
            # Only static members that have not rejoined are left: wait another rebalance
            # timeout for them (their sessions expire meanwhile if they are gone).
            self.ctx.timers.set((TimerKind.JOIN, group.group_id), now_ms + group.rebalance_timeout_ms())
            return
        self.ctx.timers.cancel((TimerKind.JOIN, group.group_id))
        leader = group.members.get(group.leader) if group.leader else None
        if leader is None or not leader.awaiting_join:
            group.leader = next((m.member_id for m in group.members.values() if m.awaiting_join), None)
        group.generation_id += 1
        if not group.members:
            group.protocol, group.leader = None, None
            group.transition(EMPTY, now_ms)
            self.persistence.persist(
                [self.persistence.group_record(group, {}, now_ms)],
                BackgroundWrite(),
                f"group {group.group_id} is empty at generation {group.generation_id}",
            )
            self.retention.reschedule(group, now_ms)
            return
        group.protocol = group.select_protocol()
        group.transition(COMPLETING, now_ms)
        for member in group.members.values():
            if member.awaiting_join:
                self.ctx.reply_join(member, self._join_response(group, member))
                self.ctx.touch(group, member, now_ms)


def _rebalance_timeout(req: JoinGroupRequest) -> int:
    # Kafka's v0 clients had no rebalance timeout; the session timeout stood in for it.
    return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms
