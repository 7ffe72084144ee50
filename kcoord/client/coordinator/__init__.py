"""The client side of consumer groups: :class:`GroupMember` (:mod:`.member`: JoinGroup,
SyncGroup, heartbeats, leaving), its :class:`~.commits.OffsetCommitter` and the standalone
commit of an inactive group (:mod:`.commits`), and finding and calling a group's
coordinator actor (:mod:`.coordinators`)."""

from .member import GroupMember

__all__ = ["GroupMember"]
