"""What every part of the group coordinator shares: one explicit object.

:class:`~kcoord.group.coordinator.GroupCoordinatorState` is built from parts (the join
phase, SyncGroup, membership, offsets, administration, retention, persistence), and they all
read and change the same facts: the groups of this ``__consumer_offsets`` partition, the
timers, the config, the counters and the actions decided so far. Each part gets this object
in its constructor instead of sharing attributes through mixins; whatever a part keeps to
itself (the writes in flight, the member-id factory) stays in the part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol.errors import ErrorCode
from ..protocol.group import JoinGroupResponse, SyncGroupResponse
from ..runtime.actions import Outbox
from .config import GroupConfig
from .metadata import GroupMetadata, MemberMetadata
from .placement import coordinator_for
from .timers import TimerKind, Timers

E = ErrorCode


@dataclass
class CoordinatorStats:
    """Counters a shell may export as metrics."""

    rebalances: int = 0
    members_expired: int = 0
    offsets_expired: int = 0
    persist_failures: int = 0
    txn_producers_expired: int = 0


@dataclass
class CoordinatorContext(Outbox):
    """The groups, timers, config, counters and pending actions of one coordinator."""

    # Replaced whole by the shell when the operator reconfigures; parts read it at use.
    config: GroupConfig
    partition: int
    num_partitions: int
    stats: CoordinatorStats = field(default_factory=CoordinatorStats)
    groups: dict[str, GroupMetadata] = field(default_factory=dict)
    timers: Timers = field(default_factory=Timers)

    # -- placement -----------------------------------------------------------------------

    def owns(self, group_id: str) -> bool:
        return coordinator_for(group_id, self.num_partitions) == self.partition

    def not_mine(self, group_id: str) -> str:
        owner = coordinator_for(group_id, self.num_partitions)
        return f"group {group_id!r} belongs to coordinator {owner}, this is {self.partition}"


    # -- the rebalance long-polls: a JoinGroup or SyncGroup held until the phase ends ----

    def reply_join(self, member: MemberMetadata, response: JoinGroupResponse) -> None:
        token = member.join_token
        member.awaiting_join, member.join_token = False, None
        self.reply(token, response)

    def reply_sync(self, member: MemberMetadata, response: SyncGroupResponse) -> None:
        token = member.sync_token
        member.awaiting_sync, member.sync_token = False, None
        self.reply(token, response)

    def await_join(self, member: MemberMetadata, token: Any) -> None:
        if member.awaiting_join:  # the member retried; its older request gets an answer
            self.reply_join(
                member,
                JoinGroupResponse(
                    error_code=E.REBALANCE_IN_PROGRESS,
                    error_message="superseded by a newer JoinGroup from the same member",
                    member_id=member.member_id,
                ),
            )
        member.awaiting_join, member.join_token = True, token

    def await_sync(self, member: MemberMetadata, token: Any) -> None:
        if member.awaiting_sync:
            self.reply_sync(
                member,
                SyncGroupResponse(
                    error_code=E.REBALANCE_IN_PROGRESS,
                    error_message="superseded by a newer SyncGroup from the same member",
                ),
            )
        member.awaiting_sync, member.sync_token = True, token

    # -- sessions --------------------------------------------------------------------------

    def touch(self, group: GroupMetadata, member: MemberMetadata, now_ms: int) -> None:
        """Restart the member's session timer (Kafka's completeAndScheduleNextHeartbeat).
        Every part that hears from a member calls it, so it lives here."""
        self.timers.set((TimerKind.SESSION, group.group_id, member.member_id), now_ms + member.session_timeout_ms)
