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

Durability rule (design.md): an offset commit, a leader's assignment and a static member's
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
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..protocol.codec import Message
from ..protocol.errors import ErrorCode
from ..protocol.group import (
    KEY_TYPE_GROUP,
    NO_OFFSET,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    GroupHeartbeatRequest,
    GroupHeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    error_response,
)
from .actions import Action, Persist, Reply
from .config import GroupConfig
from .metadata import CommittedOffset, GroupMetadata, GroupState, MemberMetadata
from .placement import coordinator_for
from .records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    Record,
    decode_record,
    group_record,
    offset_record,
)
from .timers import Timers

E = ErrorCode
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

_SESSION = "session"
_JOIN = "join"
_RETENTION = "retention"


# -- mapping a failed append of __consumer_offsets to what the client should hear ----------

_APPEND_UNAVAILABLE = frozenset(
    {
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.NOT_ENOUGH_REPLICAS,
        E.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        E.REQUEST_TIMED_OUT,
        E.LEADER_NOT_AVAILABLE,
    }
)
_APPEND_MOVED = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.KAFKA_STORAGE_ERROR, E.FENCED_LEADER_EPOCH})
_APPEND_TOO_LARGE = frozenset({E.MESSAGE_TOO_LARGE, E.RECORD_LIST_TOO_LARGE, E.INVALID_FETCH_SIZE})


def commit_error_for_append(code: int) -> int:
    """Kafka's mapping for offset commits: retriable coordinator errors where the client
    should retry or rediscover the coordinator."""
    if code in _APPEND_UNAVAILABLE:
        return E.COORDINATOR_NOT_AVAILABLE
    if code in _APPEND_MOVED:
        return E.NOT_COORDINATOR
    if code in _APPEND_TOO_LARGE:
        return E.INVALID_COMMIT_OFFSET_SIZE
    return code


def group_error_for_append(code: int) -> int:
    """Kafka's mapping for group metadata writes (SyncGroup, static rejoin, DeleteGroups)."""
    if code in _APPEND_UNAVAILABLE:
        return E.COORDINATOR_NOT_AVAILABLE
    if code in _APPEND_MOVED:
        return E.NOT_COORDINATOR
    if code in _APPEND_TOO_LARGE:
        return E.UNKNOWN_SERVER_ERROR
    return code


# -- writes in flight ----------------------------------------------------------------------


@dataclass
class _CommitWrite:
    token: Any
    group_id: str
    accepted: dict[tuple[str, int], CommittedOffset]
    codes: dict[str, dict[int, int]]


@dataclass
class _SyncWrite:
    group_id: str
    generation_id: int
    assignments: dict[str, bytes]


@dataclass
class _StaticJoinWrite:
    token: Any
    group_id: str
    member_id: str
    generation_id: int
    protocol_type: str | None
    protocol: str | None
    leader: str


@dataclass
class _DeleteWrite:
    token: Any
    results: dict[str, int]
    group_ids: list[str]
    # When each group became Empty: restored if the tombstones fail to persist.
    empty_since: dict[str, int | None]


@dataclass
class _BackgroundWrite:
    """Nobody waits on it (Empty-group record, retention tombstones)."""


_Pending = _CommitWrite | _SyncWrite | _StaticJoinWrite | _DeleteWrite | _BackgroundWrite


def _default_member_id(client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.uuid4()}"


@dataclass
class _Inflight:
    pending: _Pending
    outcome: int | None = None


