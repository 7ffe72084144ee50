"""One partition replica as a sans-I/O state machine.

The ReplicaActor (actors/replica.py) is a thin shell around :class:`Replica`: it decodes a
request, calls the matching method with ``now_ms`` and a token for the pending reply, and
performs the returned actions (reply, send a Fetch to the leader, send AlterPartition to
the controller). Timers are a single ``tick(now_ms)`` the shell calls at
``next_deadline()``. The deterministic simulation (tests/sim) drives the very same object
over a fake network.

The replica owns its log object (:class:`kcoord.log.Log` on disk, or
:class:`kcoord.log.MemoryLog` in the simulation); local storage is the one side effect the
core performs itself, because it is synchronous and deterministic.

Record batches are never decoded here: the leader validates framing and CRC, stamps base
offset and epoch into the header, and followers copy bytes.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ..protocol.controller import HeartbeatResponse, LeaderAndIsrRequest, LeaderAndIsrResponse
from ..protocol.errors import ErrorCode
from ..protocol.replication import FetchResponse, ProduceResponse
from .actions import Action, Reply
from .config import ReplicationConfig
from .follower import FollowerState
from .following import FollowerLoop
from .leader import LeaderState
from .roles import FOLLOWER, LEADER, NONE
from .serving import FetchWaiter, LeaderServing, ProduceWaiter

__all__ = ["FOLLOWER", "LEADER", "NONE", "Replica"]


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
    ) -> None:
        self.topic = topic
        # Where this replica runs (a Ray node id); fetches from the same node are answered
        # with file hints instead of bytes. Empty: never.
        self.node_id = node_id
        self.partition = partition
        self.broker = broker
        self.log = log
        self.config = config or ReplicationConfig()
        self.role = NONE
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
        self._hw_checkpointed = self.hw
        # A process that starts on a log with history, in a topic whose appends are not each
        # fsynced, may have lost its unflushed tail in a crash; it cannot tell. Until it has
        # caught up with a leader's HW it refuses the first leadership it is offered (see
        # handle_leader_and_isr).
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

    # ------------------------------------------------------------------------------------
    # controller -> replica
    # ------------------------------------------------------------------------------------
    def handle_leader_and_isr(self, req: LeaderAndIsrRequest, now_ms: int) -> tuple[LeaderAndIsrResponse, list[Action]]:
        if req.topic != self.topic or req.partition != self.partition:
            return LeaderAndIsrResponse(
                ErrorCode.INVALID_REQUEST, f"this replica holds {self.topic}-{self.partition}, not {req.topic}-{req.partition}"
            ), []
        if req.controller_epoch < self.controller_epoch:
            return LeaderAndIsrResponse(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"controller epoch {req.controller_epoch} < {self.controller_epoch} already seen",
            ), []
        if req.leader_epoch < self.leader_epoch:
            return LeaderAndIsrResponse(
                ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {req.leader_epoch} < current {self.leader_epoch}"
            ), []
        self.controller_epoch = req.controller_epoch
        if req.config is not None:
            self.config = ReplicationConfig.from_topic_config(req.config)
        actions: list[Action] = []
        if req.leader_epoch == self.leader_epoch:
            if req.leader != self.leader:
                return LeaderAndIsrResponse(
                    ErrorCode.INVALID_REQUEST,
                    f"epoch {req.leader_epoch} already has leader {self.leader}, request names {req.leader}",
                ), []
            if req.partition_epoch > self.partition_epoch:
                self._set_assignment(req)
                if self.leader_state is not None:
                    self.leader_state.update_from_controller(req.isr, req.replicas, req.partition_epoch, now_ms)
                    actions += self._maybe_advance_hw(now_ms)
            return LeaderAndIsrResponse(), actions

        if req.leader == self.broker and self.leader_epoch < 0 and self.log.epoch_cache.latest_epoch >= req.leader_epoch:
            # A fresh process (restarted) asked to lead an epoch its log already has: it
            # would resume that leadership without its in-memory state (follower progress,
            # HW), so the HW could go backwards. Refuse; the controller elects anew.
            return LeaderAndIsrResponse(
                ErrorCode.FENCED_LEADER_EPOCH,
                f"broker {self.broker} restarted and cannot resume leading epoch {req.leader_epoch} "
                f"(its log already has epoch {self.log.epoch_cache.latest_epoch}); elect with a new epoch",
            ), []
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
            ), []
        self.leader_epoch = req.leader_epoch
        self.leader = req.leader
        self._set_assignment(req)
        if req.leader == self.broker:
            actions += self._become_leader(now_ms)
        elif req.leader >= 0:
            actions += self._become_follower(now_ms)
        else:
            actions += self._become_none(now_ms)
        return LeaderAndIsrResponse(), actions

    def _set_assignment(self, req: LeaderAndIsrRequest) -> None:
        self.partition_epoch = req.partition_epoch
        self.replicas = list(req.replicas)
        self.isr = list(req.isr)

    def _become_leader(self, now_ms: int) -> list[Action]:
        actions = self._abandon_requests(now_ms)
        self.follower_state = None
        self.role = LEADER
        leo = self.log.log_end_offset
        # The new epoch starts at our LEO even before we append: a follower asking where
        # its older epoch ends is told "here".
        self.log.epoch_cache.assign(self.leader_epoch, leo)
        self.hw = min(self.hw, leo)
        self.leader_state = LeaderState.start(
            self.broker, self.leader_epoch, leo, self.replicas, self.isr, self.partition_epoch, now_ms
        )
        actions += self._maybe_advance_hw(now_ms)
        self._checkpoint_hw(now_ms)
        return actions

    def _become_follower(self, now_ms: int) -> list[Action]:
        actions = self._abandon_requests(now_ms)
        self.leader_state = None
        self.role = FOLLOWER
        self.follower_state = FollowerState(leader=self.leader, epoch=self.leader_epoch)
        self.follower_state.asked_epoch = self.log.epoch_cache.latest_epoch
        self._checkpoint_hw(now_ms)
        actions += self._follower_step(now_ms)
        return actions

    def _become_none(self, now_ms: int) -> list[Action]:
        actions = self._abandon_requests(now_ms)
        self.leader_state = None
        self.follower_state = None
        self.role = NONE
        self._checkpoint_hw(now_ms)
        return actions

    def _abandon_requests(self, now_ms: int) -> list[Action]:
        """Leadership moved: pending produce/fetch requests get NOT_LEADER_OR_FOLLOWER
        (an idempotent producer's retry is deduplicated by whoever leads next)."""
        actions: list[Action] = []
        msg = f"{self.topic}-{self.partition}: leadership changed (epoch {self.leader_epoch}, leader {self.leader})"
        while self._produce_waiters:
            w = self._produce_waiters.popleft()
            actions.append(Reply(w.token, ProduceResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, msg, leader_epoch=self.leader_epoch)))
        for w in self._fetch_waiters.values():
            actions.append(Reply(w.token, FetchResponse(ErrorCode.NOT_LEADER_OR_FOLLOWER, msg, leader_epoch=self.leader_epoch)))
        self._fetch_waiters.clear()
        return actions

    # ------------------------------------------------------------------------------------
    # status
    # ------------------------------------------------------------------------------------
    def status(self, incarnation: str = "") -> HeartbeatResponse:
        ls = self.leader_state
        return HeartbeatResponse(
            topic=self.topic,
            partition=self.partition,
            broker=self.broker,
            role=self.role,
            leader=self.leader,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset,
            high_watermark=self.hw,
            isr=list(self.isr),
            follower_leo={b: p.log_end_offset for b, p in ls.followers.items()} if ls else {},
            incarnation=incarnation,
        )

    # ------------------------------------------------------------------------------------
    # timers
    # ------------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> list[Action]:
        actions: list[Action] = []
        if self._produce_waiters:
            kept: deque[ProduceWaiter] = deque()
            for w in self._produce_waiters:
                if w.deadline_ms <= now_ms:
                    actions.append(
                        Reply(
                            w.token,
                            ProduceResponse(
                                ErrorCode.REQUEST_TIMED_OUT,
                                f"offset {w.required_offset - 1} not replicated to the ISR {self.isr} in time (HW {self.hw})",
                                leader_epoch=self.leader_epoch,
                            ),
                        )
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
                    actions.append(Reply(token, response))
        if self.leader_state is not None:
            actions += self._maybe_propose_isr(now_ms)
        if self.follower_state is not None:
            actions += self._follower_step(now_ms)
        self._maybe_checkpoint_hw(now_ms)
        maybe_flush = getattr(self.log, "maybe_flush", None)
        if maybe_flush is not None:
            maybe_flush(now_ms)
        return actions

    def next_deadline(self) -> int | None:
        deadlines: list[int] = []
        if self._produce_waiters:
            deadlines.append(min(w.deadline_ms for w in self._produce_waiters))
        if self._fetch_waiters:
            deadlines.append(min(w.deadline_ms for w in self._fetch_waiters.values()))
        ls = self.leader_state
        if ls is not None and not ls.alter_in_flight:
            # Only what tick() can act on: while an AlterPartition is in flight nothing can be
            # proposed, and during a backoff nothing before it ends (a past deadline here
            # makes the shell's timer loop spin).
            lag = ls.next_lag_deadline(self.config.replica_lag_time_max_ms)
            if lag is not None:
                deadlines.append(max(lag, ls.retry_alter_at_ms))
            if ls.retry_alter_at_ms:
                deadlines.append(ls.retry_alter_at_ms)
        fs = self.follower_state
        if fs is not None and not fs.in_flight:
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
        try:
            self._checkpoint_hw(now_ms)
        finally:
            self.log.close()
