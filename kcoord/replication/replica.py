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
from dataclasses import dataclass
from typing import Any

from .. import records
from ..protocol.controller import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    HeartbeatResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.replication import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
)
from .actions import Action, Reply, SendAlterPartition, SendFetch, SendOffsetsForLeaderEpoch
from .config import LOG_APPEND_TIME, ReplicationConfig
from .follower import FETCHING, TRUNCATING, FollowerState
from .leader import LeaderState

LEADER = "leader"
FOLLOWER = "follower"
NONE = "none"  # not told yet, or the partition is offline


@dataclass
class _ProduceWaiter:
    token: Any
    required_offset: int  # acked when HW >= this
    deadline_ms: int
    response: ProduceResponse


@dataclass
class _FetchWaiter:
    token: Any
    request: FetchRequest
    deadline_ms: int
    from_follower: bool


class Replica:
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
        self._produce_waiters: deque[_ProduceWaiter] = deque()
        self._fetch_waiters: dict[Any, _FetchWaiter] = {}
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
    # request validation
    # ------------------------------------------------------------------------------------
    def _leader_error(self, current_leader_epoch: int) -> tuple[int, str] | None:
        if self.role != LEADER:
            where = f"broker {self.leader}" if self.leader >= 0 else "no broker (offline)"
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, (
                f"broker {self.broker} is not the leader of {self.topic}-{self.partition} at epoch "
                f"{self.leader_epoch}; leader is {where}"
            )
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, f"request epoch {current_leader_epoch} < leader epoch {self.leader_epoch}"
            if current_leader_epoch > self.leader_epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH, f"request epoch {current_leader_epoch} > leader epoch {self.leader_epoch}"
        return None

    # ------------------------------------------------------------------------------------
    # Produce
    # ------------------------------------------------------------------------------------
    def produce(self, req: ProduceRequest, token: Any, now_ms: int) -> list[Action]:
        self.metrics["produce_requests"] += 1
        err = self._leader_error(req.current_leader_epoch)
        if err is None and (req.topic != self.topic or req.partition != self.partition):
            err = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this replica holds {self.topic}-{self.partition}")
        if err is None and req.acks not in (0, 1, -1):
            err = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1 (all), got {req.acks}")
        if err is None and req.acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            err = (
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR {self.isr} has {len(self.isr)} member(s); min.insync.replicas is {self.config.min_insync_replicas}",
            )
        if err is not None:
            return [Reply(token, ProduceResponse(err[0], err[1], leader_epoch=self.leader_epoch))]

        data = req.records
        append_time = -1
        try:
            if self.config.message_timestamp_type == LOG_APPEND_TIME:
                records.validate_batch(data)
                append_time = now_ms
                data = records.set_log_append_time(data, now_ms)
            info = self.log.append(data, leader_epoch=self.leader_epoch, now_ms=now_ms)
        except KafkaError as exc:
            return [Reply(token, ProduceResponse(int(exc.code), exc.message, leader_epoch=self.leader_epoch))]
        except OSError as exc:
            return [Reply(token, ProduceResponse(ErrorCode.KAFKA_STORAGE_ERROR, f"log write failed: {exc}", leader_epoch=self.leader_epoch))]

        actions: list[Action] = []
        if not info.duplicate:
            self.metrics["produce_bytes"] += len(data)
            actions += self._wake_fetchers(now_ms, followers=True)
            actions += self._maybe_advance_hw(now_ms)
        response = ProduceResponse(
            base_offset=info.base_offset,
            log_append_time=append_time,
            log_start_offset=self.log.log_start_offset,
            leader_epoch=self.leader_epoch,
            duplicate=bool(info.duplicate),
        )
        if req.acks != -1:
            actions.append(Reply(token, response))
            return actions
        if info.base_offset >= 0:
            required = info.base_offset + records.read_header(data).record_count
        else:  # a duplicate from outside the dedup window: it is somewhere below our LEO
            required = self.log.log_end_offset
        if self.hw >= required:
            actions.append(Reply(token, self._acked(response)))
        else:
            self._produce_waiters.append(_ProduceWaiter(token, required, now_ms + max(0, req.timeout_ms), response))
        return actions

    def _acked(self, response: ProduceResponse) -> ProduceResponse:
        if len(self.isr) < self.config.min_insync_replicas:
            response.error_code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            response.error_message = (
                f"written, but the ISR {self.isr} shrank below min.insync.replicas="
                f"{self.config.min_insync_replicas} before it was replicated"
            )
        return response

    # ------------------------------------------------------------------------------------
    # Fetch (consumers and followers), long-poll
    # ------------------------------------------------------------------------------------
    def fetch(self, req: FetchRequest, token: Any, now_ms: int) -> list[Action]:
        self.metrics["fetch_requests"] += 1
        err = self._leader_error(req.current_leader_epoch)
        if err is None and (req.topic != self.topic or req.partition != self.partition):
            err = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this replica holds {self.topic}-{self.partition}")
        from_follower = req.replica_id >= 0
        if err is None and from_follower and (req.replica_id not in self.replicas or req.replica_id == self.broker):
            err = (ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {req.replica_id} is not a follower of {self.topic}-{self.partition} (replicas {self.replicas})")
        if err is None and req.max_bytes <= 0:
            err = (ErrorCode.INVALID_FETCH_SIZE, f"max_bytes must be positive, got {req.max_bytes}")
        if err is not None:
            return [Reply(token, FetchResponse(err[0], err[1], leader_epoch=self.leader_epoch))]
        log = self.log
        leo = log.log_end_offset
        if req.fetch_offset < log.log_start_offset or req.fetch_offset > leo:
            return [
                Reply(
                    token,
                    FetchResponse(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        f"offset {req.fetch_offset} is outside the log [{log.log_start_offset}, {leo}] of {self.topic}-{self.partition}",
                        high_watermark=self.hw,
                        log_start_offset=log.log_start_offset,
                        log_end_offset=leo,
                        leader_epoch=self.leader_epoch,
                    ),
                )
            ]
        actions: list[Action] = []
        if from_follower:
            assert self.leader_state is not None
            progress = self.leader_state.followers.get(req.replica_id)
            if progress is not None:
                progress.on_fetch(req.fetch_offset, leo, now_ms)
            actions += self._maybe_advance_hw(now_ms)
            actions += self._maybe_propose_isr(now_ms)
        waiter = _FetchWaiter(token, req, now_ms + max(0, req.max_wait_ms), from_follower)
        response = self._read_for(waiter, force=req.max_wait_ms <= 0)
        if response is not None:
            actions.append(Reply(token, response))
        else:
            self._fetch_waiters[token] = waiter
        return actions

    def _read_for(self, waiter: _FetchWaiter, force: bool) -> FetchResponse | None:
        """The response for a fetch if it can be answered now (enough bytes or forced)."""
        req = waiter.request
        log = self.log
        max_offset = None if waiter.from_follower else self.hw
        data = b""
        spans = None
        size = 0
        if req.fetch_offset < (log.log_end_offset if waiter.from_follower else self.hw):
            if self.node_id and req.node_id == self.node_id:
                spans = log.locate(req.fetch_offset, req.max_bytes, max_offset)
            if spans is None:
                data = log.read(req.fetch_offset, req.max_bytes, max_offset)
                size = len(data)
            else:
                size = sum(span[2] for span in spans)
        if not force and size < max(1, req.min_bytes):
            return None
        self.metrics["fetch_bytes"] += size
        return FetchResponse(
            high_watermark=self.hw,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
            leader_epoch=self.leader_epoch,
            records=data,
            file_hint=spans or None,
        )

    def _wake_fetchers(self, now_ms: int, *, followers: bool) -> list[Action]:
        if not self._fetch_waiters:
            return []
        actions: list[Action] = []
        for token, w in list(self._fetch_waiters.items()):
            if w.from_follower != followers:
                continue
            response = self._read_for(w, force=False)
            if response is not None:
                del self._fetch_waiters[token]
                actions.append(Reply(token, response))
        return actions

    # ------------------------------------------------------------------------------------
    # HW and ISR (leader)
    # ------------------------------------------------------------------------------------
    def _maybe_advance_hw(self, now_ms: int) -> list[Action]:
        ls = self.leader_state
        if ls is None:
            return []
        candidate = ls.high_watermark_candidate(self.log.log_end_offset)
        if candidate <= self.hw:
            return []
        self.hw = candidate
        actions: list[Action] = []
        while self._produce_waiters and self._produce_waiters[0].required_offset <= candidate:
            w = self._produce_waiters.popleft()
            actions.append(Reply(w.token, self._acked(w.response)))
        actions += self._wake_fetchers(now_ms, followers=False)
        return actions

    def _maybe_propose_isr(self, now_ms: int) -> list[Action]:
        ls = self.leader_state
        if ls is None or ls.alter_in_flight or now_ms < ls.retry_alter_at_ms:
            return []
        ls.retry_alter_at_ms = 0  # the backoff is over (a stale value would be a past deadline)
        proposal = ls.proposed_isr(self.log.log_end_offset, self.hw, now_ms, self.config.replica_lag_time_max_ms)
        if proposal is None:
            return []
        ls.pending_isr = proposal
        ls.alter_in_flight = True
        return [
            SendAlterPartition(
                AlterPartitionRequest(
                    topic=self.topic,
                    partition=self.partition,
                    leader=self.broker,
                    leader_epoch=self.leader_epoch,
                    partition_epoch=self.partition_epoch,
                    new_isr=proposal,
                )
            )
        ]

    def on_alter_partition_response(
        self, request: AlterPartitionRequest, response: AlterPartitionResponse | None, now_ms: int
    ) -> list[Action]:
        """``response`` None means the controller could not be reached."""
        ls = self.leader_state
        if ls is None or request.leader_epoch != self.leader_epoch or not ls.alter_in_flight:
            return []
        ls.alter_in_flight = False
        ls.pending_isr = None
        if response is None:
            # Unknown outcome: the controller may have applied it. Its members keep counting
            # for the HW until a LeaderAndIsr or an answer tells the truth.
            ls.unconfirmed = sorted(set(ls.unconfirmed) | set(request.new_isr))
        if response is None or response.error_code != ErrorCode.NONE:
            # Fenced or stale partition epoch: the controller's LeaderAndIsr will bring the
            # truth; meanwhile retry later with a fresh proposal.
            ls.retry_alter_at_ms = now_ms + self.config.alter_partition_backoff_ms
            return []
        if response.leader_epoch != self.leader_epoch or response.partition_epoch <= self.partition_epoch:
            return []
        old = set(self.isr)
        new = set(response.isr)
        if new - old:
            self.metrics["isr_expands"] += 1
            ls.isr_expands += 1
        if old - new:
            self.metrics["isr_shrinks"] += 1
            ls.isr_shrinks += 1
        self.isr = list(response.isr)
        self.partition_epoch = response.partition_epoch
        ls.adopt_isr(response.isr)
        ls.unconfirmed = []  # the controller's whole ISR as of now: nothing left to guess
        ls.partition_epoch = response.partition_epoch
        actions = self._maybe_advance_hw(now_ms)
        actions += self._maybe_propose_isr(now_ms)
        return actions

    # ------------------------------------------------------------------------------------
    # follower loop
    # ------------------------------------------------------------------------------------
    def _follower_step(self, now_ms: int) -> list[Action]:
        fs = self.follower_state
        if fs is None or not fs.ready(now_ms):
            return []
        if fs.phase == TRUNCATING:
            if fs.asked_epoch < 0:
                fs.phase = FETCHING  # empty log (or no epochs): nothing can diverge
            else:
                fs.in_flight = True
                return [
                    SendOffsetsForLeaderEpoch(
                        fs.leader,
                        OffsetsForLeaderEpochRequest(
                            topic=self.topic,
                            partition=self.partition,
                            leader_epoch=fs.asked_epoch,
                            current_leader_epoch=fs.epoch,
                            replica_id=self.broker,
                        ),
                    )
                ]
        fs.in_flight = True
        fs.fetches += 1
        fs.last_fetch_ms = now_ms
        cfg = self.config
        return [
            SendFetch(
                fs.leader,
                FetchRequest(
                    topic=self.topic,
                    partition=self.partition,
                    fetch_offset=self.log.log_end_offset,
                    max_bytes=cfg.replica_fetch_max_bytes,
                    min_bytes=cfg.replica_fetch_min_bytes,
                    max_wait_ms=cfg.replica_fetch_wait_max_ms,
                    replica_id=self.broker,
                    current_leader_epoch=fs.epoch,
                    node_id=self.node_id,
                ),
            )
        ]

    def _is_current(self, current_leader_epoch: int) -> bool:
        fs = self.follower_state
        return fs is not None and self.role == FOLLOWER and current_leader_epoch == fs.epoch

    def on_offsets_for_leader_epoch_response(
        self, request: OffsetsForLeaderEpochRequest, response: OffsetsForLeaderEpochResponse | None, now_ms: int
    ) -> list[Action]:
        """Find the divergence point and truncate (KIP-101, iterating as KIP-279)."""
        if not self._is_current(request.current_leader_epoch):
            return []
        fs = self.follower_state
        assert fs is not None
        fs.in_flight = False
        if response is None or response.error_code != ErrorCode.NONE:
            fs.back_off(now_ms, self.config.replica_fetch_backoff_ms)
            return []
        fs.consecutive_errors = 0
        log = self.log
        leader_epoch, leader_end = response.leader_epoch, response.end_offset
        if leader_epoch < 0 or leader_end < 0:
            # The leader knows no epoch this old: keep only what was committed.
            self._truncate(min(self.hw, log.log_end_offset))
        else:
            our_epoch, our_end = log.epoch_cache.end_offset_for(leader_epoch, log.log_end_offset)
            if our_epoch == leader_epoch:
                self._truncate(min(leader_end, our_end))
            elif our_epoch < 0:
                # All our epochs are newer than the leader's answer: from the start of our
                # oldest epoch on, our log was written by leaders whose epochs the current
                # leader never had, so it diverges there (not merely past the leader's end).
                entries = log.epoch_cache.entries
                first = entries[0].start_offset if entries else log.log_end_offset
                self._truncate(min(leader_end, first))
            else:
                fs.asked_epoch = our_epoch  # ask again about the older epoch we do have
                return self._follower_step(now_ms)
        fs.phase = FETCHING
        return self._follower_step(now_ms)

    def _truncate(self, offset: int) -> None:
        log = self.log
        offset = max(offset, log.log_start_offset)
        if offset < log.log_end_offset:
            self.metrics["truncations"] += 1
            self.metrics["truncated_records"] += log.log_end_offset - offset
            log.truncate_to(offset)
        self.hw = min(self.hw, log.log_end_offset)

    def on_fetch_response(self, request: FetchRequest, response: FetchResponse | None, now_ms: int) -> list[Action]:
        """``response`` None means the leader could not be reached (dead actor, timeout)."""
        if not self._is_current(request.current_leader_epoch):
            return []
        fs = self.follower_state
        assert fs is not None
        fs.in_flight = False
        log = self.log
        if response is None:
            fs.back_off(now_ms, self.config.replica_fetch_backoff_ms)
            return []
        if response.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= request.fetch_offset < response.log_start_offset:
                # We fell behind the leader's retention: start over at its log start.
                log.truncate_fully_and_start_at(response.log_start_offset)
                self.hw = log.log_end_offset
                fs.phase = FETCHING
            else:
                if 0 <= response.log_end_offset < request.fetch_offset == log.log_end_offset:
                    # Nothing of ours past the leader's log end can match its log. Drop it
                    # now: when reconciliation finds no common epoch it keeps our log up
                    # to our HW, and if the leader's log is shorter than that (an unclean
                    # election, or lost unflushed data) we would fetch past its end forever.
                    self._truncate(response.log_end_offset)
                fs.phase = TRUNCATING  # our log is longer than the leader's: reconcile again
                fs.asked_epoch = log.epoch_cache.latest_epoch
            fs.consecutive_errors = 0
            return self._follower_step(now_ms)
        if response.error_code != ErrorCode.NONE:
            fs.back_off(now_ms, self.config.replica_fetch_backoff_ms)
            return []
        fs.consecutive_errors = 0
        fs.leader_log_end_offset = response.log_end_offset
        if response.records:
            if request.fetch_offset != log.log_end_offset:
                return self._follower_step(now_ms)  # stale answer (we truncated meanwhile)
            try:
                log.append(response.records, now_ms=now_ms)
            except KafkaError:
                # Bytes that do not fit our log: reconcile from scratch rather than guess.
                fs.phase = TRUNCATING
                fs.asked_epoch = log.epoch_cache.latest_epoch
                fs.back_off(now_ms, self.config.replica_fetch_backoff_ms)
                return []
        new_hw = min(response.high_watermark, log.log_end_offset)
        if new_hw > self.hw:
            self.hw = new_hw
        if self._may_have_lost_data and log.log_end_offset >= response.high_watermark >= 0:
            self._may_have_lost_data = False  # it holds everything committed again
        self._maybe_checkpoint_hw(now_ms)
        return self._follower_step(now_ms)

    # ------------------------------------------------------------------------------------
    # ListOffsets / OffsetsForLeaderEpoch / status
    # ------------------------------------------------------------------------------------
    def list_offsets(self, req: ListOffsetsRequest) -> ListOffsetsResponse:
        err = self._leader_error(req.current_leader_epoch)
        if err is not None:
            return ListOffsetsResponse(err[0], err[1], leader_epoch=self.leader_epoch)
        log = self.log
        if req.timestamp == EARLIEST_TIMESTAMP:
            return ListOffsetsResponse(offset=log.log_start_offset, leader_epoch=self.leader_epoch)
        if req.timestamp == LATEST_TIMESTAMP:
            return ListOffsetsResponse(offset=self.hw, leader_epoch=self.leader_epoch)
        if req.timestamp < 0:
            return ListOffsetsResponse(ErrorCode.INVALID_REQUEST, f"timestamp {req.timestamp} is not -1, -2 or >= 0")
        found = log.offset_for_timestamp(req.timestamp)
        if found is None or found[0] >= self.hw:
            return ListOffsetsResponse(offset=-1, timestamp=-1, leader_epoch=self.leader_epoch)
        return ListOffsetsResponse(offset=found[0], timestamp=found[1], leader_epoch=self.leader_epoch)

    def offsets_for_leader_epoch(self, req: OffsetsForLeaderEpochRequest) -> OffsetsForLeaderEpochResponse:
        err = self._leader_error(req.current_leader_epoch)
        if err is not None:
            return OffsetsForLeaderEpochResponse(err[0], err[1])
        epoch, end = self.log.epoch_cache.end_offset_for(req.leader_epoch, self.log.log_end_offset)
        return OffsetsForLeaderEpochResponse(leader_epoch=epoch, end_offset=end)

    def parked_fetches(self) -> dict[str, int]:
        """Long-poll fetches waiting for data, by kind (for operators and tests)."""
        followers = sum(1 for w in self._fetch_waiters.values() if w.from_follower)
        return {"followers": followers, "consumers": len(self._fetch_waiters) - followers}

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
            kept: deque[_ProduceWaiter] = deque()
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
