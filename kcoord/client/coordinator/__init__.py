"""The client side of consumer groups: :class:`GroupMember` (:mod:`.member`: subscribing,
rebalancing, assigning, leaving) with its parts -- the state they share (:mod:`.state`), a
JoinGroup + SyncGroup round (:mod:`.joining`), the heartbeat thread (:mod:`.heartbeat`), its
:class:`~.commits.OffsetCommitter` -- the standalone commit of an inactive group
(:mod:`.commits`), and finding and calling a group's coordinator actor (:mod:`.coordinators`)."""

from .member import GroupMember

__all__ = ["GroupMember"]
