"""The group coordinator as a sans-I/O state machine (Kafka's classic group protocol).

One :class:`GroupCoordinatorState` owns every group that hashes to its partition of
``__consumer_offsets``. It never sleeps, sends or reads a clock: the shell feeds it inputs
with the current time and carries out the :mod:`actions <kcoord.group.actions>` it returns.

Entry points (each returns ``list[Action]``; each first fires the timers due at ``now_ms``)::

    coord = GroupCoordinatorState(config, partition=i, num_partitions=n)
    coord.load(records, now_ms)          # replay partition i before serving (restart)
    coord.handle(request, token, now_ms) # any group request; the reply may come later
    coord.tick(now_ms)                   # timers: sessions, join phases, retention
    coord.on_persisted(persist_id, error_code, now_ms)  # outcome of an AppendRecords action
    coord.next_deadline(now_ms)          # when tick() next has work (None: nothing timed)
    coord.close(now_ms, error_code)      # give up the partition: fail everything pending

``now_ms`` is wall-clock epoch milliseconds: commit timestamps are stored in the log and
retention compares them with the clock of whichever coordinator instance reads them later.

Durability rule (docs/architecture.md): an offset commit, a leader's assignment and a static member's
replacement are acknowledged only after the records that describe them are persisted. The
state machine applies persist outcomes in the order it emitted the Persist actions, so its
memory always equals what replaying the log would rebuild. Writes nobody waits for (the
record of a group turning Empty, retention tombstones) are applied at once; their
failures are ignored, exactly as Kafka does.

The rules, briefly (Kafka's GroupCoordinator semantics):

* Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to PreparingRebalance on
  any membership change; Dead only while a DeleteGroups is being persisted.
* A new dynamic member gets MEMBER_ID_REQUIRED and a member id, and must rejoin with it.
* The first join into an Empty group waits ``group_initial_rebalance_delay_ms`` (extended
  while members keep arriving, up to the rebalance timeout). Otherwise the join phase ends
  when every member rejoined or the rebalance timeout passed; dynamic members that did not
  rejoin are dropped, static ones are kept (their session decides).
* The leader (the old one if it rejoined) gets every member's metadata, computes the
  assignment and sends it with its SyncGroup; the coordinator persists it and answers every
  member's SyncGroup with its share.
* A static member rejoining with a new member id while the group is Stable takes over the old
  member's id and assignment without a rebalance; the old id gets FENCED_INSTANCE_ID.
* A member blocked in JoinGroup/SyncGroup is alive; otherwise no heartbeat, commit or join
  within its session timeout removes it and triggers a rebalance.

Layout: this module holds the entry points; it builds the parts, hands each the ones it
needs through its constructor, and routes requests, timers and write outcomes to them. What
they all share (groups, timers, config, counters, pending actions) is one
:class:`~kcoord.group.context.CoordinatorContext`. The parts, one per file:
:mod:`.persistence` (the writes in flight, the group record, replay), :mod:`.retention`
(offset expiry, group creation and removal), :mod:`.join` (JoinGroup, the join phase),
:mod:`.sync` (SyncGroup), :mod:`.membership` (member checks, heartbeats, LeaveGroup, session
expiry), :mod:`.offsets` (OffsetCommit/OffsetFetch) and :mod:`.admin` (Describe/List/
DeleteGroups, FindCoordinator). Each depends only on parts built before it, so there are no
cycles: persistence <- retention <- join <- sync, membership; offsets and admin use
persistence and retention.
"""

from __future__ import annotations

import uuid
from typing import Any, Callable, Iterable

