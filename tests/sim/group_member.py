"""The simulated consumer-group member: JoinGroup (with MEMBER_ID_REQUIRED), SyncGroup (the
leader assigns with the real RangeAssignor), heartbeats, offset fetches on assignment and
periodic commits of a growing position, leaving and rejoining; it reports every committed
and fetched offset and every assignment it received (invariant 6)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from kcoord.group.assignors import RangeAssignor
from kcoord.group.placement import coordinator_for
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.group import (
    Assignment,
    GroupHeartbeatRequest,
    GroupHeartbeatResponse,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Subscription,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)

from .clients import Client
from .processes import CLUSTER

if TYPE_CHECKING:
    from .simulation import Simulation

E = ErrorCode


class Member(Client):
    """A consumer-group member that "consumes" by committing a growing position for each
    partition it owns (the data itself is the readers' business)."""

    SESSION_TIMEOUT_MS = 2_000
    REBALANCE_TIMEOUT_MS = 3_000
    HEARTBEAT_MS = 300
    COMMIT_GAP_MS = (50, 300)

    def __init__(self, sim: "Simulation", index: int, group_id: str, topics: list[str]) -> None:
        super().__init__(sim, f"client/member{index}")
        self.group_id = group_id
        self.topics = sorted(topics)
        self.member_id = ""
        self.generation = -1
        self.state = "unjoined"  # unjoined -> joining -> syncing -> stable; "left", "dead"
        self.owned: list[tuple[str, int]] = []
        self.positions: dict[tuple[str, int], int] = {}
        self.alive = True  # False: crashed (silent), or left for good
        self._epoch = 0  # bumps on every (re)join attempt: stale callbacks are ignored
        self._commit_in_flight = False
        self.joins = 0
        self.commits = 0

    @property
    def coordinator(self) -> str:
        return names.group_coordinator(CLUSTER, coordinator_for(self.group_id, self.sim.scenario.coordinators))

    def start(self) -> None:
        self.alive = True
        self._join()

    # -- join / sync ------------------------------------------------------------------------
    def _join(self) -> None:
        if not self.alive:
            return
        self._epoch += 1
        self.joins += 1
        self.state = "joining"
        self.owned = []
        sub = Subscription(self.topics).encode()
        req = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=self.REBALANCE_TIMEOUT_MS,
            member_id=self.member_id,
            protocols=[JoinGroupProtocol("range", sub)],
            client_id=self.name,
        )
        self.call(self.coordinator, req, JoinGroupResponse, partial(self._joined, self._epoch), self.REBALANCE_TIMEOUT_MS + 2_000)

    def _retry_join(self, delay: int | None = None) -> None:
        self.state = "unjoined"
        self.owned = []
        self._epoch += 1
        self.later(delay if delay is not None else self.sim.config.client_backoff_ms * 2, self._join)

    def _joined(self, epoch: int, response: Message | None, kind: str) -> None:
        if epoch != self._epoch or not self.alive:
            return
        if not isinstance(response, JoinGroupResponse):
            self._retry_join()
            return
        code = response.error_code
        if code == E.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self._join()
            return
        if code == E.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if code != E.NONE:
            self._retry_join()
            return
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.state = "syncing"
        assignments: list[SyncGroupAssignment] = []
        if response.leader == self.member_id:
            subs = {m.member_id: Subscription.decode(m.metadata) for m in response.members}
            counts = {t.name: t.partitions for t in self.sim.scenario.topics}
            result = RangeAssignor().assign(counts, subs)
            assignments = [SyncGroupAssignment(mid, a.encode()) for mid, a in sorted(result.items())]
        req = SyncGroupRequest(self.group_id, self.generation, self.member_id, protocol_type="consumer", protocol_name="range", assignments=assignments)
        self.call(self.coordinator, req, SyncGroupResponse, partial(self._synced, self._epoch, self.generation), self.REBALANCE_TIMEOUT_MS + 2_000)

    def _synced(self, epoch: int, generation: int, response: Message | None, kind: str) -> None:
        if epoch != self._epoch or not self.alive:
            return
        if not isinstance(response, SyncGroupResponse) or response.error_code != E.NONE:
            if isinstance(response, SyncGroupResponse) and response.error_code == E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self._retry_join()
            return
        owned = Assignment.decode(response.assignment).topic_partitions() if response.assignment else []
        self.owned = owned
        self.state = "stable"
        self.sim.history.groups.on_assignment(self.group_id, generation, self.member_id, owned, self.sim.kernel.now)
        # Start from the committed offsets of what we now own.
        if owned:
            self._fetch_offsets(epoch, owned, on_assign=True)
        self.later(self.HEARTBEAT_MS, self._heartbeat, epoch)
        self.later(self.sim.kernel.rng.randint(*self.COMMIT_GAP_MS), self._commit, epoch)

    # -- steady state -----------------------------------------------------------------------
    def _heartbeat(self, epoch: int) -> None:
        if epoch != self._epoch or not self.alive or self.state != "stable":
            return
        req = GroupHeartbeatRequest(self.group_id, self.generation, self.member_id)
        self.call(self.coordinator, req, GroupHeartbeatResponse, partial(self._beat, epoch), self.SESSION_TIMEOUT_MS)

    def _beat(self, epoch: int, response: Message | None, kind: str) -> None:
        if epoch != self._epoch or not self.alive:
            return
        code = response.error_code if isinstance(response, GroupHeartbeatResponse) else None
        if code in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            if code == E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self._retry_join(0)
            return
        self.later(self.HEARTBEAT_MS, self._heartbeat, epoch)

    def _fetch_offsets(self, epoch: int, partitions: list[tuple[str, int]], on_assign: bool = False) -> None:
        topics: dict[str, list[int]] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(p)
        groups = self.sim.history.groups
        floors = {tp: groups.floor(self.group_id, tp) for tp in partitions}
        sent = self.sim.kernel.now
        req = OffsetFetchRequest(self.group_id, topics)
        self.call(self.coordinator, req, OffsetFetchResponse, partial(self._fetched, epoch, floors, sent, on_assign))

    def _fetched(self, epoch: int, floors: dict, sent: int, on_assign: bool, response: Message | None, kind: str) -> None:
        if not isinstance(response, OffsetFetchResponse) or response.error_code != E.NONE:
            if on_assign and epoch == self._epoch and self.alive:
                self.later(self.sim.config.client_backoff_ms, self._fetch_offsets, epoch, list(floors), True)
            return
        now = self.sim.kernel.now
        for (t, p), floor in floors.items():
            part = response.offsets.get(t, {}).get(p)
            if part is None or part.error_code != E.NONE:
                continue
            self.sim.history.groups.on_fetched(self.group_id, (t, p), part.offset, floor, sent, now)
            if on_assign and epoch == self._epoch and (t, p) in self.owned:
                self.positions[(t, p)] = max(part.offset, 0)

    def _commit(self, epoch: int) -> None:
        if epoch != self._epoch or not self.alive or self.state != "stable" or self.sim.phase != "faults":
            return  # (while the cluster heals, members only heartbeat: the log goes quiet)
        if self._commit_in_flight or not self.owned or any(tp not in self.positions for tp in self.owned):
            self.later(self.sim.kernel.rng.randint(*self.COMMIT_GAP_MS), self._commit, epoch)
            return
        rng = self.sim.kernel.rng
        offsets: dict[tuple[str, int], int] = {}
        for tp in self.owned:
            self.positions[tp] += rng.randint(1, 5)
            offsets[tp] = self.positions[tp]
        topics: dict[str, dict[int, OffsetCommitPartition]] = {}
        for (t, p), off in offsets.items():
            topics.setdefault(t, {})[p] = OffsetCommitPartition(off)
        req = OffsetCommitRequest(self.group_id, self.generation, self.member_id, topics=topics)
        self._commit_in_flight = True
        self.commits += 1
        groups = self.sim.history.groups
        sent = {tp: groups.on_commit_sent(self.group_id, tp, off, self.generation) for tp, off in offsets.items()}
        self.call(self.coordinator, req, OffsetCommitResponse, partial(self._committed, epoch, sent))
        # now and then, read back what is committed (invariant 6)
        if rng.random() < 0.3:
            self._fetch_offsets(epoch, list(offsets))

    def _committed(self, epoch: int, sent: dict, response: Message | None, kind: str) -> None:
        self._commit_in_flight = False
        now = self.sim.kernel.now
        if isinstance(response, OffsetCommitResponse):
            for (t, p), index in sent.items():
                code = response.topics.get(t, {}).get(p, response.error_code)
                if code == E.NONE:
                    self.sim.history.groups.on_commit_acked(self.group_id, (t, p), index, now)
            codes = {c for parts in response.topics.values() for c in parts.values()} | {response.error_code}
            if codes & {E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID}:
                if epoch == self._epoch and self.alive:
                    if E.UNKNOWN_MEMBER_ID in codes:
                        self.member_id = ""
                    self._retry_join(0)
                return
        if epoch == self._epoch and self.alive:
            self.later(self.sim.kernel.rng.randint(*self.COMMIT_GAP_MS), self._commit, epoch)

    # -- faults -----------------------------------------------------------------------------
    def leave(self, rejoin_after_ms: int | None) -> None:
        """LeaveGroup, then (maybe) join again later as a new member."""
        if not self.alive or not self.member_id:
            return
        req = LeaveGroupRequest(self.group_id, [LeaveGroupMember(self.member_id)])
        self.call(self.coordinator, req, LeaveGroupResponse, lambda response, kind: None)
        self._stop("left")
        if rejoin_after_ms is not None:
            self.later(rejoin_after_ms, self.start)

    def crash(self, restart_after_ms: int | None) -> None:
        """Go silent (the process died): the coordinator notices by session timeout."""
        if not self.alive:
            return
        self._stop("dead")
        if restart_after_ms is not None:
            self.later(restart_after_ms, self.start)

    def _stop(self, state: str) -> None:
        self.alive = False
        self.state = state
        self.member_id = ""
        self.generation = -1
        self.owned = []
        self.positions = {}
        self._epoch += 1
        self._commit_in_flight = False
