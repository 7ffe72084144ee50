"""What the group coordinator core asks its driver to do: reply, and append records.

Every entry point of :class:`~kcoord.group.coordinator.GroupCoordinatorState` returns a list
of these; the driver performs them in order. Both are the kit's
(:mod:`kcoord.runtime.actions`): a JoinGroup or SyncGroup :class:`Reply` may come many calls
after its request (the rebalance long-poll); :class:`AppendRecords` goes to this
coordinator's partition of ``__consumer_offsets``.
"""

from __future__ import annotations

from ..runtime.actions import Action, AppendRecords, Reply

GroupAction = Reply | AppendRecords

__all__ = ["Action", "AppendRecords", "GroupAction", "Reply"]
