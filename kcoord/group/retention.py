"""Retention: expiring the offsets of Empty groups, and removing groups left with nothing.

A mixin of :class:`kcoord.group.coordinator.GroupCoordinatorState`: it works on the
coordinator's groups, timers and output; split out so that each file holds one part of the
protocol. Each Empty group has one retention timer at its earliest expiry; the sweep writes
tombstones nobody waits for (their failures are ignored, as in Kafka).
"""

from __future__ import annotations

from .metadata import EMPTY, CommittedOffset, GroupMetadata
from .persistence import BackgroundWrite
from .records import GroupKey, OffsetKey, Record, group_record, offset_record


# Timer key (RETENTION_TIMER, group_id): a group's next offset expiry or removal check.
RETENTION_TIMER = "retention"


class Retention:
    """Offset expiry and removal of empty groups (mixed into GroupCoordinatorState)."""

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
        return base + self.config.offsets_retention_ms

    def _reschedule_retention(self, group: GroupMetadata, now_ms: int) -> None:
        key = (RETENTION_TIMER, group.group_id)
        if group.state != EMPTY or self._groups.get(group.group_id) is not group:
            self._timers.cancel(key)
            return
        deadlines = [
            self._offset_expiry(group, o) for tp, o in group.offsets.items() if tp not in group.pending_offset_commits
        ]
        if group.is_removable():
            since = group.state_timestamp_ms if group.state_timestamp_ms is not None else now_ms
            deadlines.append(since + self.config.offsets_retention_check_interval_ms)
        if deadlines:
            self._timers.set(key, min(deadlines))
        else:
            self._timers.cancel(key)

    def _on_retention(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state != EMPTY:
            return
        expired = sorted(
            tp
            for tp, o in group.offsets.items()
            if tp not in group.pending_offset_commits and self._offset_expiry(group, o) <= now_ms
        )
        records: list[Record] = [offset_record(OffsetKey(group.group_id, t, p), None) for t, p in expired]
        for tp in expired:
            del group.offsets[tp]
        self.stats.offsets_expired += len(expired)
        since = group.state_timestamp_ms if group.state_timestamp_ms is not None else now_ms
        if group.is_removable() and since + self.config.offsets_retention_check_interval_ms <= now_ms:
            del self._groups[group.group_id]
            if group.has_persisted_metadata:
                records.append(group_record(GroupKey(group.group_id), None))
        else:
            self._reschedule_retention(group, now_ms)
        if records:
            self._persist(records, BackgroundWrite(), f"retention of group {group.group_id}")
