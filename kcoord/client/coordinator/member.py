"""The client side of Kafka's classic group protocol: one consumer's membership in a group.

:class:`GroupMember` joins the group (JoinGroup with the MEMBER_ID_REQUIRED round trip), runs
the assignor when it is elected leader, fetches its share with SyncGroup, keeps the session
alive from a background heartbeat thread, and commits offsets with its generation (through
its :class:`~kcoord.client.coordinator.commits.OffsetCommitter`). It knows nothing about
fetching records; its *host* (the :class:`~kcoord.client.consumer.Consumer`) tells it the
positions to commit and receives the partitions to read.

Its parts, built here and sharing one :class:`~.state.MemberState` (identity, generation,
protocol state, one lock): a :class:`~.joining.JoinRound` (JoinGroup + SyncGroup, the
leader's assignment), a :class:`~.heartbeat.HeartbeatThread` and the
:class:`~.commits.OffsetCommitter`. Threads, as in Kafka's Java client:

* the **poll thread** (whoever calls :meth:`GroupMember.poll`, i.e. ``Consumer.poll``) does
  every rebalance -- revoke callback, JoinGroup, SyncGroup, assign callback -- so user
  callbacks never run concurrently with the user's own processing;
* the **heartbeat thread** only heartbeats (:mod:`.heartbeat`);
* ``commit_async`` runs on one worker thread, so asynchronous commits stay in order.

The protocol is eager: all partitions are revoked before rejoining (commit in ``on_revoke``
if you commit manually). Static members (``group_instance_id``) do not leave the group on
close, so a restart within the session timeout gets the same assignment without a rebalance
-- unless ``close(leave_group=True)`` asks them to (KIP-1092's ``LEAVE_GROUP``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Mapping, Protocol

from ...group.assignors import resolve_assignors
from ...protocol.errors import ErrorCode, KafkaError, error_name
from ...protocol.group import NO_GENERATION, NO_MEMBER_ID, Assignment, LeaveGroupMember, LeaveGroupRequest, LeaveGroupResponse, Subscription
from ..cluster import ClusterClient
from ..errors import CommitFailedError
from ..types import OffsetAndMetadata, TopicPartition
from .commits import CommitCallback, OffsetCommitter
from .coordinators import GroupCoordinators
from .heartbeat import HeartbeatThread
from .joining import JoinRound
from .state import STABLE, UNJOINED, MemberState

logger = logging.getLogger("kcoord.consumer.group")

E = ErrorCode


# How long a consumer's poll may block without giving the group a turn: bounds the delay
# between a heartbeat learning of a rebalance and the poll thread rejoining.
POLL_WAKE_S = 0.05


class MemberHost(Protocol):
    """What a GroupMember needs from the consumer that hosts it."""

    def group_assign(self, partitions: list[TopicPartition], committed: dict[TopicPartition, int | None]) -> None:
        """Replace the assignment. ``committed[tp]`` is the group's committed offset, or
        None: start from ``auto_offset_reset``."""

    def group_positions(self) -> dict[TopicPartition, int]:
        """The next offset to consume of each assigned partition (what a commit stores)."""


Callback = Callable[[list[TopicPartition]], Any]


class GroupMember:
    """One consumer's membership in ``group_id`` (see the module docstring)."""

    def __init__(
        self,
        cluster: ClusterClient,
        group_id: str,
        host: MemberHost | None = None,
        *,
        client_id: str = "kcoord",
        group_instance_id: str | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        rebalance_timeout_ms: int | None = None,
        partition_assignment_strategy: Any = ("range", "roundrobin"),
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
    ) -> None:
        if not group_id:
            raise KafkaError(E.INVALID_GROUP_ID, "group_id must be a non-empty string")
        if heartbeat_interval_ms <= 0 or heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be positive and below session_timeout_ms ({session_timeout_ms})"
            )
        if max_poll_interval_ms <= 0:
            raise ValueError("max_poll_interval_ms must be positive")
        self.cluster = cluster
        self.group_id = group_id
        self.host = host
        self.client_id = client_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms or max_poll_interval_ms
        self.assignors = resolve_assignors(partition_assignment_strategy)
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.coordinators = GroupCoordinators(cluster, retry_backoff_ms=min(retry_backoff_ms, 50))
        self._committer = OffsetCommitter(
            self.coordinators, group_id, self, request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms
        )
        try:
            self.client_host = socket.gethostname()
        except OSError:
            self.client_host = ""

        # Called (from the heartbeat thread) when a rebalance needs the poll thread: a
        # host blocked in a long fetch can use it to return early.
        self.on_rejoin_needed: Callable[[], None] | None = None

        self._st = MemberState(group_id)
        self._lock = self._st.lock
        self._rebalance_lock = threading.Lock()
        self._topics: list[str] = []
        self._on_assign: Callback | None = None
        self._on_revoke: Callback | None = None
        self._on_lost: Callback | None = None
        self._assigned: list[TopicPartition] | None = None
        self._owned: dict[str, list[int]] = {}  # last generation's assignment (sticky input)
        self._owned_generation = NO_GENERATION
        self._next_auto_commit = time.monotonic() + auto_commit_interval_ms / 1000
        self._join = JoinRound(
            self._st,
            cluster,
            self.coordinators,
            self.assignors,
            group_instance_id=group_instance_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            client_id=client_id,
            client_host=self.client_host,
        )
        self.heartbeats = HeartbeatThread(
            self._st,
            self.coordinators,
            group_instance_id=group_instance_id,
            heartbeat_interval_ms=heartbeat_interval_ms,
            session_timeout_ms=session_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            leave=self._leave,
            wake=lambda: self.on_rejoin_needed,
        )
        self.rebalances = 0

    # ======================================================================================
    # introspection
    # ======================================================================================

    def _tag(self) -> str:
        return self._st.tag()

    def log_tag(self) -> str:
        return self._st.tag()

    @property
    def member_id(self) -> str:
        return self._st.member_id

    @property
    def generation(self) -> int:
        return self._st.generation

    @property
    def state(self) -> str:
        return self._st.state

    @property
    def is_leader(self) -> bool:
        return bool(self._st.member_id) and self._st.leader == self._st.member_id

    @property
    def subscribed(self) -> bool:
        return bool(self._topics)

    def subscription(self) -> list[str]:
        return list(self._topics)

    def assignment(self) -> list[TopicPartition]:
        """Partitions of the current generation ([] while not a stable member)."""
        return list(self._assigned or [])

    @property
    def poll_wake_s(self) -> float:
        """Longest a host's poll should block between two calls of :meth:`poll`."""
        return POLL_WAKE_S

    @property
    def rejoin_needed(self) -> bool:
        return self._st.rejoin_needed or (self.subscribed and self._st.state != STABLE)

    # ======================================================================================
    # subscription
    # ======================================================================================

    def subscribe(
        self, topics: Iterable[str], on_assign: Callback | None = None, on_revoke: Callback | None = None, on_lost: Callback | None = None
    ) -> None:
        """Consume ``topics`` as a member of the group; the (re)join happens in the next poll.
        ``on_assign(partitions)``/``on_revoke(partitions)``/``on_lost(partitions)`` run in the
        poll thread (``on_lost`` defaults to ``on_revoke``)."""
        topics = sorted(set(topics if not isinstance(topics, str) else [topics]))
        if not topics:
            raise ValueError("subscribe needs at least one topic (use unsubscribe() to stop)")
        if any(not isinstance(t, str) or not t for t in topics):
            raise ValueError(f"topic names must be non-empty strings: {topics}")
        self._check_open()
        with self._lock:
            changed = topics != self._topics
            self._topics = topics
            self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
            if changed:
                self._st.rejoin_needed = True
        self.heartbeats.start()

    def unsubscribe(self) -> None:
        """Revoke everything, leave the group (dynamic members) and stop consuming."""
        with self._rebalance_lock:
            self._revoke(commit=self.enable_auto_commit)
            self._leave("the consumer unsubscribed")
            with self._lock:
                self._topics = []
                self._st.rejoin_needed = False

    # ======================================================================================
    # the poll thread
    # ======================================================================================

    def poll(self) -> bool:
        """Called at the start of every consumer poll: records liveness for
        ``max_poll_interval_ms``, rejoins if needed (blocking until the new assignment is
        in place), runs auto-commit. Returns True if the assignment changed."""
        self._check_open()
        self._st.last_poll = time.monotonic()
        changed = False
        if self.subscribed and self.rejoin_needed:
            changed = self.rebalance()
        self._maybe_auto_commit()
        return changed

    def rebalance(self) -> bool:
        """Revoke, join, sync and assign. Blocks until this member is in a stable generation
        (or the member is closed); raises KafkaError on fatal errors (FENCED_INSTANCE_ID,
        INVALID_SESSION_TIMEOUT, INCONSISTENT_GROUP_PROTOCOL...)."""
        with self._rebalance_lock:
            if not self.subscribed or not self.rejoin_needed:
                return False
            self._revoke(commit=self.enable_auto_commit)
            while True:
                self._check_open()
                try:
                    assignment = self._join.run(self._subscription)
                except KafkaError as exc:
                    if self._st.fatal is not None or not (exc.retriable or exc.code == E.REQUEST_TIMED_OUT):
                        raise
                    logger.info("%s rejoin attempt failed (%s); retrying", self._tag(), exc)
                    with self._lock:
                        self._st.state = UNJOINED
                    assignment = None
                if assignment is not None:
                    break
                time.sleep(self.retry_backoff_ms / 1000)
            self._assign(assignment)
            return True

    def _subscription(self) -> Subscription:
        """This member's JoinGroup metadata: its topics, and what it owned (sticky input)."""
        return Subscription(topics=list(self._topics), owned_partitions=dict(self._owned), generation_id=self._owned_generation)

    def _assign(self, assignment: Assignment) -> None:
        partitions = [TopicPartition(t, p) for t, p in assignment.topic_partitions() if t in self._topics]
        committed = self._fetch_committed(partitions) if partitions else {}
        with self._lock:
            self._assigned = partitions
            self._owned = {t: sorted(ps) for t, ps in assignment.partitions.items()}
            self._owned_generation = self._st.generation
            self.rebalances += 1
        if self.host is not None:
            self.host.group_assign(list(partitions), committed)
        logger.info("%s assigned %s", self._tag(), [f"{tp.topic}-{tp.partition}" for tp in partitions])
        self._call_back(self._on_assign, partitions, "on_assign")

    def _revoke(self, commit: bool) -> None:
        """Eager revocation before a rejoin, unsubscribe or close: commit (if asked and the
        generation is still ours), tell the user, empty the host's assignment."""
        with self._lock:
            assigned = self._assigned
            valid = self._st.generation >= 0 and bool(self._st.member_id)
        if assigned is None:
            return
        if commit and valid and assigned:
            try:
                self.commit()
            except KafkaError as exc:
                logger.warning("%s auto-commit before revoking failed: %s", self._tag(), exc)
        if valid or not assigned:
            self._call_back(self._on_revoke, list(assigned), "on_revoke")
        else:
            # Fenced (session expired, generation gone): the partitions may already be
            # someone else's and nothing can be committed for them (Kafka's
            # onPartitionsLost); without on_lost, on_revoke is told, as in Kafka.
            self._call_back(self._on_lost or self._on_revoke, list(assigned), "on_lost")
        with self._lock:
            self._assigned = None
        if self.host is not None:
            self.host.group_assign([], {})

    def _call_back(self, fn: Callback | None, partitions: list[TopicPartition], what: str) -> None:
        if fn is None:
            return
        try:
            fn(list(partitions))
        except Exception:
            logger.exception("%s user %s callback raised; continuing", self._tag(), what)

    def _fetch_committed(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        found = self.fetch_committed(partitions)
        return {tp: (o.offset if o is not None else None) for tp, o in found.items()}

    # ======================================================================================
    # offsets (sent by the OffsetCommitter with this member's generation)
    # ======================================================================================

    def commit(self, offsets: Mapping[Any, Any] | None = None, timeout_ms: int | None = None) -> dict[TopicPartition, OffsetAndMetadata]:
        """Commit ``offsets`` ({tp: offset or OffsetAndMetadata}; default: the host's current
        positions) synchronously with this member's generation. Raises
        :class:`CommitFailedError` if the generation is over, KafkaError otherwise."""
        if offsets is None:
            offsets = self.host.group_positions() if self.host is not None else {}
        return self._committer.commit(offsets, timeout_ms)

    def commit_async(self, offsets: Mapping[Any, Any] | None = None, callback: CommitCallback | None = None) -> Future:
        """Commit in the background, in call order. Returns a Future of the committed
        offsets; ``callback(offsets, exception_or_None)`` runs when it completes."""
        if offsets is None:
            offsets = self.host.group_positions() if self.host is not None else {}
        return self._committer.commit_async(offsets, callback)

    def fetch_committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets of ``partitions`` (None where nothing is committed)."""
        return self._committer.fetch_committed(partitions)

    def committed(self, tp: TopicPartition, metadata: bool = False) -> int | OffsetAndMetadata | None:
        """The group's committed offset of ``tp`` (kafka-python: the offset, or None)."""
        found = self.fetch_committed([tp]).get(TopicPartition(*tp))
        if found is None:
            return None
        return found if metadata else found.offset

    def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit or time.monotonic() < self._next_auto_commit:
            return
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        if self._st.state != STABLE or self.host is None:
            return
        positions = self.host.group_positions()
        if positions:

            def done(offsets: Any, exc: Exception | None) -> None:
                if exc is not None:
                    logger.warning("%s auto-commit failed: %s", self._tag(), exc)

            self.commit_async(positions, callback=done)

    # The Membership protocol of kcoord.client.coordinator.commits.
    def group_metadata(self) -> tuple[int, str, str | None]:
        """(generation, member id, group instance id) as they are now, joined or not."""
        with self._lock:
            return self._st.generation, self._st.member_id, self.group_instance_id

    def commit_generation(self) -> tuple[int, str, str | None]:
        with self._lock:
            if not self.subscribed:
                # Manual assignment: a "simple" commit, accepted while the group has no members.
                return NO_GENERATION, NO_MEMBER_ID, None
            st = self._st
            if st.generation < 0 or not st.member_id:
                raise CommitFailedError(
                    E.UNKNOWN_MEMBER_ID,
                    f"cannot commit for group {self.group_id!r}: this consumer is not in an active generation "
                    f"(it is {st.state}); poll() to rejoin first",
                )
            return st.generation, st.member_id, self.group_instance_id

    def on_commit_rejected(self, generation_id: int, code: int) -> None:
        with self._lock:
            # Only a member that thinks it is stable needs telling; one that is rebalancing
            # right now (a commit from another thread) is rejoining.
            st = self._st
            if generation_id == st.generation and st.state == STABLE:
                if code == E.UNKNOWN_MEMBER_ID:
                    st.member_id = NO_MEMBER_ID
                    st.generation = NO_GENERATION
                    st.state = UNJOINED
                st.rejoin_needed = True

    # ======================================================================================
    # leaving
    # ======================================================================================

    def _leave(self, reason: str, leave_group: bool | None = None) -> None:
        """Send LeaveGroup and forget the generation. ``leave_group=None``: dynamic members
        only, as Kafka since KIP-345 (a static member's seat waits for its restart until the
        session times out); True: static members too, naming their ``group_instance_id`` so
        the coordinator refuses it (FENCED_INSTANCE_ID) if a newer member took the instance
        over (KIP-1092's ``LEAVE_GROUP``); False: nobody leaves (``REMAIN_IN_GROUP``)."""
        member_id, generation = self._st.drop_generation()
        if not member_id:
            return
        stays = leave_group is False or (leave_group is None and self.group_instance_id is not None)
        if stays:
            logger.info(
                "[group=%s member=%s generation=%d] member stops (%s) without leaving the group",
                self.group_id, member_id, generation, reason,
            )
            return
        try:
            response = self.coordinators.call_group(
                self.group_id,
                "leave_group",
                LeaveGroupRequest(self.group_id, [LeaveGroupMember(member_id, self.group_instance_id)]),
                LeaveGroupResponse,
                timeout_s=min(5.0, self.request_timeout_ms / 1000),
            )
            codes = [m.error_code for m in response.members] or [response.error_code]
            logger.info(
                "[group=%s member=%s generation=%d] left the group (%s): %s",
                self.group_id, member_id, generation, reason, ",".join(error_name(c) for c in codes),
            )
        except KafkaError as exc:
            logger.info("[group=%s member=%s] LeaveGroup failed (%s); the session timeout will remove us", self.group_id, member_id, exc)

    # ======================================================================================
    # closing
    # ======================================================================================

    def _check_open(self) -> None:
        self._st.check_open()

    def close(self, autocommit: bool = True, timeout_ms: int | None = None, leave_group: bool | None = None) -> None:
        """Commit (auto-commit only), revoke (on_revoke runs), leave the group (dynamic
        members; see :meth:`_leave` for ``leave_group``), stop the heartbeat thread.
        Idempotent."""
        if self._st.closed:
            return
        try:
            if self._st.fatal is None and self.subscribed:
                with self._rebalance_lock:
                    self._revoke(commit=autocommit and self.enable_auto_commit)
                    self._leave("the consumer is closing", leave_group)
        finally:
            self._st.closed = True
            self._committer.close()
            self.heartbeats.stop((timeout_ms or self.request_timeout_ms) / 1000)
