"""Retention: expiring the offsets of Empty groups, and removing groups left with nothing.

A part of :class:`kcoord.group.coordinator.GroupCoordinatorState`, working on the shared
:class:`~kcoord.group.context.CoordinatorContext`. Each Empty group has one retention timer
at its earliest expiry; the sweep writes tombstones nobody waits for (their failures are
ignored, as in Kafka). Groups are born here too (:meth:`Retention.new_group`), so that a
group created by a request that then fails is still swept.
"""

from __future__ import annotations

from .context import CoordinatorContext
from .metadata import EMPTY, CommittedOffset, GroupMetadata
from .persistence import BackgroundWrite, Persistence
from .records import GroupKey, OffsetKey, Record, group_record, offset_record
from .timers import TimerKind


class Retention:
    """Offset expiry and removal of empty groups."""

    def __init__(self, ctx: CoordinatorContext, persistence: Persistence) -> None:
        self.ctx = ctx
        self.persistence = persistence

    def new_group(self, group_id: str, now_ms: int) -> GroupMetadata:
        """Create and register a group for a request that names an unknown one."""
        group = GroupMetadata(group_id, state_timestamp_ms=now_ms)
        self.ctx.groups[group_id] = group
        # A group created by a request that then fails must not linger forever.
        self.reschedule(group, now_ms)
        return group

    def _offset_expiry(self, group: GroupMetadata, committed: CommittedOffset) -> int:
        if committed.expire_timestamp_ms is not None:
            return committed.expire_timestamp_ms
        # KIP-211: a consumer group's offsets live while it has members and expire a
        # retention period after it became Empty; a group that only ever stored offsets
        # (no protocol type) expires each offset a retention period after its commit.
        if group.protocol_type is not None and group.state_timestamp_ms is not None:
            base = group.state_timestamp_ms
        else:
            base = committed.commit_timestamp_ms
        return base + self.ctx.config.offsets_retention_ms

    def reschedule(self, group: GroupMetadata, now_ms: int) -> None:
        """Arm the group's retention timer at its next expiry (only Empty groups have one)."""
        ctx = self.ctx
        key = (TimerKind.RETENTION, group.group_id)
        if group.state != EMPTY or ctx.groups.get(group.group_id) is not group:
            ctx.timers.cancel(key)
            return
        deadlines = [
            self._offset_expiry(group, o)
            for tp, o in group.offsets.items()
            if tp not in group.pending_offset_commits and not group.has_pending_txn_offset(tp)
        ]
        if group.is_removable():
            since = group.state_timestamp_ms if group.state_timestamp_ms is not None else now_ms
            deadlines.append(since + ctx.config.offsets_retention_check_interval_ms)
        if deadlines:
            ctx.timers.set(key, min(deadlines))
        else:
            ctx.timers.cancel(key)

    def on_retention(self, group: GroupMetadata, now_ms: int) -> None:
        ctx = self.ctx
        if group.state != EMPTY:
            return
        expired = sorted(
            tp
            for tp, o in group.offsets.items()
            # Kafka keeps an offset while a transaction holds a pending one for its partition.
            if tp not in group.pending_offset_commits
            and not group.has_pending_txn_offset(tp)
            and self._offset_expiry(group, o) <= now_ms
        )
        records: list[Record] = [offset_record(OffsetKey(group.group_id, t, p), None) for t, p in expired]
        for tp in expired:
            del group.offsets[tp]
        ctx.stats.offsets_expired += len(expired)
        since = group.state_timestamp_ms if group.state_timestamp_ms is not None else now_ms
        if group.is_removable() and since + ctx.config.offsets_retention_check_interval_ms <= now_ms:
            del ctx.groups[group.group_id]
            if group.has_persisted_metadata:
                records.append(group_record(GroupKey(group.group_id), None))
        else:
            self.reschedule(group, now_ms)
        if records:
            self.persistence.persist(records, BackgroundWrite(), f"retention of group {group.group_id}")
