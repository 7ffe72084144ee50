"""One partition replica as a sans-I/O state machine.

The :class:`~kcoord.replication.replica_driver.ReplicaDriver` is its one driver, used
unchanged by the Ray actor (actors/replica.py) and by the deterministic simulation
(tests/sim): it hands every request to :meth:`Replica.handle` with ``now_ms`` and a token
for the pending reply, performs the returned actions (reply, send a Fetch to the leader,
send AlterPartition to the controller), feeds each call's outcome back
(``on_fetch_response`` and friends) and calls :meth:`tick` at :meth:`next_deadline`.

Every entry point takes its input and ``now_ms`` and returns the actions it decided; they
are collected as they are decided, so an entry point that fails half way (a storage error)
still returns the ones decided before the failure -- a reply already taken out of a waiter
list is never lost.

The replica owns its log object (:class:`kcoord.log.Log`, on a real or a simulated file
system, or :class:`kcoord.log.MemoryLog`); local storage is the one side effect the core
performs itself, because it is synchronous and deterministic. An I/O error from the log
takes the replica OFFLINE (Kafka's KIP-112): it answers KAFKA_STORAGE_ERROR to everything,
its heartbeat says so, and the controller moves leadership away. A restart (a new Replica
on a reopened log) is the only way back.

Record batches are never decoded here: the leader validates framing and CRC, stamps base
offset and epoch into the header, and followers copy bytes.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from ..protocol.codec import Message
from ..protocol.controller import HeartbeatRequest, HeartbeatResponse, LeaderAndIsrRequest, LeaderAndIsrResponse
from ..protocol.errors import ErrorCode
from ..protocol.replication import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
)
from .actions import Action, Reply
from .config import ReplicationConfig
from .entry import entry_point, is_storage_error
from .follower import FollowerState
from .following import FollowerLoop
from .leader import LeaderState
from .roles import FOLLOWER, LEADER, NONE, OFFLINE, Role
from .serving import FetchWaiter, LeaderServing, ProduceWaiter

__all__ = ["FOLLOWER", "LEADER", "NONE", "OFFLINE", "RESPONSE_FOR", "Replica", "Role", "is_storage_error"]


RESPONSE_FOR: dict[type[Message], type[Message]] = {
    ProduceRequest: ProduceResponse,
    FetchRequest: FetchResponse,
    ListOffsetsRequest: ListOffsetsResponse,
    OffsetsForLeaderEpochRequest: OffsetsForLeaderEpochResponse,
    LeaderAndIsrRequest: LeaderAndIsrResponse,
    HeartbeatRequest: HeartbeatResponse,
}


class Replica(LeaderServing, FollowerLoop):
    def __init__(
        self,
        topic: str,
        partition: int,
        broker: int,
        log: Any,
        config: ReplicationConfig | None = None,
        now_ms: int = 0,
        node_id: str = "",
        incarnation: str = "",
    ) -> None:
        self.topic = topic
        # Where this replica runs (a Ray node id); fetches from the same node are answered
        # with file hints instead of bytes. Empty: never.
        self.node_id = node_id
        # Which process this is (changes on every restart); heartbeats carry it so the
        # controller can tell a restarted replica from one that merely missed beats.
        self.incarnation = incarnation
        self.partition = partition
        self.broker = broker
        self.log = log
        self.config = config or ReplicationConfig()
        self.role: Role = NONE
        self.offline_reason = ""
        self.leader = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.controller_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.hw = min(max(log.high_watermark, log.log_start_offset), log.log_end_offset)
        self.leader_state: LeaderState | None = None
        self.follower_state: FollowerState | None = None
        self._produce_waiters: deque[ProduceWaiter] = deque()
        self._fetch_waiters: dict[Any, FetchWaiter] = {}
        self._out: list[Action] = []
        self._hw_checkpointed = self.hw
        # A process that starts on a log with history, in a topic whose appends are not each
        # fsynced, may have lost its unflushed tail in a crash; it cannot tell. Until it has
        # caught up with a leader's HW it refuses the first leadership it is offered (see
        # _leader_and_isr).
        self._may_have_lost_data = log.config.flush_messages != 1 and (
            log.log_end_offset > log.log_start_offset
            or len(log.epoch_cache) > 0
            or log.checkpointed_high_watermark > log.log_start_offset
        )
        self._last_hw_checkpoint_ms = now_ms
        self.metrics = {
            "produce_requests": 0,
            "produce_bytes": 0,
            "fetch_requests": 0,
            "fetch_bytes": 0,
            "isr_shrinks": 0,
            "isr_expands": 0,
            "truncations": 0,
            "truncated_records": 0,
        }
        self._handlers: dict[type[Message], Callable[[Any, Any, int], None]] = {
            ProduceRequest: self._produce,
            FetchRequest: self._fetch,
            ListOffsetsRequest: self._list_offsets,
            OffsetsForLeaderEpochRequest: self._offsets_for_leader_epoch,
            LeaderAndIsrRequest: self._leader_and_isr,
            HeartbeatRequest: self._heartbeat,
        }

    # ------------------------------------------------------------------------------------
    # entry points
    # ------------------------------------------------------------------------------------
    @entry_point
    def handle(self, request: Message, token: Any, now_ms: int) -> None:
        """Any request a replica serves. Its Reply (carrying ``token``) is among the
        returned actions, or comes from a later call (long-poll fetch, acks=all produce)."""
        handler = self._handlers.get(type(request))
        if handler is None:
            raise TypeError(f"not a replica request: {type(request).__name__}")
        if self.role is OFFLINE:
            self._answer_offline(request, token)
            return
        try:
            handler(request, token, now_ms)
        except BaseException as exc:
            if not is_storage_error(exc):
                raise
            self._storage_failed(exc)
            if not any(isinstance(a, Reply) and a.token == token for a in self._out):
                self._answer_offline(request, token)

    # Typed shorthands for tests and tools; the driver uses handle().
    def produce(self, req: ProduceRequest, token: Any, now_ms: int) -> list[Action]:
        return self.handle(req, token, now_ms)

    def fetch(self, req: FetchRequest, token: Any, now_ms: int) -> list[Action]:
        return self.handle(req, token, now_ms)

    @entry_point
    def tick(self, now_ms: int) -> None:
        """Timers: produce and fetch deadlines, ISR proposals, the follower loop, HW
        checkpoints and the time-based flush."""
        self._expire_waiters(now_ms)
        if self.leader_state is not None:
            self._maybe_propose_isr(now_ms)
        if self.follower_state is not None:
            self._follower_step(now_ms)
        self._maybe_checkpoint_hw(now_ms)
        self.log.maybe_flush(now_ms)

    # on_fetch_response, on_offsets_for_leader_epoch_response (following.py) and
    # on_alter_partition_response (serving.py) are entry points too.

    def _take(self) -> list[Action]:
        out, self._out = self._out, []
        return out

    def _reply(self, token: Any, response: Message) -> None:
        self._out.append(Reply(token, response))

    # ------------------------------------------------------------------------------------
    # controller -> replica
    # ------------------------------------------------------------------------------------
    def _leader_and_isr(self, req: LeaderAndIsrRequest, token: Any, now_ms: int) -> None:
        self._reply(token, self._apply_leader_and_isr(req, now_ms))

    def _apply_leader_and_isr(self, req: LeaderAndIsrRequest, now_ms: int) -> LeaderAndIsrResponse:
        if req.topic != self.topic or req.partition != self.partition:
            return LeaderAndIsrResponse(
                ErrorCode.INVALID_REQUEST, f"this replica holds {self.topic}-{self.partition}, not {req.topic}-{req.partition}"
            )
        if req.controller_epoch < self.controller_epoch:
            return LeaderAndIsrResponse(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"controller epoch {req.controller_epoch} < {self.controller_epoch} already seen",
            )
        if req.leader_epoch < self.leader_epoch:
            return LeaderAndIsrResponse(
                ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {req.leader_epoch} < current {self.leader_epoch}"
            )
        self.controller_epoch = req.controller_epoch
        if req.config is not None:
            self.config = ReplicationConfig.from_topic_config(req.config)
        if req.leader_epoch == self.leader_epoch:
            if req.leader != self.leader:
                return LeaderAndIsrResponse(
                    ErrorCode.INVALID_REQUEST,
                    f"epoch {req.leader_epoch} already has leader {self.leader}, request names {req.leader}",
                )
            if req.partition_epoch > self.partition_epoch:
                self._set_assignment(req)
                if self.leader_state is not None:
                    self.leader_state.update_from_controller(req.isr, req.replicas, req.partition_epoch, now_ms)
                    self._maybe_advance_hw(now_ms)
            return LeaderAndIsrResponse()

        if req.leader == self.broker and self.leader_epoch < 0 and self.log.epoch_cache.latest_epoch >= req.leader_epoch:
            # A fresh process (restarted) asked to lead an epoch its log already has: it
            # would resume that leadership without its in-memory state (follower progress,
            # HW), so the HW could go backwards. Refuse; the controller elects anew.
            return LeaderAndIsrResponse(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"broker {self.broker} restarted and cannot resume leading epoch {req.leader_epoch} "
                f"(its log already has epoch {self.log.epoch_cache.latest_epoch}); elect with a new epoch",
            )
        if req.leader == self.broker and self._may_have_lost_data:
            # Restarted, possibly without its unflushed tail, and asked to lead by a controller
            # that may not have seen the restart (it happened between two heartbeats, or
            # while the controller itself was down): followers would truncate to what is
            # left. Refuse once; the controller, now aware, elects with that knowledge and
            # may still pick this replica, which then accepts.
            self._may_have_lost_data = False
            return LeaderAndIsrResponse(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"broker {self.broker} restarted and may have lost unflushed records; "
                f"not resuming leadership at epoch {req.leader_epoch} before the controller re-elects",
            )
        self.leader_epoch = req.leader_epoch
        self.leader = req.leader
        self._set_assignment(req)
        if req.leader == self.broker:
            self._become_leader(now_ms)
        elif req.leader >= 0:
            self._become_follower(now_ms)
        else:
            self._become_none(now_ms)
        return LeaderAndIsrResponse()

    def _set_assignment(self, req: LeaderAndIsrRequest) -> None:
        self.partition_epoch = req.partition_epoch
        self.replicas = list(req.replicas)
        self.isr = list(req.isr)

    def _become_leader(self, now_ms: int) -> None:
        self._abandon_requests()
        self.follower_state = None
        self.leader_state = None
        leo = self.log.log_end_offset
        # The new epoch starts at our LEO even before we append: a follower asking where
        # its older epoch ends is told "here". (Written before we call ourselves leader: if
        # the checkpoint write fails we are OFFLINE, never a leader without leader state.)
        self.log.epoch_cache.assign(self.leader_epoch, leo)
        self.hw = min(self.hw, leo)
        self.leader_state = LeaderState.start(
            self.broker, self.leader_epoch, leo, self.replicas, self.isr, self.partition_epoch, now_ms
        )
        self.role = LEADER
        self._maybe_advance_hw(now_ms)
        self._checkpoint_hw(now_ms)

    def _become_follower(self, now_ms: int) -> None:
        self._abandon_requests()
        self.leader_state = None
        self.role = FOLLOWER
        self.follower_state = FollowerState(leader=self.leader, epoch=self.leader_epoch)
        self.follower_state.asked_epoch = self.log.epoch_cache.latest_epoch
        self._checkpoint_hw(now_ms)
        self._follower_step(now_ms)

    def _become_none(self, now_ms: int) -> None:
        self._abandon_requests()
        self.leader_state = None
        self.follower_state = None
        self.role = NONE
        self._checkpoint_hw(now_ms)

    def _abandon_requests(self, code: int = ErrorCode.NOT_LEADER_OR_FOLLOWER, message: str | None = None) -> None:
        """Leadership moved (or the log failed): pending produce/fetch requests get an
        error now (an idempotent producer's retry is deduplicated by whoever leads next)."""
        msg = message or f"{self.topic}-{self.partition}: leadership changed (epoch {self.leader_epoch}, leader {self.leader})"
        while self._produce_waiters:
            w = self._produce_waiters.popleft()
            self._reply(w.token, ProduceResponse(code, msg, leader_epoch=self.leader_epoch))
        for w in self._fetch_waiters.values():
            self._reply(w.token, FetchResponse(code, msg, leader_epoch=self.leader_epoch))
        self._fetch_waiters.clear()

    # ------------------------------------------------------------------------------------
    # storage failure (KIP-112)
    # ------------------------------------------------------------------------------------
    def _storage_failed(self, exc: BaseException) -> None:
        reason = f"log of {self.topic}-{self.partition} on broker {self.broker} failed: {exc}"
        self.offline_reason = reason
        self._abandon_requests(ErrorCode.KAFKA_STORAGE_ERROR, reason)
        self.leader_state = None
        self.follower_state = None
        self.role = OFFLINE

    def _answer_offline(self, request: Message, token: Any) -> None:
        if isinstance(request, HeartbeatRequest):
            self._reply(token, self.status())
            return
        response_type = RESPONSE_FOR.get(type(request))
        if response_type is None:
            raise TypeError(f"not a replica request: {type(request).__name__}")
        self._reply(token, response_type(ErrorCode.KAFKA_STORAGE_ERROR, self.offline_reason))

    # ------------------------------------------------------------------------------------
    # status
    # ------------------------------------------------------------------------------------
    def _heartbeat(self, req: HeartbeatRequest, token: Any, now_ms: int) -> None:
        self._reply(token, self.status())

    def status(self) -> HeartbeatResponse:
        ls = self.leader_state
        offline = self.role == OFFLINE
        log = self.log
        return HeartbeatResponse(
            error_code=ErrorCode.KAFKA_STORAGE_ERROR if offline else ErrorCode.NONE,
            error_message=self.offline_reason or None,
            topic=self.topic,
            partition=self.partition,
            broker=self.broker,
            role=self.role.value,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            log_start_offset=-1 if offline else log.log_start_offset,
            log_end_offset=-1 if offline else log.log_end_offset,
            high_watermark=self.hw,
            isr=list(self.isr),
            follower_leo={b: p.log_end_offset for b, p in ls.followers.items()} if ls else {},
            incarnation=self.incarnation,
        )

    # ------------------------------------------------------------------------------------
    # timers
    # ------------------------------------------------------------------------------------
    def _expire_waiters(self, now_ms: int) -> None:
        if self._produce_waiters:
            kept: deque[ProduceWaiter] = deque()
            for w in self._produce_waiters:
                if w.deadline_ms <= now_ms:
                    self._reply(
                        w.token,
                        ProduceResponse(
                            ErrorCode.REQUEST_TIMED_OUT,
                            f"offset {w.required_offset - 1} not replicated to the ISR {self.isr} in time (HW {self.hw})",
                            leader_epoch=self.leader_epoch,
                        ),
                    )
                else:
                    kept.append(w)
            self._produce_waiters = kept
        if self._fetch_waiters:
            for token, w in list(self._fetch_waiters.items()):
                if w.deadline_ms <= now_ms:
                    del self._fetch_waiters[token]
                    response = self._read_for(w, force=True)
                    assert response is not None
                    self._reply(token, response)

    def next_deadline(self) -> int | None:
        if self.role == OFFLINE:
            return None
        deadlines: list[int] = []
        if self._produce_waiters:
            deadlines.append(min(w.deadline_ms for w in self._produce_waiters))
        if self._fetch_waiters:
            deadlines.append(min(w.deadline_ms for w in self._fetch_waiters.values()))
        ls = self.leader_state
        if ls is not None and ls.alter_request is None:
            # Only what tick() can act on: while an AlterPartition is in flight nothing can be
            # proposed, and during a backoff nothing before it ends (a past deadline here
            # makes the driver's timer spin).
            lag = ls.next_lag_deadline(self.config.replica_lag_time_max_ms)
            if lag is not None:
                deadlines.append(max(lag, ls.retry_alter_at_ms))
            if ls.retry_alter_at_ms:
                deadlines.append(ls.retry_alter_at_ms)
        fs = self.follower_state
        if fs is not None and fs.in_flight is None:
            deadlines.append(fs.backoff_until_ms)
        if self.hw != self._hw_checkpointed:
            deadlines.append(self._last_hw_checkpoint_ms + self.config.hw_checkpoint_interval_ms)
        return min(deadlines) if deadlines else None

    def _maybe_checkpoint_hw(self, now_ms: int) -> None:
        if self.hw != self._hw_checkpointed and now_ms - self._last_hw_checkpoint_ms >= self.config.hw_checkpoint_interval_ms:
            self._checkpoint_hw(now_ms)

    def _checkpoint_hw(self, now_ms: int) -> None:
        self.log.checkpoint_high_watermark(self.hw)
        self._hw_checkpointed = self.hw
        self._last_hw_checkpoint_ms = now_ms

    def close(self, now_ms: int = 0) -> None:
        """Stop: checkpoint the HW (when the log still works) and close the log."""
        try:
            if self.role != OFFLINE:
                self._checkpoint_hw(now_ms)
        except BaseException as exc:
            if not is_storage_error(exc):
                raise
        finally:
            try:
                self.log.close()
            except BaseException as exc:
                if not is_storage_error(exc):
                    raise
