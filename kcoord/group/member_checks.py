"""Whether a request speaks for a current member (Kafka's validateCurrentMember).

Plain functions over a group, used by the join, sync, membership and offsets parts of
:class:`kcoord.group.coordinator.GroupCoordinatorState`.
"""

from __future__ import annotations

from ..protocol.errors import ErrorCode
from .metadata import DEAD, GroupMetadata

E = ErrorCode


def member_error(group: GroupMetadata, member_id: str, group_instance_id: str | None) -> int:
    """Kafka's validateCurrentMember: NONE, FENCED_INSTANCE_ID or UNKNOWN_MEMBER_ID."""
    if group.is_static_member_fenced(member_id, group_instance_id):
        return E.FENCED_INSTANCE_ID
    member = group.members.get(member_id)
    if member is None:
        return E.UNKNOWN_MEMBER_ID
    if group_instance_id is not None and member.group_instance_id != group_instance_id:
        return E.FENCED_INSTANCE_ID
    return E.NONE


def generation_member(
    groups: dict[str, GroupMetadata], group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
) -> tuple[GroupMetadata | None, int, str | None]:
    """The checks SyncGroup and Heartbeat share: the group exists and is not being
    deleted, the member is current (not fenced) and speaks for the current generation.
    Returns ``(group, NONE, None)`` or ``(None, error, message)``."""
    group = groups.get(group_id)
    if group is None:
        return None, E.UNKNOWN_MEMBER_ID, "the group does not exist"
    if group.state == DEAD:
        return None, E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted"
    error = member_error(group, member_id, group_instance_id)
    if error != E.NONE:
        return None, error, None
    if generation_id != group.generation_id:
        return None, E.ILLEGAL_GENERATION, f"generation {generation_id} is not the current {group.generation_id}"
    return group, E.NONE, None
