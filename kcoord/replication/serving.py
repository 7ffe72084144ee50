"""The leader side of a replica: Produce, long-poll Fetch, the HW, ISR proposals, queries.

A mixin of :class:`kcoord.replication.replica.Replica` (it works on the replica's log,
roles and waiters); split out so that each file holds one side of replication. Record
batches are never decoded here: the leader validates framing and CRC, stamps base offset
and epoch into the header and serves bytes (or, to readers on its node, file hints).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .. import records
from ..protocol.controller import AlterPartitionRequest, AlterPartitionResponse
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
from .actions import SendAlterPartition
from .config import LOG_APPEND_TIME
from .entry import entry_point
from .roles import LEADER


@dataclass
class ProduceWaiter:
    token: Any
    required_offset: int  # acked when HW >= this
    deadline_ms: int
    response: ProduceResponse


@dataclass
class FetchWaiter:
    token: Any
    request: FetchRequest
    deadline_ms: int
    from_follower: bool


class LeaderServing:
    """Leader-side request handling (mixed into Replica). Methods emit actions into the
    replica's ``_out`` (see :meth:`Replica._reply`); the entry points return them."""

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
    def _produce(self, req: ProduceRequest, token: Any, now_ms: int) -> None:
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
            self._reply(token, ProduceResponse(err[0], err[1], leader_epoch=self.leader_epoch))
            return

        data = req.records
        append_time = -1
        try:
            if self.config.message_timestamp_type == LOG_APPEND_TIME:
                records.validate_batch(data)
                append_time = now_ms
                data = records.set_log_append_time(data, now_ms)
            info = self.log.append(data, leader_epoch=self.leader_epoch, now_ms=now_ms)
        except KafkaError as exc:
            if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
                raise  # the log failed: the replica goes offline (Replica._storage_failed)
            self._reply(token, ProduceResponse(int(exc.code), exc.message, leader_epoch=self.leader_epoch))
            return

        if not info.duplicate:
            self.metrics["produce_bytes"] += len(data)
            self._wake_fetchers(now_ms, followers=True)
            self._maybe_advance_hw(now_ms)
        response = ProduceResponse(
            base_offset=info.base_offset,
            log_append_time=append_time,
            log_start_offset=self.log.log_start_offset,
            leader_epoch=self.leader_epoch,
            duplicate=bool(info.duplicate),
        )
        if req.acks != -1:
            self._reply(token, response)
            return
        if info.base_offset >= 0:
            required = info.base_offset + records.read_header(data).record_count
        else:  # a duplicate from outside the dedup window: it is somewhere below our LEO
            required = self.log.log_end_offset
        if self.hw >= required:
            self._reply(token, self._acked(response))
        else:
            self._produce_waiters.append(ProduceWaiter(token, required, now_ms + max(0, req.timeout_ms), response))

    def _acked(self, response: ProduceResponse) -> ProduceResponse:
        if len(self.isr) < self.config.min_insync_replicas:
            return dataclasses.replace(
                response,
                error_code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                error_message=(
                    f"written, but the ISR {self.isr} shrank below min.insync.replicas="
                    f"{self.config.min_insync_replicas} before it was replicated"
                ),
            )
        return response

    # ------------------------------------------------------------------------------------
    # Fetch (consumers and followers), long-poll
    # ------------------------------------------------------------------------------------
    def _fetch(self, req: FetchRequest, token: Any, now_ms: int) -> None:
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
            self._reply(token, FetchResponse(err[0], err[1], leader_epoch=self.leader_epoch))
            return
        log = self.log
        leo = log.log_end_offset
        if req.fetch_offset < log.log_start_offset or req.fetch_offset > leo:
            self._reply(
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
            return
        if from_follower:
            assert self.leader_state is not None
            progress = self.leader_state.followers.get(req.replica_id)
            if progress is not None:
                progress.on_fetch(req.fetch_offset, leo, now_ms)
            self._maybe_advance_hw(now_ms)
            self._maybe_propose_isr(now_ms)
        waiter = FetchWaiter(token, req, now_ms + max(0, req.max_wait_ms), from_follower)
        response = self._read_for(waiter, force=req.max_wait_ms <= 0)
        if response is not None:
            self._reply(token, response)
        else:
            self._fetch_waiters[token] = waiter

    def _hw_is_stale(self) -> bool:
        """A new leader's HW is the one it learned as a follower, which may lag what the
        previous leader showed consumers. Until it reaches the start of this leader's epoch
        (which every HW shown before is at most: the leader came from the ISR) it is not
        shown to consumers, so the HW they see never goes backwards across a failover."""
        ls = self.leader_state
        return ls is not None and self.hw < ls.epoch_start_offset

    def _read_for(self, waiter: FetchWaiter, force: bool) -> FetchResponse | None:
        """The response for a fetch if it can be answered now (enough bytes or forced)."""
        req = waiter.request
        if not waiter.from_follower and self._hw_is_stale():
            if not force:
                return None  # parked until the HW catches up (or the wait ends)
            return FetchResponse(
                ErrorCode.OFFSET_NOT_AVAILABLE,
                f"{self.topic}-{self.partition}: leader {self.broker} became leader at epoch {self.leader_epoch} "
                f"and its high watermark has not caught up yet; retry",
                leader_epoch=self.leader_epoch,
            )
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

    def _wake_fetchers(self, now_ms: int, *, followers: bool) -> None:
        if not self._fetch_waiters:
            return
        for token, w in list(self._fetch_waiters.items()):
            if w.from_follower != followers:
                continue
            response = self._read_for(w, force=False)
            if response is not None:
                del self._fetch_waiters[token]
                self._reply(token, response)

    # ------------------------------------------------------------------------------------
    # HW and ISR (leader)
    # ------------------------------------------------------------------------------------
    def _maybe_advance_hw(self, now_ms: int) -> None:
        ls = self.leader_state
        if ls is None:
            return
        candidate = ls.high_watermark_candidate(self.log.log_end_offset)
        if candidate <= self.hw:
            return
        self.hw = candidate
        while self._produce_waiters and self._produce_waiters[0].required_offset <= candidate:
            w = self._produce_waiters.popleft()
            self._reply(w.token, self._acked(w.response))
        self._wake_fetchers(now_ms, followers=False)

    def _maybe_propose_isr(self, now_ms: int) -> None:
        ls = self.leader_state
        if ls is None or ls.alter_request is not None or now_ms < ls.retry_alter_at_ms:
            return
        ls.retry_alter_at_ms = 0  # the backoff is over (a stale value would be a past deadline)
        proposal = ls.proposed_isr(self.log.log_end_offset, self.hw, now_ms, self.config.replica_lag_time_max_ms)
        if proposal is None:
            return
        request = AlterPartitionRequest(
            topic=self.topic,
            partition=self.partition,
            leader=self.broker,
            leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch,
            new_isr=proposal,
        )
        ls.pending_isr = proposal
        ls.alter_request = request
        self._out.append(SendAlterPartition(request))

    @entry_point
    def on_alter_partition_response(self, request: AlterPartitionRequest, response: AlterPartitionResponse | None, now_ms: int) -> None:
        """The answer to our AlterPartition ``request``; None means the controller could
        not be reached (or could not say whether it applied the change)."""
        ls = self.leader_state
        if ls is None or ls.alter_request is not request:
            return  # an answer to a proposal we no longer wait for
        ls.alter_request = None
        ls.pending_isr = None
        if response is not None and response.error_code in UNKNOWN_OUTCOME:
            response = None
        if response is None:
            # Unknown outcome: the controller may have applied it. Its members keep counting
            # for the HW until a LeaderAndIsr or an answer tells the truth.
            ls.unconfirmed = sorted(set(ls.unconfirmed) | set(request.new_isr))
        newer = (
            response is not None
            and response.leader == self.broker
            and response.leader_epoch == self.leader_epoch
            and response.partition_epoch > self.partition_epoch
        )
        if response is None or response.error_code != ErrorCode.NONE:
            # Fenced or stale partition epoch: retry later with a fresh proposal. An answer
            # that carries a newer state of our own leadership is the truth all the same --
            # a duplicate of this very request may have been applied (Kafka's idempotent
            # AlterPartition), and the controller may have changed the ISR since -- so it
            # is adopted like a LeaderAndIsr rather than guessed at.
            ls.retry_alter_at_ms = now_ms + self.config.alter_partition_backoff_ms
            if not newer:
                return
        elif not newer:
            return
        assert response is not None
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
        self._maybe_advance_hw(now_ms)
        if response.error_code == ErrorCode.NONE:
            self._maybe_propose_isr(now_ms)

    # ------------------------------------------------------------------------------------
    # ListOffsets / OffsetsForLeaderEpoch / status
    # ------------------------------------------------------------------------------------
    def _list_offsets(self, req: ListOffsetsRequest, token: Any, now_ms: int) -> None:
        self._reply(token, self._list_offsets_response(req))

    def _list_offsets_response(self, req: ListOffsetsRequest) -> ListOffsetsResponse:
        err = self._leader_error(req.current_leader_epoch)
        if err is not None:
            return ListOffsetsResponse(err[0], err[1], leader_epoch=self.leader_epoch)
        log = self.log
        if req.timestamp == EARLIEST_TIMESTAMP:
            return ListOffsetsResponse(offset=log.log_start_offset, leader_epoch=self.leader_epoch)
        if req.timestamp != EARLIEST_TIMESTAMP and self._hw_is_stale():
            return ListOffsetsResponse(
                ErrorCode.OFFSET_NOT_AVAILABLE,
                f"leader {self.broker} of {self.topic}-{self.partition} has not caught its high watermark up yet; retry",
                leader_epoch=self.leader_epoch,
            )
        if req.timestamp == LATEST_TIMESTAMP:
            return ListOffsetsResponse(offset=self.hw, leader_epoch=self.leader_epoch)
        if req.timestamp < 0:
            return ListOffsetsResponse(ErrorCode.INVALID_REQUEST, f"timestamp {req.timestamp} is not -1, -2 or >= 0")
        found = log.offset_for_timestamp(req.timestamp)
        if found is None or found[0] >= self.hw:
            return ListOffsetsResponse(offset=-1, timestamp=-1, leader_epoch=self.leader_epoch)
        return ListOffsetsResponse(offset=found[0], timestamp=found[1], leader_epoch=self.leader_epoch)

    def _offsets_for_leader_epoch(self, req: OffsetsForLeaderEpochRequest, token: Any, now_ms: int) -> None:
        err = self._leader_error(req.current_leader_epoch)
        if err is not None:
            self._reply(token, OffsetsForLeaderEpochResponse(err[0], err[1]))
            return
        epoch, end = self.log.epoch_cache.end_offset_for(req.leader_epoch, self.log.log_end_offset)
        self._reply(token, OffsetsForLeaderEpochResponse(leader_epoch=epoch, end_offset=end))

    def parked_fetches(self) -> dict[str, int]:
        """Long-poll fetches waiting for data, by kind (for operators and tests)."""
        followers = sum(1 for w in self._fetch_waiters.values() if w.from_follower)
        return {"followers": followers, "consumers": len(self._fetch_waiters) - followers}


# Answers that say the controller could not tell whether it applied a change (its
# metadata-store write failed or timed out): the same as no answer.
UNKNOWN_OUTCOME = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER, ErrorCode.UNKNOWN_SERVER_ERROR})
