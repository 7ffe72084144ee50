"""The group coordinator as a sans-I/O state machine (Kafka's classic group protocol).

One :class:`GroupCoordinatorState` owns every group that hashes to its partition of
``__consumer_offsets``. It never sleeps, sends or reads a clock: the shell feeds it inputs
with the current time and carries out the :mod:`actions <kcoord.group.actions>` it returns.

Entry points (each returns ``list[Action]``; each first fires the timers due at ``now_ms``)::

    coord = GroupCoordinatorState(config, partition=i, num_partitions=n)
    coord.load(records, now_ms)          # replay partition i before serving (restart)
    coord.handle(request, token, now_ms) # any group request; the reply may come later
    coord.tick(now_ms)                   # timers: sessions, join phases, retention
    coord.on_persisted(persist_id, error_code, now_ms)  # outcome of a Persist action
    coord.next_deadline()                # when tick() next has work (None: nothing timed)
    coord.close(error_code)              # give up the partition: fail everything pending

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

Layout: this module holds the entry points and the plumbing every part shares (replies,
long-polls, timer dispatch). The protocol's parts are mixins of
:class:`GroupCoordinatorState`, one per file: :mod:`.join` (JoinGroup, the join phase),
:mod:`.sync` (SyncGroup), :mod:`.membership` (sessions, heartbeats, LeaveGroup),
:mod:`.offsets` (OffsetCommit/OffsetFetch), :mod:`.admin` (Describe/List/DeleteGroups,
FindCoordinator), :mod:`.retention` (offset expiry) and :mod:`.persistence` (Persist
actions and their outcomes, the group record, replay).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

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
    error_response,
)
from .actions import Action, Reply
from .admin import GroupAdmin
from .config import GroupConfig
from .join import JOIN_TIMER, JoinPhase
from .membership import SESSION_TIMER, Membership
from .metadata import CommittedOffset, GroupMetadata, MemberMetadata
from .offsets import OffsetStore
from .persistence import (
    CommitWrite,
    DeleteWrite,
    InflightWrite,
    Persistence,
    StaticJoinWrite,
    commit_error_for_append,
    group_error_for_append,
    replay,
)
from .placement import coordinator_for
from .retention import RETENTION_TIMER, Retention
from .sync import SyncPhase
from .timers import Timers

E = ErrorCode


def _default_member_id(client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.uuid4()}"


@dataclass
class CoordinatorStats:
    """Counters a shell may export as metrics."""

    rebalances: int = 0
    members_expired: int = 0
    offsets_expired: int = 0
    persist_failures: int = 0


class GroupCoordinatorState(JoinPhase, SyncPhase, Membership, OffsetStore, GroupAdmin, Retention, Persistence):
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
        self.config = config or GroupConfig()
        self.partition = partition
        self.num_partitions = num_partitions
        self.stats = CoordinatorStats()
        self._new_member_id = member_id_factory or _default_member_id
        self._groups: dict[str, GroupMetadata] = {}
        self._timers = Timers()
        self._out: list[Action] = []
        self._next_persist_id = 1
        self._inflight: OrderedDict[int, InflightWrite] = OrderedDict()
        self._closed = False
        self._handlers: dict[type[Message], Callable[[Any, Any, int], None]] = {
            JoinGroupRequest: self._join,
            SyncGroupRequest: self._sync,
            GroupHeartbeatRequest: self._heartbeat,
            LeaveGroupRequest: self._leave,
            OffsetCommitRequest: self._commit,
            OffsetFetchRequest: self._fetch,
            DescribeGroupsRequest: self._describe,
            ListGroupsRequest: self._list,
            DeleteGroupsRequest: self._delete,
            FindCoordinatorRequest: self._find_coordinator,
        }

    # ======================================================================================
    # public entry points
    # ======================================================================================

    def handle(self, request: Message, token: Any, now_ms: int) -> list[Action]:
        """Process a group request. Its Reply (carrying ``token``) is among the returned
        actions, or comes from a later call when the request waits on a rebalance or a
        write."""
        handler = self._handlers.get(type(request))
        if handler is None:
            raise TypeError(f"not a group request: {type(request).__name__}")
        if self._closed:
            self._reply(token, error_response(request, E.NOT_COORDINATOR, "coordinator closed"))
            return self._take()
        self._advance(now_ms)
        group_id = getattr(request, "group_id", None)
        if group_id is not None and not group_id:
            self._reply(token, error_response(request, E.INVALID_GROUP_ID, "group id is empty"))
        elif group_id is not None and not self.owns(group_id):
            self._reply(token, error_response(request, E.NOT_COORDINATOR, self._not_mine(group_id)))
        else:
            handler(request, token, now_ms)
        self._advance(now_ms)
        return self._take()

    def tick(self, now_ms: int) -> list[Action]:
        """Fire every timer due at ``now_ms``."""
        if not self._closed:
            self._advance(now_ms)
        return self._take()

    def on_persisted(self, persist_id: int, error_code: int, now_ms: int) -> list[Action]:
        """The append of Persist ``persist_id`` finished (``error_code`` 0 = acked by all
        in-sync replicas). Outcomes are applied in emission order, so a report may be held
        until the earlier ones arrive. Unknown ids are ignored."""
        entry = self._inflight.get(persist_id)
        if entry is None or self._closed:
            return self._take()
        self._advance(now_ms)
        entry.outcome = int(error_code)
        while self._inflight:
            first_id, first = next(iter(self._inflight.items()))
            if first.outcome is None:
                break
            del self._inflight[first_id]
            if first.outcome != E.NONE:
                self.stats.persist_failures += 1
            self._complete_write(first_id, first.pending, first.outcome, now_ms)
        self._advance(now_ms)
        return self._take()

    def load(self, records: Iterable[tuple[bytes, bytes | None]], now_ms: int) -> None:
        """Rebuild every group from a replay of this coordinator's partition, in log order.

        Call before serving. Groups with members come back Stable in their persisted
        generation with fresh session timers (live members keep working; dead ones
        expire); groups without come back Empty. Raises DecodeError on a malformed record.
        """
        if self._inflight or any(g.members or g.pending_members for g in self._groups.values()):
            raise RuntimeError("load() must run before the coordinator serves requests")
        group_values, offsets = replay(records)
        self._groups.clear()
        self._timers = Timers()
        for group_id in sorted(set(group_values) | set(offsets)):
            gv = group_values.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if gv is None and not group_offsets:
                continue
            group = GroupMetadata(group_id)
            if gv is not None:
                self._restore_group(group, gv, now_ms)
            for (topic, partition), ov in group_offsets.items():
                group.offsets[(topic, partition)] = CommittedOffset(
                    ov.offset, ov.metadata, ov.leader_epoch, ov.commit_timestamp_ms, ov.expire_timestamp_ms
                )
            self._groups[group_id] = group
            self._reschedule_retention(group, now_ms)

    def next_deadline(self) -> int | None:
        """Earliest time at which :meth:`tick` has work, or None."""
        return None if self._closed else self._timers.next_deadline()

    def close(self, error_code: int = E.NOT_COORDINATOR) -> list[Action]:
        """Stop serving (the partition moved or the actor stops): every request still
        waiting -- long-polling joins and syncs, unacknowledged commits -- is answered with
        ``error_code`` so the shell holds no dangling tokens."""
        if self._closed:
            return self._take()
        self._closed = True
        for group in self._groups.values():
            for member in group.members.values():
                if member.awaiting_join:
                    self._reply_join(member, JoinGroupResponse(error_code=error_code, member_id=member.member_id))
                if member.awaiting_sync:
                    self._reply_sync(member, SyncGroupResponse(error_code=error_code))
        for entry in self._inflight.values():
            p = entry.pending
            if isinstance(p, CommitWrite):
                codes = {t: {q: error_code for q in parts} for t, parts in p.codes.items()}
                self._reply(p.token, OffsetCommitResponse(error_code=error_code, topics=codes))
            elif isinstance(p, StaticJoinWrite):
                self._reply(p.token, JoinGroupResponse(error_code=error_code, member_id=p.member_id))
            elif isinstance(p, DeleteWrite):
                results = dict(p.results)
                results.update({g: error_code for g in p.group_ids})
                self._reply(p.token, DeleteGroupsResponse(results=results))
        self._inflight.clear()
        self._groups.clear()
        self._timers = Timers()
        return self._take()

    # -- read-only introspection (tests, metrics, the shell's admin helpers) ---------------

    def owns(self, group_id: str) -> bool:
        return coordinator_for(group_id, self.num_partitions) == self.partition

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live group object. Read it; never mutate it."""
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self._groups.get(group_id)
        return dict(group.offsets) if group else {}

    def pending_persists(self) -> list[int]:
        return list(self._inflight)

    # ======================================================================================
    # plumbing
    # ======================================================================================

    def _take(self) -> list[Action]:
        out, self._out = self._out, []
        return out

    def _reply(self, token: Any, response: Message) -> None:
        self._out.append(Reply(token, response))

    def _not_mine(self, group_id: str) -> str:
        owner = coordinator_for(group_id, self.num_partitions)
        return f"group {group_id!r} belongs to coordinator {owner}, this is {self.partition}"

    def _advance(self, now_ms: int) -> None:
        while (key := self._timers.pop_due(now_ms)) is not None:
            kind, group_id = key[0], key[1]
            group = self._groups.get(group_id)
            if group is None:
                continue
            if kind == SESSION_TIMER:
                self._on_session_expired(group, key[2], now_ms)
            elif kind == JOIN_TIMER:
                self._on_join_deadline(group, now_ms)
            elif kind == RETENTION_TIMER:
                self._on_retention(group, now_ms)

    def _reply_join(self, member: MemberMetadata, response: JoinGroupResponse) -> None:
        token = member.join_token
        member.awaiting_join, member.join_token = False, None
        self._reply(token, response)

    def _reply_sync(self, member: MemberMetadata, response: SyncGroupResponse) -> None:
        token = member.sync_token
        member.awaiting_sync, member.sync_token = False, None
        self._reply(token, response)

    def _await_join(self, member: MemberMetadata, token: Any) -> None:
        if member.awaiting_join:  # the member retried; its older request gets an answer
            self._reply_join(
                member,
                JoinGroupResponse(
                    error_code=E.REBALANCE_IN_PROGRESS,
                    error_message="superseded by a newer JoinGroup from the same member",
                    member_id=member.member_id,
                ),
            )
        member.awaiting_join, member.join_token = True, token

    def _await_sync(self, member: MemberMetadata, token: Any) -> None:
        if member.awaiting_sync:
            self._reply_sync(
                member,
                SyncGroupResponse(
                    error_code=E.REBALANCE_IN_PROGRESS,
                    error_message="superseded by a newer SyncGroup from the same member",
                ),
            )
        member.awaiting_sync, member.sync_token = True, token

    def _create_group(self, group_id: str, now_ms: int) -> GroupMetadata:
        group = GroupMetadata(group_id, state_timestamp_ms=now_ms)
        self._groups[group_id] = group
        # A group created by a request that then fails must not linger forever.
        self._reschedule_retention(group, now_ms)
        return group


__all__ = ["CoordinatorStats", "GroupCoordinatorState", "commit_error_for_append", "group_error_for_append"]
