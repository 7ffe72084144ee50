"""The client side of Kafka's classic group protocol: one consumer's membership in a group.

:class:`GroupMember` joins the group (JoinGroup with the MEMBER_ID_REQUIRED round trip), runs
the assignor when it is elected leader, fetches its share with SyncGroup, keeps the session
alive from a background heartbeat thread, and commits offsets with its generation (through
its :class:`~kcoord.client.coordinator.commits.OffsetCommitter`). It knows nothing about
fetching records; its *host* (the :class:`~kcoord.client.consumer.Consumer`) tells it the
positions to commit and receives the partitions to read.

Threads, as in Kafka's Java client:

* the **poll thread** (whoever calls :meth:`GroupMember.poll`, i.e. ``Consumer.poll``) does
  every rebalance -- revoke callback, JoinGroup, SyncGroup, assign callback -- so user
  callbacks never run concurrently with the user's own processing;
* the **heartbeat thread** only heartbeats. It learns that a rebalance started
  (REBALANCE_IN_PROGRESS) and flags it for the next poll, and it leaves the group when the
  poll thread has not polled within ``max_poll_interval_ms`` (a stuck consumer must not
  hold partitions);
* ``commit_async`` runs on one worker thread, so asynchronous commits stay in order.

The protocol is eager: all partitions are revoked before rejoining (commit in ``on_revoke``
if you commit manually). Static members (``group_instance_id``) do not leave the group on
close, so a restart within the session timeout gets the same assignment without a rebalance.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterable, Mapping, Protocol

from ...group.assignors import get_assignor, resolve_assignors
from ...protocol.errors import DecodeError, ErrorCode, KafkaError, error_name
from ...protocol.group import (
    CONSUMER_PROTOCOL_TYPE,
    NO_GENERATION,
    NO_MEMBER_ID,
    Assignment,
    GroupHeartbeatRequest,
    GroupHeartbeatResponse,
    JoinGroupMember,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    Subscription,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from ..cluster import ClusterClient
from ..errors import CommitFailedError
from ..types import OffsetAndMetadata, TopicPartition
from .commits import CommitCallback, OffsetCommitter
from .coordinators import COORDINATOR_RETRIABLE, GroupCoordinators
from .state import REBALANCING, STABLE, UNJOINED

logger = logging.getLogger("kcoord.consumer.group")

E = ErrorCode


# How long a consumer's poll may block without giving the group a turn: bounds the delay
# between a heartbeat learning of a rebalance and the poll thread rejoining.
POLL_WAKE_S = 0.05

# JoinGroup/SyncGroup errors no retry can fix.
_FATAL_JOIN_ERRORS = frozenset(
    {
        E.FENCED_INSTANCE_ID,
        E.INVALID_SESSION_TIMEOUT,
        E.INCONSISTENT_GROUP_PROTOCOL,
        E.GROUP_MAX_SIZE_REACHED,
        E.INVALID_GROUP_ID,
        E.INVALID_REQUEST,
        E.UNSUPPORTED_VERSION,
    }
)


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

        self._lock = threading.RLock()
        self._rebalance_lock = threading.Lock()
        self._topics: list[str] = []
        self._on_assign: Callback | None = None
        self._on_revoke: Callback | None = None
        self._member_id = NO_MEMBER_ID
        self._generation = NO_GENERATION
        self._protocol: str | None = None
        self._leader = ""
        self._state = UNJOINED
        self._rejoin_needed = False
        self._assigned: list[TopicPartition] | None = None
        self._owned: dict[str, list[int]] = {}  # last generation's assignment (sticky input)
        self._owned_generation = NO_GENERATION
        self._last_poll = time.monotonic()
        self._next_auto_commit = time.monotonic() + auto_commit_interval_ms / 1000
        self._fatal: KafkaError | None = None
        self._closed = False
        self._stop = threading.Event()
        self._heartbeat_thread: threading.Thread | None = None
        self.rebalances = 0

    # ======================================================================================
    # introspection
    # ======================================================================================

    def _tag(self) -> str:
        return f"[group={self.group_id} member={self._member_id or '-'} generation={self._generation}]"

    def log_tag(self) -> str:
        return self._tag()

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def state(self) -> str:
        return self._state

    @property
    def is_leader(self) -> bool:
        return bool(self._member_id) and self._leader == self._member_id

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
        return self._rejoin_needed or (self.subscribed and self._state != STABLE)

    # ======================================================================================
    # subscription
    # ======================================================================================

    def subscribe(self, topics: Iterable[str], on_assign: Callback | None = None, on_revoke: Callback | None = None) -> None:
        """Consume ``topics`` as a member of the group; the (re)join happens in the next poll.
        ``on_assign(partitions)``/``on_revoke(partitions)`` run in the poll thread."""
        topics = sorted(set(topics if not isinstance(topics, str) else [topics]))
        if not topics:
            raise ValueError("subscribe needs at least one topic (use unsubscribe() to stop)")
        if any(not isinstance(t, str) or not t for t in topics):
            raise ValueError(f"topic names must be non-empty strings: {topics}")
        self._check_open()
        with self._lock:
            changed = topics != self._topics
            self._topics = topics
            self._on_assign, self._on_revoke = on_assign, on_revoke
            if changed:
                self._rejoin_needed = True
        self._ensure_heartbeat_thread()

    def unsubscribe(self) -> None:
        """Revoke everything, leave the group (dynamic members) and stop consuming."""
        with self._rebalance_lock:
            self._revoke(commit=self.enable_auto_commit)
            self._leave("the consumer unsubscribed")
            with self._lock:
                self._topics = []
                self._rejoin_needed = False

    # ======================================================================================
    # the poll thread
    # ======================================================================================

    def poll(self) -> bool:
        """Called at the start of every consumer poll: records liveness for
        ``max_poll_interval_ms``, rejoins if needed (blocking until the new assignment is
        in place), runs auto-commit. Returns True if the assignment changed."""
        self._check_open()
        self._last_poll = time.monotonic()
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
                    assignment = self._join_and_sync()
                except KafkaError as exc:
                    if self._fatal is not None or not (exc.retriable or exc.code == E.REQUEST_TIMED_OUT):
                        raise
                    logger.info("%s rejoin attempt failed (%s); retrying", self._tag(), exc)
                    with self._lock:
                        self._state = UNJOINED
                    assignment = None
                if assignment is not None:
                    break
                time.sleep(self.retry_backoff_ms / 1000)
            self._assign(assignment)
            return True

    def _join_and_sync(self) -> Assignment | None:
        """One JoinGroup + SyncGroup round. None: retry (after a backoff)."""
        with self._lock:
            self._state = REBALANCING
            self._rejoin_needed = False
        join = self._send_join()
        if join is None:
            return None
        with self._lock:
            self._member_id = join.member_id
            self._generation = join.generation_id
            self._protocol = join.protocol_name
            self._leader = join.leader
        assignments: list[SyncGroupAssignment] = []
        if join.leader == join.member_id and join.members:
            assignments = self._compute_assignment(join.protocol_name or "", join.members)
        sync = self.coordinators.call_group(
            self.group_id,
            "sync_group",
            SyncGroupRequest(
                self.group_id,
                join.generation_id,
                join.member_id,
                self.group_instance_id,
                CONSUMER_PROTOCOL_TYPE,
                join.protocol_name,
                assignments,
            ),
            SyncGroupResponse,
            timeout_s=self.request_timeout_ms / 1000,
            attempt_timeout_s=self.rebalance_timeout_ms / 1000 + 5,
        )
        code = sync.error_code
        if code == E.NONE:
            try:
                assignment = Assignment.decode(sync.assignment) if sync.assignment else Assignment()
            except DecodeError as exc:
                logger.error("%s undecodable assignment from the leader: %s", self._tag(), exc)
                assignment = Assignment()
            with self._lock:
                self._state = STABLE
            return assignment
        self._on_group_error("SyncGroup", code, sync.error_message)
        return None

    def _send_join(self) -> JoinGroupResponse | None:
        """JoinGroup until a generation forms; handles MEMBER_ID_REQUIRED. None: retry."""
        for _ in range(3):
            self._check_open()
            with self._lock:
                request = JoinGroupRequest(
                    self.group_id,
                    self.session_timeout_ms,
                    self.rebalance_timeout_ms,
                    self._member_id,
                    self.group_instance_id,
                    CONSUMER_PROTOCOL_TYPE,
                    self._protocols(),
                    self.client_id,
                    self.client_host,
                )
            response = self.coordinators.call_group(
                self.group_id,
                "join_group",
                request,
                JoinGroupResponse,
                timeout_s=self.request_timeout_ms / 1000,
                attempt_timeout_s=self.rebalance_timeout_ms / 1000 + 5,
            )
            code = response.error_code
            if code == E.NONE:
                return response
            if code == E.MEMBER_ID_REQUIRED:
                with self._lock:
                    self._member_id = response.member_id
                continue  # rejoin at once with the id (KIP-394)
            self._on_group_error("JoinGroup", code, response.error_message)
            return None
        return None

    def _protocols(self) -> list[JoinGroupProtocol]:
        subscription = Subscription(
            topics=list(self._topics), owned_partitions=dict(self._owned), generation_id=self._owned_generation
        ).encode()
        return [JoinGroupProtocol(a.name, subscription) for a in self.assignors]

    def _on_group_error(self, what: str, code: int, message: str | None) -> None:
        """React to a Join/Sync/Heartbeat error: reset what it invalidates, or go fatal."""
        name = error_name(code)
        with self._lock:
            if code in _FATAL_JOIN_ERRORS:
                self._fatal = KafkaError(code, f"{what} for group {self.group_id!r} failed: {message or name}")
                self._state = UNJOINED
                logger.error("%s %s failed fatally: %s %s", self._tag(), what, name, message or "")
                raise self._fatal
            if code == E.UNKNOWN_MEMBER_ID:
                self._member_id = NO_MEMBER_ID
                self._generation = NO_GENERATION
            elif code == E.ILLEGAL_GENERATION:
                self._generation = NO_GENERATION
            self._state = UNJOINED
            self._rejoin_needed = True
        level = logging.DEBUG if code in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION) else logging.INFO
        logger.log(level, "%s %s: %s %s; rejoining", self._tag(), what, name, message or "")

    def _compute_assignment(self, protocol: str, members: list[JoinGroupMember]) -> list[SyncGroupAssignment]:
        """As the leader: run the group's assignor over every member's subscription and the
        current partition counts of the subscribed topics (unknown topics get nothing)."""
        assignor = next((a for a in self.assignors if a.name == protocol), None) or get_assignor(protocol)
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                subscriptions[m.member_id] = Subscription.decode(m.metadata)
            except DecodeError as exc:
                logger.warning("%s member %s sent an undecodable subscription (%s); it gets nothing", self._tag(), m.member_id, exc)
                subscriptions[m.member_id] = Subscription()
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        counts: dict[str, int] = {}
        if topics:
            md = self.cluster.refresh_metadata(topics)
            counts = {t.name: len(t.partitions) for t in md.topics if t.error_code == 0}
        result = assignor.assign(counts, subscriptions)
        logger.info(
            "%s leader: %s assignment of %d partitions of %s over %d members",
            self._tag(), protocol, sum(counts.values()), topics, len(members),
        )
        return [SyncGroupAssignment(member_id, a.encode()) for member_id, a in sorted(result.items())]

    def _assign(self, assignment: Assignment) -> None:
        partitions = [TopicPartition(t, p) for t, p in assignment.topic_partitions() if t in self._topics]
        committed = self._fetch_committed(partitions) if partitions else {}
        with self._lock:
            self._assigned = partitions
            self._owned = {t: sorted(ps) for t, ps in assignment.partitions.items()}
            self._owned_generation = self._generation
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
            valid = self._generation >= 0 and bool(self._member_id)
        if assigned is None:
            return
        if commit and valid and assigned:
            try:
                self.commit()
            except KafkaError as exc:
                logger.warning("%s auto-commit before revoking failed: %s", self._tag(), exc)
        self._call_back(self._on_revoke, list(assigned), "on_revoke")
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
        if self._state != STABLE or self.host is None:
            return
        positions = self.host.group_positions()
        if positions:

            def done(offsets: Any, exc: Exception | None) -> None:
                if exc is not None:
                    logger.warning("%s auto-commit failed: %s", self._tag(), exc)

            self.commit_async(positions, callback=done)

    # The Membership protocol of kcoord.client.coordinator.commits.
    def commit_generation(self) -> tuple[int, str, str | None]:
        with self._lock:
            if not self.subscribed:
                # Manual assignment: a "simple" commit, accepted while the group has no members.
                return NO_GENERATION, NO_MEMBER_ID, None
            if self._generation < 0 or not self._member_id:
                raise CommitFailedError(
                    E.UNKNOWN_MEMBER_ID,
                    f"cannot commit for group {self.group_id!r}: this consumer is not in an active generation "
                    f"(it is {self._state}); poll() to rejoin first",
                )
            return self._generation, self._member_id, self.group_instance_id

    def on_commit_rejected(self, generation_id: int, code: int) -> None:
        with self._lock:
            # Only a member that thinks it is stable needs telling; one that is rebalancing
            # right now (a commit from another thread) is rejoining.
            if generation_id == self._generation and self._state == STABLE:
                if code == E.UNKNOWN_MEMBER_ID:
                    self._member_id = NO_MEMBER_ID
                    self._generation = NO_GENERATION
                    self._state = UNJOINED
                self._rejoin_needed = True

    # ======================================================================================
    # heartbeats
    # ======================================================================================

    def _ensure_heartbeat_thread(self) -> None:
        with self._lock:
            if self._heartbeat_thread is None:
                self._heartbeat_thread = threading.Thread(
                    target=self._heartbeat_loop, name=f"kcoord-heartbeat-{self.group_id}", daemon=True
                )
                self._heartbeat_thread.start()

    def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        while not self._stop.wait(interval):
            try:
                self._heartbeat_once()
            except Exception:
                logger.exception("%s heartbeat failed unexpectedly", self._tag())

    def _heartbeat_once(self) -> None:
        with self._lock:
            if self._state != STABLE or self._closed:
                return
            generation, member_id = self._generation, self._member_id
            idle_ms = (time.monotonic() - self._last_poll) * 1000
        if idle_ms > self.max_poll_interval_ms:
            self._on_poll_timeout(idle_ms)
            return
        try:
            response = self.coordinators.call_group(
                self.group_id,
                "heartbeat",
                GroupHeartbeatRequest(self.group_id, generation, member_id, self.group_instance_id),
                GroupHeartbeatResponse,
                timeout_s=min(self.request_timeout_ms, self.session_timeout_ms) / 1000,
            )
        except KafkaError as exc:
            logger.debug("%s heartbeat got no answer: %s", self._tag(), exc)
            return
        code = response.error_code
        if code == E.NONE or code in COORDINATOR_RETRIABLE:
            return
        with self._lock:
            if self._generation != generation or self._member_id != member_id or self._state != STABLE:
                return  # a rebalance already moved on
            if code == E.REBALANCE_IN_PROGRESS:
                # Keep heartbeating (we are still in the group) until the poll thread rejoins.
                self._rejoin_needed = True
            elif code == E.FENCED_INSTANCE_ID:
                self._fatal = KafkaError(code, f"another consumer with group_instance_id={self.group_instance_id!r} joined group {self.group_id!r}")
                self._state = UNJOINED
            else:
                self._on_group_error("Heartbeat", code, response.error_message)
        logger.debug("%s heartbeat: %s", self._tag(), error_name(code))
        wake = self.on_rejoin_needed
        if wake is not None:
            try:
                wake()
            except Exception:
                logger.exception("%s on_rejoin_needed hook raised", self._tag())

    def _on_poll_timeout(self, idle_ms: float) -> None:
        logger.warning(
            "%s no poll() for %.0f ms, more than max_poll_interval_ms=%d: leaving the group so its "
            "partitions move to live members; the next poll() rejoins. Poll more often, process "
            "less per poll, or raise max_poll_interval_ms.",
            self._tag(), idle_ms, self.max_poll_interval_ms,
        )
        self._leave("max_poll_interval_ms expired")
        with self._lock:
            self._rejoin_needed = True

    # ======================================================================================
    # leaving
    # ======================================================================================

    def _leave(self, reason: str) -> None:
        """Send LeaveGroup (dynamic members only, as Kafka since KIP-345: a static member's
        seat waits for its restart until the session times out) and forget the generation."""
        with self._lock:
            member_id, generation = self._member_id, self._generation
            self._member_id, self._generation, self._state = NO_MEMBER_ID, NO_GENERATION, UNJOINED
        if not member_id:
            return
        if self.group_instance_id is not None:
            logger.info(
                "[group=%s member=%s generation=%d] static member stops (%s) without leaving the group",
                self.group_id, member_id, generation, reason,
            )
            return
        try:
            response = self.coordinators.call_group(
                self.group_id,
                "leave_group",
                LeaveGroupRequest(self.group_id, [LeaveGroupMember(member_id)]),
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
        if self._fatal is not None:
            raise self._fatal
        if self._closed:
            raise KafkaError(E.INVALID_REQUEST, f"the consumer of group {self.group_id!r} is closed")

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        """Commit (auto-commit only), revoke (on_revoke runs), leave the group (dynamic
        members), stop the heartbeat thread. Idempotent."""
        if self._closed:
            return
        try:
            if self._fatal is None and self.subscribed:
                with self._rebalance_lock:
                    self._revoke(commit=autocommit and self.enable_auto_commit)
                    self._leave("the consumer is closing")
        finally:
            self._closed = True
            self._stop.set()
            self._committer.close()
            thread = self._heartbeat_thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=(timeout_ms or self.request_timeout_ms) / 1000)
