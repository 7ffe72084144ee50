"""OffsetCommit and OffsetFetch: a group's committed offsets.

A part of :class:`kcoord.group.coordinator.GroupCoordinatorState`, working on the shared
:class:`~kcoord.group.context.CoordinatorContext`. A commit is acknowledged only once its
records are persisted; until then its partitions count as pending (retention leaves them
alone, DeleteGroups tombstones them).
"""

from __future__ import annotations

from typing import Any

from ..protocol.errors import ErrorCode
from ..protocol.group import (
    NO_OFFSET,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    error_response,
)
from .context import CoordinatorContext
from .member_checks import member_error
from .metadata import COMPLETING, DEAD, CommittedOffset
from .persistence import CommitWrite, Persistence, commit_error_for_append
from .records import OffsetKey, OffsetValue, offset_record
from .retention import Retention
from .txn_offsets import TxnOffsetStore

E = ErrorCode


class OffsetStore:
    """Offset commits and fetches. Commits change what retention expires, hence the
    retention part it is given."""

    def __init__(self, ctx: CoordinatorContext, persistence: Persistence, retention: Retention, txn: TxnOffsetStore) -> None:
        self.ctx = ctx
        self.persistence = persistence
        self.retention = retention
        self.txn = txn

    def commit(self, req: OffsetCommitRequest, token: Any, now_ms: int) -> None:
        def fail(code: int, message: str | None = None) -> None:
            self.ctx.reply(token, error_response(req, code, message))

        group = self.ctx.groups.get(req.group_id)
        simple = req.generation_id < 0 and not req.member_id and req.group_instance_id is None
        if group is None:
            if req.generation_id >= 0:
                fail(E.ILLEGAL_GENERATION, "the group does not exist (any generation is stale)")
                return
            group = self.retention.new_group(req.group_id, now_ms)
        if group.state == DEAD:
            fail(E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted")
            return
        if group.is_static_member_fenced(req.member_id, req.group_instance_id):
            fail(E.FENCED_INSTANCE_ID)
            return
        if simple:
            if group.members:
                fail(
                    E.UNKNOWN_MEMBER_ID,
                    "the group has active members; commits without a generation need an empty group",
                )
                return
        else:
            error = member_error(group, req.member_id, req.group_instance_id)
            if error != E.NONE:
                fail(error)
                return
            if req.generation_id != group.generation_id:
                fail(E.ILLEGAL_GENERATION, f"generation {req.generation_id} is not the current {group.generation_id}")
                return
            if group.state == COMPLETING:
                fail(E.REBALANCE_IN_PROGRESS, "the group is completing a rebalance; commit after SyncGroup")
                return
            self.ctx.touch(group, group.members[req.member_id], now_ms)

        limit = self.ctx.config.offset_metadata_max_bytes
        expire = now_ms + req.retention_time_ms if req.retention_time_ms >= 0 else None
        codes: dict[str, dict[int, int]] = {}
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        for topic, partitions in req.topics.items():
            codes[topic] = {}
            for partition, p in partitions.items():
                metadata = p.metadata or ""
                if len(metadata.encode()) > limit:
                    codes[topic][partition] = E.OFFSET_METADATA_TOO_LARGE
                    continue
                codes[topic][partition] = E.NONE
                accepted[(topic, partition)] = CommittedOffset(p.offset, metadata, p.leader_epoch, now_ms, expire)
        if not accepted:
            self.ctx.reply(token, OffsetCommitResponse(topics=codes))
            return
        records = [
            offset_record(
                OffsetKey(group.group_id, t, q),
                OffsetValue(o.offset, o.metadata, o.leader_epoch, o.commit_timestamp_ms, o.expire_timestamp_ms),
            )
            for (t, q), o in accepted.items()
        ]
        for tp in accepted:
            group.pending_offset_commits[tp] += 1
        self.persistence.persist(records, CommitWrite(token, group.group_id, accepted, codes), f"offset commit of group {group.group_id}")

    def fetch(self, req: OffsetFetchRequest, token: Any, now_ms: int) -> None:
        group = self.ctx.groups.get(req.group_id)
        offsets: dict[tuple[str, int], CommittedOffset] = {}
        if group is not None and group.state != DEAD:
            offsets = group.offsets
        else:
            group = None

        def answer(tp: tuple[str, int]) -> OffsetFetchPartition:
            # require_stable (KIP-447): a transaction's offset may be about to replace this one.
            if req.require_stable and group is not None and group.has_pending_txn_offset(tp):
                return OffsetFetchPartition(NO_OFFSET, "", -1, error_code=E.UNSTABLE_OFFSET_COMMIT)
            o = offsets.get(tp)
            return OffsetFetchPartition(NO_OFFSET, "", -1) if o is None else OffsetFetchPartition(o.offset, o.metadata, o.leader_epoch)

        out: dict[str, dict[int, OffsetFetchPartition]] = {}
        if req.topics is None:
            for topic, partition in sorted(offsets):
                out.setdefault(topic, {})[partition] = answer((topic, partition))
        else:
            for topic, partitions in req.topics.items():
                out[topic] = {partition: answer((topic, partition)) for partition in partitions}
        self.ctx.reply(token, OffsetFetchResponse(offsets=out))

    def complete_commit(self, pending: CommitWrite, code: int, now_ms: int) -> None:
        group = self.ctx.groups.get(pending.group_id)
        if group is not None:
            for tp, committed in pending.accepted.items():
                group.pending_offset_commits[tp] -= 1
                if group.pending_offset_commits[tp] <= 0:
                    del group.pending_offset_commits[tp]
                if code == E.NONE:
                    group.offsets[tp] = committed
                    self.txn.on_plain_commit(group, tp)
            self.retention.reschedule(group, now_ms)
        codes = pending.codes
        if code != E.NONE:
            mapped = commit_error_for_append(code)
            codes = {t: {p: (mapped if c == E.NONE else c) for p, c in parts.items()} for t, parts in codes.items()}
        self.ctx.reply(pending.token, OffsetCommitResponse(topics=codes))