from ..coordination.routing import route
from ..protocol.codec import Message
from ..protocol.errors import ErrorCode
from ..protocol.group import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    GroupHeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from ..protocol.services import GROUP_COORDINATOR, error_response
from ..protocol.txn import TxnOffsetCommitRequest, TxnOffsetCommitResponse, TxnOffsetMarkerRequest, TxnOffsetMarkerResponse
from ..runtime.actions import Action, Handlers
from .admin import GroupAdmin
from .config import GroupConfig
from .context import CoordinatorContext, CoordinatorStats
from .join import JoinPhase
from .membership import Membership
from .metadata import CommittedOffset, GroupMetadata
from .offsets import OffsetStore
from .persistence import (
    CommitWrite,
    DeleteWrite,
    Persistence,
    PendingWrite,
    MarkerWrite,
    StaticJoinWrite,
    SyncWrite,
    TxnCommitWrite,
    TxnProducerExpiryWrite,
    commit_error_for_append,
    committed,
    group_error_for_append,
    replay,
)
from .records import TxnProducerValue
from .retention import Retention
from .sync import SyncPhase
from .timers import TimerKind, Timers
from .txn_offsets import TxnOffsetStore

E = ErrorCode


def _default_member_id(client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.uuid4()}"


class GroupCoordinatorState:
    """All groups of one ``__consumer_offsets`` partition. See the module docstring."""

    def __init__(
        self,
        config: GroupConfig | None = None,
        partition: int = 0,
        num_partitions: int = 1,
        *,
        member_id_factory: Callable[[str], str] | None = None,
    ) -> None:
        """``member_id_factory(client_id)`` makes new member ids; inject a seeded one for
        deterministic simulation (the default uses uuid4)."""
        if not 0 <= partition < num_partitions:
            raise ValueError(f"partition {partition} is not in [0, {num_partitions})")
        ctx = self._ctx = CoordinatorContext(config or GroupConfig(), partition, num_partitions)
        self._persistence = Persistence(ctx)
        self._retention = Retention(ctx, self._persistence)
        self._join = JoinPhase(ctx, self._persistence, self._retention, member_id_factory or _default_member_id)
        self._sync = SyncPhase(ctx, self._persistence, self._join)
        self._membership = Membership(ctx, self._join, self._retention)
        self._txn_offsets = TxnOffsetStore(ctx, self._persistence, self._retention)
        self._offsets = OffsetStore(ctx, self._persistence, self._retention, self._txn_offsets)
        self._admin = GroupAdmin(ctx, self._persistence, self._retention)
        self._closed = False
        self._handlers = Handlers(
            GROUP_COORDINATOR.name,
            {
                JoinGroupRequest: self._join.join_group,
                SyncGroupRequest: self._sync.sync_group,
                GroupHeartbeatRequest: self._membership.heartbeat,
                LeaveGroupRequest: self._membership.leave_group,
                OffsetCommitRequest: self._offsets.commit,
                OffsetFetchRequest: self._offsets.fetch,
                TxnOffsetCommitRequest: self._txn_offsets.commit,
                TxnOffsetMarkerRequest: self._txn_offsets.marker,
                DescribeGroupsRequest: self._admin.describe_groups,
                ListGroupsRequest: self._admin.list_groups,
                DeleteGroupsRequest: self._admin.delete_groups,
                FindCoordinatorRequest: self._admin.find_coordinator,
            },
        )

    # -- what the shell reads (and, for config, replaces) --------------------------------

    @property
    def config(self) -> GroupConfig:
        return self._ctx.config

    @config.setter
    def config(self, config: GroupConfig) -> None:
        """The operator reconfigured; every part reads the config at use, so this applies
        to the next request or timer."""
        self._ctx.config = config

    partition = property(lambda self: self._ctx.partition)
    num_partitions = property(lambda self: self._ctx.num_partitions)
    stats = property(lambda self: self._ctx.stats, doc="counters a shell may export as metrics")

    # ======================================================================================
    # public entry points
    # ======================================================================================

    def handle(self, request: Message, token: Any, now_ms: int) -> list[Action]:
        """Process a group request. Its Reply (carrying ``token``) is among the returned
        actions, or comes from a later call when the request waits on a rebalance or a
        write."""
        return route(
            self._ctx, self._handlers, request, token, now_ms,
            closed=self._closed, advance=self._advance, key="group_id", empty=(E.INVALID_GROUP_ID, "group id is empty"), error_response=error_response,
        )

    def tick(self, now_ms: int) -> list[Action]:
        """Fire every timer due at ``now_ms``."""
        if not self._closed:
            self._advance(now_ms)
        return self._ctx.take()

    def on_persisted(self, persist_id: int, error_code: int, now_ms: int) -> list[Action]:
        """The append of Persist ``persist_id`` finished (``error_code`` 0 = acked by all
        in-sync replicas). Outcomes are applied in emission order, so a report may be held
        until the earlier ones arrive. Unknown ids are ignored."""
        if persist_id not in self._persistence or self._closed:
            return self._ctx.take()
        self._advance(now_ms)
        for settled_id, pending, outcome in self._persistence.settle(persist_id, error_code):
            if outcome != E.NONE:
                self._ctx.stats.persist_failures += 1
            self._complete_write(settled_id, pending, outcome, now_ms)
        self._advance(now_ms)
        return self._ctx.take()

    def load(self, records: Iterable[tuple[bytes, bytes | None]], now_ms: int) -> list[Action]:
        """Rebuild every group from a replay of this coordinator's partition, in log order.

        Call before serving. Groups with members come back Stable in their persisted
        generation with fresh session timers (live members keep working; dead ones
        expire); groups without come back Empty. Raises DecodeError on a malformed record.
        """
        ctx = self._ctx
        if self._persistence.pending_ids() or any(g.members or g.pending_members for g in ctx.groups.values()):
            raise RuntimeError("load() must run before the coordinator serves requests")
        replayed = replay(records)
        ctx.groups.clear()
        ctx.timers = Timers()
        for group_id in sorted(set(replayed.group_values) | set(replayed.offsets) | set(replayed.txn_offsets)):
            gv = replayed.group_values.get(group_id)
            group_offsets = replayed.offsets.get(group_id, {})
            txn_offsets = replayed.txn_offsets.get(group_id, {})
            if gv is None and not group_offsets and not txn_offsets:
                continue
            group = GroupMetadata(group_id)
            if gv is not None:
                self._persistence.restore_group(group, gv, now_ms)
            for tp, ov in group_offsets.items():
                group.offsets[tp] = committed(ov)
            group.txn_offsets = txn_offsets
            ctx.groups[group_id] = group
            self._retention.reschedule(group, now_ms)
        self._txn_offsets.restore(replayed.producers, now_ms)
        return ctx.take()

    def next_deadline(self, now_ms: int) -> int | None:
        """Earliest time at which :meth:`tick` has work, or None."""
        return None if self._closed else self._ctx.timers.next_deadline()

    def close(self, now_ms: int, error_code: int = E.NOT_COORDINATOR) -> list[Action]:
        """Stop serving (the partition moved or the actor stops): every request still
        waiting -- long-polling joins and syncs, unacknowledged commits -- is answered with
        ``error_code`` so the shell holds no dangling tokens."""
        ctx = self._ctx
        if self._closed:
            return ctx.take()
        self._closed = True
        for group in ctx.groups.values():
            for member in group.members.values():
                if member.awaiting_join:
                    ctx.reply_join(member, JoinGroupResponse(error_code=error_code, member_id=member.member_id))
                if member.awaiting_sync:
                    ctx.reply_sync(member, SyncGroupResponse(error_code=error_code))
        for p in self._persistence.abandon():
            if isinstance(p, CommitWrite):
                codes = {t: {q: error_code for q in parts} for t, parts in p.codes.items()}
                ctx.reply(p.token, OffsetCommitResponse(error_code=error_code, topics=codes))
            elif isinstance(p, StaticJoinWrite):
                ctx.reply(p.token, JoinGroupResponse(error_code=error_code, member_id=p.member_id))
            elif isinstance(p, DeleteWrite):
                results = dict(p.results)
                results.update({g: error_code for g in p.group_ids})
                ctx.reply(p.token, DeleteGroupsResponse(results=results))
            elif isinstance(p, TxnCommitWrite):
                codes = {t: {q: error_code for q in parts} for t, parts in p.codes.items()}
                ctx.reply(p.token, TxnOffsetCommitResponse(error_code=error_code, topics=codes))
            elif isinstance(p, MarkerWrite):
                for token in p.tokens:
                    ctx.reply(token, TxnOffsetMarkerResponse(error_code=error_code, error_message="coordinator closed"))
        self._txn_offsets.close(error_code)
        ctx.groups.clear()
        ctx.timers = Timers()
        return ctx.take()

    # -- read-only introspection (tests, metrics, the shell's admin helpers) ---------------

    def owns(self, group_id: str) -> bool:
        return self._ctx.owns(group_id)

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live group object. Read it; never mutate it."""
        return self._ctx.groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._ctx.groups)

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self._ctx.groups.get(group_id)
        return dict(group.offsets) if group else {}

    def pending_txn_offsets(self, group_id: str) -> dict[int, dict[tuple[str, int], CommittedOffset | None]]:
        """The group's transactional offsets pending their markers, by producer id (None: an
        append that failed and may have landed)."""
        group = self._ctx.groups.get(group_id)
        if group is None:
            return {}
        return {pid: {tp: e.offset for tp, e in offsets.items()} for pid, offsets in group.txn_offsets.items()}

    def txn_producers(self) -> dict[int, tuple[int, int]]:
        """Per transactional producer id: (producer epoch, coordinator epoch) accepted last."""
        return {pid: (v.producer_epoch, v.coordinator_epoch) for pid, v in self._txn_offsets.producers.items()}

    def txn_producer_values(self) -> dict[int, TxnProducerValue]:
        """Per transactional producer id: its ``[5, producer_id]`` record as memory holds it."""
        return dict(self._txn_offsets.producers)

    def pending_persists(self) -> list[int]:
        return self._persistence.pending_ids()

    # ======================================================================================
    # routing: timers and write outcomes go to the part that waits on them
    # ======================================================================================

    def _advance(self, now_ms: int) -> None:
        ctx = self._ctx
        while (key := ctx.timers.pop_due(now_ms)) is not None:
            kind, group_id = key[0], key[1]
            if kind == TimerKind.TXN_PRODUCER:
                self._txn_offsets.on_expire(key[1], now_ms)
                continue
            group = ctx.groups.get(group_id)
            if group is None:
                continue
            if kind == TimerKind.SESSION:
                self._membership.on_session_expired(group, key[2], now_ms)
            elif kind == TimerKind.JOIN:
                self._join.on_join_deadline(group, now_ms)
            elif kind == TimerKind.RETENTION:
                self._retention.on_retention(group, now_ms)

    def _complete_write(self, persist_id: int, pending: PendingWrite, code: int, now_ms: int) -> None:
        """Apply the outcome of AppendRecords ``persist_id`` (called in emission order)."""
        if isinstance(pending, CommitWrite):
            self._offsets.complete_commit(pending, code, now_ms)
        elif isinstance(pending, SyncWrite):
            self._sync.complete_sync_write(persist_id, pending, code, now_ms)
        elif isinstance(pending, StaticJoinWrite):
            self._join.complete_static_join(pending, code)
        elif isinstance(pending, DeleteWrite):
            self._admin.complete_delete(pending, code, now_ms)
        elif isinstance(pending, TxnCommitWrite):
            self._txn_offsets.complete_commit(pending, code, now_ms)
        elif isinstance(pending, MarkerWrite):
            self._txn_offsets.complete_marker(pending, code, now_ms)
        elif isinstance(pending, TxnProducerExpiryWrite):
            self._txn_offsets.complete_expiry(pending, code, now_ms)


__all__ = ["CoordinatorStats", "GroupCoordinatorState", "commit_error_for_append", "group_error_for_append"]