@dataclass
class CoordinatorStats:
    """Counters a shell may export as metrics."""

    rebalances: int = 0
    members_expired: int = 0
    offsets_expired: int = 0
    persist_failures: int = 0


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
        self.config = config or GroupConfig()
        self.partition = partition
        self.num_partitions = num_partitions
        self.stats = CoordinatorStats()
        self._new_member_id = member_id_factory or _default_member_id
        self._groups: dict[str, GroupMetadata] = {}
        self._timers = Timers()
        self._out: list[Action] = []
        self._next_persist_id = 1
        self._inflight: OrderedDict[int, _Inflight] = OrderedDict()
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
        group_values: dict[str, GroupValue | None] = {}
        offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        for key, value in records:
            decoded = decode_record(key, value)
            if decoded is None:
                continue
            k, v = decoded
            if isinstance(k, OffsetKey):
                per_group = offsets.setdefault(k.group_id, {})
                if v is None:
                    per_group.pop((k.topic, k.partition), None)
                else:
                    assert isinstance(v, OffsetValue)
                    per_group[(k.topic, k.partition)] = v
            else:
                assert v is None or isinstance(v, GroupValue)
                group_values[k.group_id] = v
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
            if isinstance(p, _CommitWrite):
                codes = {t: {q: error_code for q in parts} for t, parts in p.codes.items()}
                self._reply(p.token, OffsetCommitResponse(error_code=error_code, topics=codes))
            elif isinstance(p, _StaticJoinWrite):
                self._reply(p.token, JoinGroupResponse(error_code=error_code, member_id=p.member_id))
            elif isinstance(p, _DeleteWrite):
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

    def _persist(self, records: list[Record], pending: _Pending, reason: str) -> int:
        pid = self._next_persist_id
        self._next_persist_id += 1
        self._inflight[pid] = _Inflight(pending)
        self._out.append(Persist(pid, records, reason))
        return pid

    def _not_mine(self, group_id: str) -> str:
        owner = coordinator_for(group_id, self.num_partitions)
        return f"group {group_id!r} belongs to coordinator {owner}, this is {self.partition}"

    def _advance(self, now_ms: int) -> None:
        while (key := self._timers.pop_due(now_ms)) is not None:
            kind, group_id = key[0], key[1]
            group = self._groups.get(group_id)
            if group is None:
                continue
            if kind == _SESSION:
                self._on_session_expired(group, key[2], now_ms)
            elif kind == _JOIN:
                self._on_join_deadline(group, now_ms)
            elif kind == _RETENTION:
                self._on_retention(group, now_ms)

    def _touch(self, group: GroupMetadata, member: MemberMetadata, now_ms: int) -> None:
        """Restart the member's session timer (Kafka's completeAndScheduleNextHeartbeat)."""
        self._timers.set((_SESSION, group.group_id, member.member_id), now_ms + member.session_timeout_ms)

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

    def _member_error(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None
    ) -> int:
        """Kafka's validateCurrentMember: NONE, FENCED_INSTANCE_ID or UNKNOWN_MEMBER_ID."""
        if group.is_static_member_fenced(member_id, group_instance_id):
            return E.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if group_instance_id is not None and member.group_instance_id != group_instance_id:
            return E.FENCED_INSTANCE_ID
        return E.NONE

    # ======================================================================================
    # JoinGroup
    # ======================================================================================

    def _join(self, req: JoinGroupRequest, token: Any, now_ms: int) -> None:
        cfg = self.config

        def fail(code: int, message: str | None = None) -> None:
            self._reply(token, JoinGroupResponse(error_code=code, error_message=message, member_id=req.member_id))

        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            fail(
                E.INVALID_SESSION_TIMEOUT,
                f"session timeout must be within [{cfg.group_min_session_timeout_ms}, "
                f"{cfg.group_max_session_timeout_ms}] ms",
            )
            return
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_id:
                fail(E.UNKNOWN_MEMBER_ID, "the group does not exist")
                return
            group = self._create_group(req.group_id, now_ms)
        if group.state == DEAD:
            fail(E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted")
            return
        names = [p.name for p in req.protocols]
        if not group.supports_protocols(req.protocol_type, names):
            fail(
                E.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol type {req.protocol_type!r} with {names} is not compatible with the group",
            )
            return
        known = group.has(req.member_id) or group.static_member_id(req.group_instance_id) is not None
        if not known and len(group.members) >= cfg.group_max_size:
            fail(E.GROUP_MAX_SIZE_REACHED, f"the group has reached its maximum size ({cfg.group_max_size})")
            return
        if not req.member_id:
            self._join_unknown_member(group, req, token, now_ms)
        else:
            self._join_known_member(group, req, token, now_ms)

    def _new_member(self, group: GroupMetadata, member_id: str, req: JoinGroupRequest) -> MemberMetadata:
        return MemberMetadata(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=_rebalance_timeout(req),
            protocol_type=req.protocol_type,
            protocols=[(p.name, p.metadata) for p in req.protocols],
        )

    def _fresh_member_id(self, group: GroupMetadata, client_id: str) -> str:
        while True:
            member_id = self._new_member_id(client_id)
            if member_id and not group.has(member_id) and member_id not in group.pending_members:
                return member_id

    def _join_unknown_member(self, group: GroupMetadata, req: JoinGroupRequest, token: Any, now_ms: int) -> None:
        member_id = self._fresh_member_id(group, req.client_id)
        if req.group_instance_id is not None:
            if group.static_member_id(req.group_instance_id) is not None:
                self._replace_static_member(group, req, member_id, token, now_ms)
            else:
                self._add_member_and_rebalance(group, self._new_member(group, member_id, req), token, now_ms)
            return
        # KIP-394: hand out the id first, so a client that times out and retries does not
        # leave a ghost member behind that holds up the next rebalance.
        deadline = now_ms + req.session_timeout_ms
        group.pending_members[member_id] = deadline
        self._timers.set((_SESSION, group.group_id, member_id), deadline)
        self._reply(
            token,
            JoinGroupResponse(
                error_code=E.MEMBER_ID_REQUIRED,
                error_message="rejoin with the assigned member id",
                member_id=member_id,
            ),
        )

    def _join_known_member(self, group: GroupMetadata, req: JoinGroupRequest, token: Any, now_ms: int) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            if group.is_static_member_fenced(member_id, req.group_instance_id):
                self._reply(token, JoinGroupResponse(error_code=E.FENCED_INSTANCE_ID, member_id=member_id))
                return
            del group.pending_members[member_id]
            self._timers.cancel((_SESSION, group.group_id, member_id))
            self._add_member_and_rebalance(group, self._new_member(group, member_id, req), token, now_ms)
            return
        error = self._member_error(group, member_id, req.group_instance_id)
        if error == E.NONE and group.state in (EMPTY, DEAD):
            error = E.UNKNOWN_MEMBER_ID
        if error != E.NONE:
            self._reply(token, JoinGroupResponse(error_code=error, member_id=member_id))
            return
        member = group.members[member_id]
        protocols = [(p.name, p.metadata) for p in req.protocols]
        if group.state == PREPARING:
            self._update_member_and_rebalance(group, member, req, token, now_ms)
        elif group.state == COMPLETING:
            if protocols == member.protocols:
                # The member lost our response; repeat it.
                self._touch(group, member, now_ms)
                self._reply(token, self._join_response(group, member))
            else:
                self._update_member_and_rebalance(group, member, req, token, now_ms)
        else:  # STABLE
            if member_id == group.leader or protocols != member.protocols:
                # A leader's rejoin means it saw metadata change (e.g. new partitions).
                self._update_member_and_rebalance(group, member, req, token, now_ms)
            else:
                self._touch(group, member, now_ms)
                self._reply(token, self._join_response(group, member, with_members=False))

    def _join_response(
        self, group: GroupMetadata, member: MemberMetadata, with_members: bool = True
    ) -> JoinGroupResponse:
        members: list[JoinGroupMember] = []
        if with_members and member.member_id == group.leader:
            members = [
                JoinGroupMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol))
                for m in group.members.values()
            ]
        return JoinGroupResponse(
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol,
            leader=group.leader or "",
            member_id=member.member_id,
            members=members,
        )

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, token: Any, now_ms: int
    ) -> None:
        if group.state == PREPARING and group.in_initial_delay:
            group.new_member_added = True
        group.add(member)
        self._await_join(member, token)
        self._touch(group, member, now_ms)
        self._maybe_prepare_rebalance(group, now_ms)
        self._try_complete_join(group, now_ms)

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, req: JoinGroupRequest, token: Any, now_ms: int
    ) -> None:
        member.protocols = [(p.name, p.metadata) for p in req.protocols]
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = _rebalance_timeout(req)
        member.client_id, member.client_host = req.client_id, req.client_host
        self._await_join(member, token)
        self._touch(group, member, now_ms)
        self._maybe_prepare_rebalance(group, now_ms)
        self._try_complete_join(group, now_ms)

    def _replace_static_member(
        self, group: GroupMetadata, req: JoinGroupRequest, new_id: str, token: Any, now_ms: int
    ) -> None:
        instance = req.group_instance_id
        assert instance is not None
        old_id = group.static_members[instance]
        old = group.members[old_id]
        fenced = "a newer instance with the same group.instance.id joined"
        if old.awaiting_join:
            self._reply_join(old, JoinGroupResponse(error_code=E.FENCED_INSTANCE_ID, error_message=fenced, member_id=old_id))
        if old.awaiting_sync:
            self._reply_sync(old, SyncGroupResponse(error_code=E.FENCED_INSTANCE_ID, error_message=fenced))
        self._timers.cancel((_SESSION, group.group_id, old_id))
        leader_before = group.leader or ""
        member = group.replace_static_member(instance, old_id, new_id)
        member.protocols = [(p.name, p.metadata) for p in req.protocols]
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = _rebalance_timeout(req)
        member.client_id, member.client_host = req.client_id, req.client_host
        self._touch(group, member, now_ms)
        if group.state == STABLE and group.select_protocol() == group.protocol:
            # KIP-345: a restarted static member takes its old place without a rebalance.
            # Reply with the leader as it was, so a replaced leader does not think it must
            # assign (its new id differs); it syncs and gets its old assignment back.
            pending = _StaticJoinWrite(
                token, group.group_id, new_id, group.generation_id, group.protocol_type, group.protocol, leader_before
            )
            self._persist(
                [self._group_record(group, {m.member_id: m.assignment for m in group.members.values()}, now_ms)],
                pending,
                f"static member {instance} of group {group.group_id} rejoined as {new_id}",
            )
            return
        # Otherwise the old id may already be in the leader's hands, or the protocol would
        # change: the new incarnation joins a fresh rebalance like everyone else.
        self._await_join(member, token)
        if group.state == PREPARING:
            self._try_complete_join(group, now_ms)
        else:
            self._prepare_rebalance(group, now_ms)

    # -- join phase ------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state in (STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(group, now_ms)

    def _prepare_rebalance(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state == COMPLETING:
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS, now_ms)
        was_empty = group.state == EMPTY
        group.transition(PREPARING, now_ms)
        group.sync_persist_id = None
        self.stats.rebalances += 1
        self._timers.cancel((_RETENTION, group.group_id))
        delay = self.config.group_initial_rebalance_delay_ms
        if was_empty:
            group.in_initial_delay = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            self._timers.set((_JOIN, group.group_id), now_ms + delay)
        else:
            group.in_initial_delay = False
            self._timers.set((_JOIN, group.group_id), now_ms + group.rebalance_timeout_ms())
        self._try_complete_join(group, now_ms)

    def _try_complete_join(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state != PREPARING:
            return
        if not group.members and not group.pending_members:
            self._complete_join(group, now_ms)
        elif not group.in_initial_delay and group.all_members_joined():
            self._complete_join(group, now_ms)

    def _on_join_deadline(self, group: GroupMetadata, now_ms: int) -> None:
        if group.state != PREPARING:
            return
        if group.in_initial_delay and group.new_member_added and group.initial_delay_remaining_ms > 0:
            delay = min(self.config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms -= delay
            group.new_member_added = False
            self._timers.set((_JOIN, group.group_id), now_ms + delay)
            return
        self._complete_join(group, now_ms)

    def _complete_join(self, group: GroupMetadata, now_ms: int) -> None:
        for member in list(group.members.values()):
            if not member.awaiting_join and not member.is_static:
                group.remove(member.member_id)
                self._timers.cancel((_SESSION, group.group_id, member.member_id))
        group.in_initial_delay = False
        if group.members and not any(m.awaiting_join for m in group.members.values()):
            # Only static members that have not rejoined are left: wait another rebalance
            # timeout for them (their sessions expire meanwhile if they are gone).
            self._timers.set((_JOIN, group.group_id), now_ms + group.rebalance_timeout_ms())
            return
        self._timers.cancel((_JOIN, group.group_id))
        leader = group.members.get(group.leader) if group.leader else None
        if leader is None or not leader.awaiting_join:
            group.leader = next((m.member_id for m in group.members.values() if m.awaiting_join), None)
        group.generation_id += 1
        if not group.members:
            group.protocol, group.leader = None, None
            group.transition(EMPTY, now_ms)
            self._persist(
                [self._group_record(group, {}, now_ms)],
                _BackgroundWrite(),
                f"group {group.group_id} is empty at generation {group.generation_id}",
            )
            self._reschedule_retention(group, now_ms)
            return
        group.protocol = group.select_protocol()
        group.transition(COMPLETING, now_ms)
        for member in group.members.values():
            if member.awaiting_join:
                self._reply_join(member, self._join_response(group, member))
                self._touch(group, member, now_ms)

    # ======================================================================================
    # SyncGroup
    # ======================================================================================

    def _sync(self, req: SyncGroupRequest, token: Any, now_ms: int) -> None:
        def fail(code: int, message: str | None = None) -> None:
            self._reply(token, SyncGroupResponse(error_code=code, error_message=message))

        group = self._groups.get(req.group_id)
        if group is None:
            fail(E.UNKNOWN_MEMBER_ID, "the group does not exist")
            return
        if group.state == DEAD:
            fail(E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted")
            return
        error = self._member_error(group, req.member_id, req.group_instance_id)
        if error != E.NONE:
            fail(error)
            return
        if req.generation_id != group.generation_id:
            fail(E.ILLEGAL_GENERATION, f"generation {req.generation_id} is not the current {group.generation_id}")
            return
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol
        ):
            fail(E.INCONSISTENT_GROUP_PROTOCOL)
            return
        member = group.members[req.member_id]
        if group.state == EMPTY:
            fail(E.UNKNOWN_MEMBER_ID)
        elif group.state == PREPARING:
            fail(E.REBALANCE_IN_PROGRESS, "rejoin the group")
        elif group.state == STABLE:
            self._touch(group, member, now_ms)
            self._reply(token, self._sync_response(group, member.assignment))
        else:  # COMPLETING
            self._await_sync(member, token)
            if member.member_id == group.leader and group.sync_persist_id is None:
                assignments = {a.member_id: a.assignment for a in req.assignments if group.has(a.member_id)}
                full = {m: assignments.get(m, b"") for m in group.members}
                group.sync_persist_id = self._persist(
                    [self._group_record(group, full, now_ms)],
                    _SyncWrite(group.group_id, group.generation_id, full),
                    f"assignment of group {group.group_id} generation {group.generation_id}",
                )

    def _sync_response(self, group: GroupMetadata, assignment: bytes) -> SyncGroupResponse:
        return SyncGroupResponse(protocol_type=group.protocol_type, protocol_name=group.protocol, assignment=assignment)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata, error: int, now_ms: int) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync:
                self._reply_sync(member, SyncGroupResponse(error_code=error))
                self._touch(group, member, now_ms)

    # ======================================================================================
    # GroupHeartbeat / LeaveGroup / session expiry
    # ======================================================================================

    def _heartbeat(self, req: GroupHeartbeatRequest, token: Any, now_ms: int) -> None:
        def answer(code: int, message: str | None = None) -> None:
            self._reply(token, GroupHeartbeatResponse(error_code=code, error_message=message))

        group = self._groups.get(req.group_id)
        if group is None:
            answer(E.UNKNOWN_MEMBER_ID, "the group does not exist")
            return
        if group.state == DEAD:
            answer(E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted")
            return
        error = self._member_error(group, req.member_id, req.group_instance_id)
        if error != E.NONE:
            answer(error)
            return
        if req.generation_id != group.generation_id:
            answer(E.ILLEGAL_GENERATION, f"generation {req.generation_id} is not the current {group.generation_id}")
            return
        if group.state == EMPTY:
            answer(E.UNKNOWN_MEMBER_ID)
            return
        self._touch(group, group.members[req.member_id], now_ms)
        if group.state == PREPARING:
            answer(E.REBALANCE_IN_PROGRESS, "rejoin the group")
        else:
            answer(E.NONE)

    def _leave(self, req: LeaveGroupRequest, token: Any, now_ms: int) -> None:
        group = self._groups.get(req.group_id)
        if group is not None and group.state == DEAD:
            self._reply(token, error_response(req, E.COORDINATOR_NOT_AVAILABLE, "the group is being deleted"))
            return
        results = []
        for leaving in req.members:
            code = E.UNKNOWN_MEMBER_ID if group is None else self._leave_one(group, leaving, now_ms)
            results.append(LeaveGroupMemberResponse(leaving.member_id, leaving.group_instance_id, code))
        self._reply(token, LeaveGroupResponse(members=results))

    def _leave_one(self, group: GroupMetadata, leaving: LeaveGroupMember, now_ms: int) -> int:
        member_id, instance = leaving.member_id, leaving.group_instance_id
        if not member_id:
            # KIP-345: an operator may remove a static member by instance id alone.
            member_id = group.static_member_id(instance) or ""
            if not member_id:
                return E.UNKNOWN_MEMBER_ID
        elif member_id in group.pending_members and instance is None:
            del group.pending_members[member_id]
            self._timers.cancel((_SESSION, group.group_id, member_id))
            self._after_pending_member_gone(group, now_ms)
            return E.NONE
        else:
            error = self._member_error(group, member_id, instance)
            if error != E.NONE:
                return error
        self._remove_member_and_update_group(group, group.members[member_id], now_ms)
        return E.NONE

    def _on_session_expired(self, group: GroupMetadata, member_id: str, now_ms: int) -> None:
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._after_pending_member_gone(group, now_ms)
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if member.awaiting_join or member.awaiting_sync:
            # Blocked in a long-poll we have not answered: alive by definition. The timer
            # restarts when the answer goes out; re-arm in case that path is missed.
            self._touch(group, member, now_ms)
            return
        self.stats.members_expired += 1
        self._remove_member_and_update_group(group, member, now_ms)

    def _after_pending_member_gone(self, group: GroupMetadata, now_ms: int) -> None:
        self._try_complete_join(group, now_ms)
        self._reschedule_retention(group, now_ms)

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata, now_ms: int) -> None:
        if member.awaiting_join:
            self._reply_join(member, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=member.member_id))
        if member.awaiting_sync:
            self._reply_sync(member, SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        self._timers.cancel((_SESSION, group.group_id, member.member_id))
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group, now_ms)
        elif group.state == PREPARING:
            self._try_complete_join(group, now_ms)

    # ======================================================================================
    # OffsetCommit / OffsetFetch
    # ======================================================================================

    def _commit(self, req: OffsetCommitRequest, token: Any, now_ms: int) -> None:
        def fail(code: int, message: str | None = None) -> None:
            self._reply(token, error_response(req, code, message))

        group = self._groups.get(req.group_id)
        simple = req.generation_id < 0 and not req.member_id and req.group_instance_id is None
        if group is None:
            if req.generation_id >= 0:
                fail(E.ILLEGAL_GENERATION, "the group does not exist (any generation is stale)")
                return
            group = self._create_group(req.group_id, now_ms)
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
            error = self._member_error(group, req.member_id, req.group_instance_id)
            if error != E.NONE:
                fail(error)
                return
            if req.generation_id != group.generation_id:
                fail(E.ILLEGAL_GENERATION, f"generation {req.generation_id} is not the current {group.generation_id}")
                return
            if group.state == COMPLETING:
                fail(E.REBALANCE_IN_PROGRESS, "the group is completing a rebalance; commit after SyncGroup")
                return
            self._touch(group, group.members[req.member_id], now_ms)

        limit = self.config.offset_metadata_max_bytes
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
            self._reply(token, OffsetCommitResponse(topics=codes))
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
        self._persist(records, _CommitWrite(token, group.group_id, accepted, codes), f"offset commit of group {group.group_id}")

    def _fetch(self, req: OffsetFetchRequest, token: Any, now_ms: int) -> None:
        group = self._groups.get(req.group_id)
        offsets: dict[tuple[str, int], CommittedOffset] = {}
        if group is not None and group.state != DEAD:
            offsets = group.offsets
        out: dict[str, dict[int, OffsetFetchPartition]] = {}
        if req.topics is None:
            for (topic, partition), o in sorted(offsets.items()):
                out.setdefault(topic, {})[partition] = OffsetFetchPartition(o.offset, o.metadata, o.leader_epoch)
        else:
            for topic, partitions in req.topics.items():
                out[topic] = {}
                for partition in partitions:
                    o = offsets.get((topic, partition))
                    out[topic][partition] = (
                        OffsetFetchPartition(NO_OFFSET, "", -1)
                        if o is None
                        else OffsetFetchPartition(o.offset, o.metadata, o.leader_epoch)
                    )
        self._reply(token, OffsetFetchResponse(offsets=out))

    # ======================================================================================
    # DescribeGroups / ListGroups / DeleteGroups / FindCoordinator
    # ======================================================================================

    def _describe(self, req: DescribeGroupsRequest, token: Any, now_ms: int) -> None:
        described = []
        for group_id in req.group_ids:
            if not group_id:
                described.append(DescribedGroup(group_id, error_code=E.INVALID_GROUP_ID))
                continue
            if not self.owns(group_id):
                described.append(DescribedGroup(group_id, error_code=E.NOT_COORDINATOR))
                continue
            group = self._groups.get(group_id)
            if group is None:
                described.append(DescribedGroup(group_id, error_code=E.GROUP_ID_NOT_FOUND, state=DEAD.value))
                continue
            stable = group.state == STABLE
            members = [
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata_for(group.protocol) if stable else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            ]
            described.append(
                DescribedGroup(
                    group_id,
                    state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol=group.protocol or "",
                    generation_id=group.generation_id,
                    leader=group.leader or "",
                    members=members,
                )
            )
        self._reply(token, DescribeGroupsResponse(groups=described))

    def _list(self, req: ListGroupsRequest, token: Any, now_ms: int) -> None:
        wanted = {s.lower() for s in req.states_filter or []}

        def listed(g: GroupMetadata) -> bool:
            return g.state.value.lower() in wanted if wanted else g.state != DEAD

        groups = [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in sorted(self._groups.values(), key=lambda g: g.group_id)
            if listed(g)
        ]
        self._reply(token, ListGroupsResponse(groups=groups))

    def _delete(self, req: DeleteGroupsRequest, token: Any, now_ms: int) -> None:
        results: dict[str, int] = {}
        eligible: list[GroupMetadata] = []
        for group_id in req.group_ids:
            if group_id in results:
                continue
            group = self._groups.get(group_id)
            if not group_id:
                results[group_id] = E.INVALID_GROUP_ID
            elif not self.owns(group_id):
                results[group_id] = E.NOT_COORDINATOR
            elif group is None or group.state == DEAD:
                results[group_id] = E.GROUP_ID_NOT_FOUND
            elif group.state != EMPTY or group.members:
                results[group_id] = E.NON_EMPTY_GROUP
            else:
                results[group_id] = E.NONE
                eligible.append(group)
        if not eligible:
            self._reply(token, DeleteGroupsResponse(results=results))
            return
        records: list[Record] = []
        empty_since = {g.group_id: g.state_timestamp_ms for g in eligible}
        for group in eligible:
            partitions = set(group.offsets) | set(group.pending_offset_commits)
            records.extend(offset_record(OffsetKey(group.group_id, t, p), None) for t, p in sorted(partitions))
            records.append(group_record(GroupKey(group.group_id), None))
            for member_id in list(group.pending_members):
                self._timers.cancel((_SESSION, group.group_id, member_id))
            group.pending_members.clear()
            self._timers.cancel((_JOIN, group.group_id))
            self._timers.cancel((_RETENTION, group.group_id))
            group.transition(DEAD, now_ms)
        pending_ids = [g.group_id for g in eligible]
        others = {g: c for g, c in results.items() if g not in pending_ids}
        self._persist(
            records, _DeleteWrite(token, others, pending_ids, empty_since), f"delete groups {pending_ids}"
        )

    def _find_coordinator(self, req: FindCoordinatorRequest, token: Any, now_ms: int) -> None:
        if req.key_type != KEY_TYPE_GROUP:
            self._reply(token, FindCoordinatorResponse(error_code=E.INVALID_REQUEST, error_message="only group keys are served"))
        elif not req.key:
            self._reply(token, FindCoordinatorResponse(error_code=E.INVALID_GROUP_ID, error_message="group id is empty"))
        else:
            self._reply(token, FindCoordinatorResponse(coordinator=coordinator_for(req.key, self.num_partitions)))

    # ======================================================================================
    # persistence outcomes
    # ======================================================================================

    def _complete_write(self, persist_id: int, pending: _Pending, code: int, now_ms: int) -> None:
        ok = code == E.NONE
        if isinstance(pending, _CommitWrite):
            self._complete_commit(pending, code, now_ms)
        elif isinstance(pending, _SyncWrite):
            group = self._groups.get(pending.group_id)
            if group is None:
                return
            if ok:
                group.has_persisted_metadata = True
            if group.state != COMPLETING or group.generation_id != pending.generation_id or group.sync_persist_id != persist_id:
                return  # the generation moved on; its members were already told
            group.sync_persist_id = None
            if ok:
                for member in group.members.values():
                    member.assignment = pending.assignments.get(member.member_id, b"")
                group.transition(STABLE, now_ms)
                for member in group.members.values():
                    if member.awaiting_sync:
                        self._reply_sync(member, self._sync_response(group, member.assignment))
                        self._touch(group, member, now_ms)
            else:
                self._reset_and_propagate_assignment_error(group, group_error_for_append(code), now_ms)
                self._prepare_rebalance(group, now_ms)
        elif isinstance(pending, _StaticJoinWrite):
            group = self._groups.get(pending.group_id)
            if group is not None and ok:
                group.has_persisted_metadata = True
            if not ok:
                self._reply(pending.token, JoinGroupResponse(error_code=group_error_for_append(code), member_id=pending.member_id))
            elif group is None or not group.has(pending.member_id):
                self._reply(pending.token, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=pending.member_id))
            else:
                self._reply(
                    pending.token,
                    JoinGroupResponse(
                        generation_id=pending.generation_id,
                        protocol_type=pending.protocol_type,
                        protocol_name=pending.protocol,
                        leader=pending.leader,
                        member_id=pending.member_id,
                    ),
                )
        elif isinstance(pending, _DeleteWrite):
            results = dict(pending.results)
            for group_id in pending.group_ids:
                group = self._groups.get(group_id)
                if ok:
                    if group is not None and group.state == DEAD:
                        del self._groups[group_id]
                    results[group_id] = E.NONE
                else:
                    if group is not None and group.state == DEAD:
                        since = pending.empty_since.get(group_id)
                        group.transition(EMPTY, now_ms if since is None else since)
                        self._reschedule_retention(group, now_ms)
                    results[group_id] = group_error_for_append(code)
            self._reply(pending.token, DeleteGroupsResponse(results={g: results[g] for g in sorted(results)}))

    def _complete_commit(self, pending: _CommitWrite, code: int, now_ms: int) -> None:
        group = self._groups.get(pending.group_id)
        if group is not None:
            for tp, committed in pending.accepted.items():
                group.pending_offset_commits[tp] -= 1
                if group.pending_offset_commits[tp] <= 0:
                    del group.pending_offset_commits[tp]
                if code == E.NONE:
                    group.offsets[tp] = committed
            self._reschedule_retention(group, now_ms)
        codes = pending.codes
        if code != E.NONE:
            mapped = commit_error_for_append(code)
            codes = {t: {p: (mapped if c == E.NONE else c) for p, c in parts.items()} for t, parts in codes.items()}
        self._reply(pending.token, OffsetCommitResponse(topics=codes))

    def _group_record(self, group: GroupMetadata, assignments: dict[str, bytes], now_ms: int) -> Record:
        group.has_persisted_metadata = True
        members = [
            MemberValue(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(group.protocol),
                assignments.get(m.member_id, b""),
            )
            for m in group.members.values()
        ]
        value = GroupValue(
            group.protocol_type,
            group.generation_id,
            group.protocol,
            group.leader,
            group.state_timestamp_ms if group.state == EMPTY and group.state_timestamp_ms is not None else now_ms,
            members,
        )
        return group_record(GroupKey(group.group_id), value)

    def _restore_group(self, group: GroupMetadata, gv: GroupValue, now_ms: int) -> None:
        group.generation_id = gv.generation_id
        group.protocol_type = gv.protocol_type
        group.has_persisted_metadata = True
        group.state_timestamp_ms = gv.state_timestamp_ms
        if not gv.members:
            group.state = EMPTY
            return
        group.state = STABLE
        group.protocol = gv.protocol
        for mv in gv.members:
            member = MemberMetadata(
                member_id=mv.member_id,
                group_instance_id=mv.group_instance_id,
                client_id=mv.client_id,
                client_host=mv.client_host,
                session_timeout_ms=mv.session_timeout_ms,
                rebalance_timeout_ms=mv.rebalance_timeout_ms,
                protocol_type=gv.protocol_type or "",
                protocols=[(gv.protocol or "", mv.subscription)],
                assignment=mv.assignment,
            )
            group.add(member)
            self._touch(group, member, now_ms)
        group.protocol_type = gv.protocol_type
        group.leader = gv.leader if gv.leader in group.members else next(iter(group.members))

    # ======================================================================================
    # retention
    # ======================================================================================

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
        key = (_RETENTION, group.group_id)
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
            self._persist(records, _BackgroundWrite(), f"retention of group {group.group_id}")


def _rebalance_timeout(req: JoinGroupRequest) -> int:
    # Kafka's v0 clients had no rebalance timeout; the session timeout stood in for it.
    return req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms
