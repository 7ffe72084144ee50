"""A tiny in-memory shell for GroupCoordinatorState, shared by the test_group_* modules.

It plays the actor's part: hands out tokens, collects Replies (checking each token is
answered exactly once), performs AppendRecords on an in-memory log and reports the outcome
(at once, or when the test says so), and moves an explicit clock. No Ray, no sleeps.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable

from kcoord.group import AppendRecords, GroupConfig, GroupCoordinatorState, Reply
from kcoord.group.assignors import get_assignor
from kcoord.protocol.codec import Message
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.group import (
    Assignment,
    GroupHeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    Subscription,
    SyncGroupAssignment,
    SyncGroupRequest,
)

# Small timeouts so tests read clearly. The initial rebalance delay is short but not zero:
# with zero the first member to join an empty group forms a generation on its own.
DELAY = 100
FAST = GroupConfig(
    group_min_session_timeout_ms=10,
    group_max_session_timeout_ms=600_000,
    group_initial_rebalance_delay_ms=DELAY,
    offsets_retention_minutes=60,
    offsets_retention_check_interval_ms=1_000,
)
SESSION = 10_000
REBALANCE = 30_000
T0 = 1_700_000_000_000


def protocols(topics: Iterable[str] = ("t",), names: Iterable[str] = ("range",), owned=None) -> list[JoinGroupProtocol]:
    sub = Subscription(topics=list(topics), owned_partitions=owned or {})
    return [JoinGroupProtocol(n, sub.encode()) for n in names]


class Shell:
    def __init__(
        self,
        config: GroupConfig = FAST,
        *,
        auto_persist: bool = True,
        partition: int = 0,
        num_partitions: int = 1,
        now: int = T0,
    ) -> None:
        ids = itertools.count(1)
        self.config = config
        self.coord = GroupCoordinatorState(
            config, partition, num_partitions, member_id_factory=lambda client: f"{client or 'member'}-{next(ids)}"
        )
        self.now = now
        self.auto_persist = auto_persist
        self.log: list[tuple[bytes, bytes | None]] = []
        self.pending: list[AppendRecords] = []
        self.replies: dict[Any, Message] = {}
        self.answered: set[Any] = set()
        self._tokens = itertools.count(1)

    # -- the shell loop ------------------------------------------------------------------
    def run(self, actions: list) -> None:
        for action in actions:
            if isinstance(action, Reply):
                assert action.token not in self.answered, f"token {action.token} answered twice"
                self.answered.add(action.token)
                self.replies[action.token] = action.response
            elif isinstance(action, AppendRecords):
                if self.auto_persist:
                    self.log.extend(action.records)
                    self.run(self.coord.on_persisted(action.persist_id, 0, self.now))
                else:
                    self.pending.append(action)
            else:  # pragma: no cover
                raise AssertionError(f"unexpected action {action!r}")

    def complete(self, error: int = 0, index: int = 0) -> AppendRecords:
        """Report the outcome of a held append (the oldest by default)."""
        p = self.pending.pop(index)
        if error == 0:
            self.log.extend(p.records)
        self.run(self.coord.on_persisted(p.persist_id, error, self.now))
        return p

    def complete_all(self) -> None:
        while self.pending:
            self.complete()

    def send(self, request: Message) -> int:
        token = next(self._tokens)
        self.run(self.coord.handle(request, token, self.now))
        return token

    def call(self, request: Message) -> Any:
        """Send and expect an immediate reply."""
        token = self.send(request)
        assert token in self.replies, f"{type(request).__name__} got no immediate reply"
        return self.replies.pop(token)

    def reply(self, token: int) -> Any:
        """The reply for ``token`` if it came, else None."""
        return self.replies.pop(token, None)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.run(self.coord.tick(self.now))

    def settle(self, *tokens: int, limit_ms: int = 600_000) -> list[Any]:
        """Advance the clock timer by timer until every token is answered; the replies."""
        start = self.now
        while any(t not in self.replies for t in tokens):
            deadline = self.coord.next_deadline(self.now)
            assert deadline is not None and deadline - start <= limit_ms, "requests never answered"
            self.advance(max(deadline - self.now, 0))
        return [self.replies.pop(t) for t in tokens]

    def group(self, group_id: str = "g"):
        return self.coord.group(group_id)

    # -- request helpers -----------------------------------------------------------------
    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        instance: str | None = None,
        topics: Iterable[str] = ("t",),
        names: Iterable[str] = ("range",),
        owned=None,
        session: int = SESSION,
        rebalance: int = REBALANCE,
        client_id: str = "c",
        protocol_type: str = "consumer",
        protos: list[JoinGroupProtocol] | None = None,
    ) -> int:
        return self.send(
            JoinGroupRequest(
                group,
                session,
                rebalance,
                member_id=member_id,
                group_instance_id=instance,
                protocol_type=protocol_type,
                protocols=protos if protos is not None else protocols(topics, names, owned),
                client_id=client_id,
            )
        )

    def new_member_id(self, group: str = "g", **kw: Any) -> str:
        """The KIP-394 dance's first half: join with an empty id, get MEMBER_ID_REQUIRED."""
        r = self.reply(self.join(group, **kw))
        assert r.error_code == E.MEMBER_ID_REQUIRED, r
        return r.member_id

    def sync(self, group: str, member_id: str, generation: int, assignments=None, instance=None) -> int:
        return self.send(
            SyncGroupRequest(
                group,
                generation,
                member_id,
                group_instance_id=instance,
                assignments=[SyncGroupAssignment(m, a) for m, a in (assignments or {}).items()],
            )
        )

    def heartbeat(self, group: str, member_id: str, generation: int, instance=None) -> int:
        return self.call(GroupHeartbeatRequest(group, generation, member_id, instance)).error_code

    def leave(self, group: str, *members: tuple[str, str | None]):
        return self.call(LeaveGroupRequest(group, [LeaveGroupMember(m, i) for m, i in members]))

    def commit(
        self, group: str, offsets: dict[tuple[str, int], int], generation: int = -1, member_id: str = "", **kw: Any
    ) -> int:
        topics: dict[str, dict[int, OffsetCommitPartition]] = {}
        metadata = kw.pop("metadata", "")
        for (t, p), o in offsets.items():
            topics.setdefault(t, {})[p] = OffsetCommitPartition(o, metadata)
        return self.send(OffsetCommitRequest(group, generation, member_id, topics=topics, **kw))

    def fetch(self, group: str, topics=None) -> dict[tuple[str, int], int]:
        r = self.call(OffsetFetchRequest(group, topics))
        assert r.error_code == 0, r
        return {(t, p): v.offset for t, parts in r.offsets.items() for p, v in parts.items()}

    # -- a whole rebalance ---------------------------------------------------------------
    def form_group(
        self,
        group: str = "g",
        n: int = 2,
        *,
        partitions: dict[str, int] | None = None,
        assignor: str = "range",
        instances: list[str | None] | None = None,
        topics: Iterable[str] = ("t",),
    ) -> tuple[list[str], int, dict[str, Assignment]]:
        """Bring ``n`` new members to a Stable generation with a real assignor. Returns
        (member ids, generation, assignment per member)."""
        partitions = partitions or {"t": 4}
        instances = instances or [None] * n
        join_tokens = {}
        for i in range(n):
            if instances[i] is None:
                member_id = self.new_member_id(group, topics=topics, names=[assignor], client_id=f"c{i}")
            else:
                member_id = ""
            join_tokens[i] = self.join(group, member_id, instance=instances[i], topics=topics, names=[assignor], client_id=f"c{i}")
        # The initial delay (extended while members arrive) passes before the generation forms.
        responses: dict[str, JoinGroupResponse] = {}
        for r in self.settle(*join_tokens.values()):
            assert r.error_code == 0, r
            responses[r.member_id] = r
        leader = next(r for r in responses.values() if r.member_id == r.leader)
        generation = leader.generation_id
        subs = {m.member_id: Subscription.decode(m.metadata) for m in leader.members}
        plan = get_assignor(leader.protocol_name).assign(partitions, subs)
        encoded = {m: a.encode() for m, a in plan.items()}
        sync_tokens = {}
        for member_id in responses:
            if member_id == leader.member_id:
                continue
            sync_tokens[member_id] = self.sync(group, member_id, generation)
        sync_tokens[leader.member_id] = self.sync(group, leader.member_id, generation, encoded)
        self.complete_all()
        got = {}
        for member_id, token in sync_tokens.items():
            r = self.reply(token)
            assert r is not None and r.error_code == 0, r
            got[member_id] = Assignment.decode(r.assignment)
        return list(responses), generation, got
