"""In-memory model of a consumer group: its state, generation, members and offsets.

These are plain records with the bookkeeping rules that do not depend on time or I/O
(legal state transitions, static-member index, protocol selection). The rules that do
(rebalancing, timeouts, persistence) live in :mod:`kcoord.group.coordinator` and its parts,
the only writers of these objects.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class GroupState(str, Enum):
    """Kafka's classic group states; the value is the name clients see."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Short names for the states, shared by the coordinator's modules.
EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD


# Which states each state may be entered from. Dead -> Empty is kcoord's own: a DeleteGroups
# whose tombstones failed to persist puts the group back.
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
}


class IllegalStateTransition(AssertionError):
    """A bug in the coordinator: it tried a transition Kafka's protocol does not have."""


@dataclass
class MemberMetadata:
    """One member of a group. ``join_token``/``sync_token`` are the shell's handles for a
    JoinGroup/SyncGroup waiting on the rebalance; ``awaiting_*`` tell whether one is held
    (a token may legitimately be None)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    awaiting_join: bool = False
    join_token: Any = None
    awaiting_sync: bool = False
    sync_token: Any = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        """This member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass
class CommittedOffset:
    offset: int
    metadata: str
    leader_epoch: int
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


@dataclass
class TxnOffset:
    """A transactional offset pending its transaction's marker (KIP-447). ``offset`` None: an
    append of it failed and may still have landed, so the marker tombstones it but never
    commits it. ``superseded``: a plain commit of the partition landed after it; Kafka keeps
    the newer of the two, so the marker does not commit it."""

    offset: CommittedOffset | None
    superseded: bool = False


@dataclass
class GroupMetadata:
    """A group. ``members`` keeps join order (the first joined member leads by default);
    ``pending_members`` maps member ids handed out with MEMBER_ID_REQUIRED to their expiry."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # (topic, partition) -> number of commits written but not yet acknowledged.
    pending_offset_commits: Counter = field(default_factory=Counter)
    # producer id -> (topic, partition) -> its transactional offset, pending the marker.
    txn_offsets: dict[int, dict[tuple[str, int], TxnOffset]] = field(default_factory=dict)
    # (producer id, (topic, partition)) -> TxnOffsetCommits written, not yet acknowledged.
    pending_txn_commits: Counter = field(default_factory=Counter)
    # Join phase bookkeeping (Kafka's InitialDelayedJoin / DelayedJoin).
    in_initial_delay: bool = False
    initial_delay_remaining_ms: int = 0
    new_member_added: bool = False
    # Persist id of the leader's assignment write for the current generation, if in flight.
    sync_persist_id: int | None = None
    # Whether a group metadata record exists in the log (so removal needs a tombstone).
    has_persisted_metadata: bool = False

    # -- state -------------------------------------------------------------------------
    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition(self, target: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {target.value}")
        self.state = target
        self.state_timestamp_ms = now_ms

    # -- membership ----------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> MemberMetadata:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """True when ``group_instance_id`` now belongs to another member id (a newer
        incarnation of the same static member replaced this one)."""
        current = self.static_member_id(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_id: str, new_id: str) -> MemberMetadata:
        """Re-key a static member under a new member id, keeping its assignment."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[group_instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        return member

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # -- protocols -----------------------------------------------------------------------
    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        members = list(self.members.values())
        if not members:
            return set()
        common = set(members[0].protocol_names())
        for m in members[1:]:
            common &= set(m.protocol_names())
        return common

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        return self.protocol_type == protocol_type and bool(self.candidate_protocols() & set(names))

    def select_protocol(self) -> str:
        """The protocol with most first-choice votes among those all members support; ties
        go to the one the longest-standing member prefers (deterministic)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: members share no protocol")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        first = next(iter(self.members.values()))
        preference = {name: i for i, name in enumerate(first.protocol_names())}
        return min(votes, key=lambda name: (-votes[name], preference.get(name, len(preference)), name))

    # -- offsets -------------------------------------------------------------------------
    def has_offsets(self) -> bool:
        return bool(self.offsets) or bool(self.pending_offset_commits) or self.has_txn_offsets()

    def has_txn_offsets(self) -> bool:
        return bool(self.txn_offsets) or bool(self.pending_txn_commits)

    def has_pending_txn_offset(self, tp: tuple[str, int]) -> bool:
        """Whether a transaction holds an offset of ``tp`` (acknowledged or in flight):
        OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT, retention waits."""
        return any(tp in offsets for offsets in self.txn_offsets.values()) or any(
            key[1] == tp for key in self.pending_txn_commits
        )

    def is_removable(self) -> bool:
        """Nothing left worth keeping: no members (joined or pending), no offsets, nothing
        in flight."""
        return (
            self.state == GroupState.EMPTY
            and not self.members
            and not self.pending_members
            and not self.has_offsets()
        )
