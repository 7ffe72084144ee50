"""The leader role: Produce, long-poll Fetch, ListOffsets, OffsetsForLeaderEpoch, the HW,
and ISR proposals to the controller.

Record batches are never decoded here: the leader validates framing and CRC, stamps base
offset and epoch into the header, and serves bytes (or, to readers on its node, file hints).
The ISR and HW rules themselves are :mod:`kcoord.replication.isr`; what the leader keeps to
itself is who waits for what (acks=all producers, parked fetches) and the proposal in flight.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass
from typing import Any

from .. import record
from ..protocol.controller import AlterPartitionRequest, AlterPartitionResponse
from ..protocol.errors import ErrorCode, KafkaError
from ..protocol.txn import WriteTxnMarkerRequest
from ..protocol import names
from ..protocol.replication import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    FetchRequest,
    FetchResponse,
    InternalProduceRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetsForLeaderEpochRequest,
    OffsetsForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    ProducerState,
)
from .actions import SendAlterPartition
from .config import LOG_APPEND_TIME
from .isr import IsrState
from .context import ReplicaContext
from .txn_markers import append_marker

# Answers that say the controller could not tell whether it applied a change (its
# metadata-store write failed or timed out): the same as no answer.
UNKNOWN_OUTCOME = frozenset({ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_CONTROLLER, ErrorCode.UNKNOWN_SERVER_ERROR})


def _internal_topic_error(req: ProduceRequest) -> tuple[int, str] | None:
    """Only coordinators write internal topics, and only through InternalProduceRequest."""
    internal = names.is_internal_topic(req.topic)
    if internal and type(req) is not InternalProduceRequest:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, f"{req.topic!r} is an internal topic: only its coordinators write it"
    if not internal and type(req) is InternalProduceRequest:
        return ErrorCode.INVALID_REQUEST, f"{req.topic!r} is not an internal topic"
    return None


@dataclass
class ProduceWaiter:
    token: Any
    required_offset: int  # acked when HW >= this
    deadline_ms: int
    response: ProduceResponse


@dataclass
class ParkedBatch:
    request: ProduceRequest
    header: record.BatchHeader  # its batch's, parsed on arrival
    token: Any
    deadline_ms: int


MAX_PARKED_PER_PRODUCER = 16


@dataclass
class DeleteWaiter:
    token: Any
    offset: int  # answered once the partition's low watermark reaches it
    deadline_ms: int


@dataclass
class FetchWaiter:
    token: Any
    request: FetchRequest
    deadline_ms: int
    from_follower: bool


class Leader:
    def __init__(self, state: ReplicaContext, now_ms: int) -> None:
        """Take the lead at ``state.leader_epoch``. The new epoch starts at our log end even
        before we append: a follower asking where its older epoch ends is told "here". (The
        epoch checkpoint is written before anything else: if that fails the replica goes
        offline, never a leader without its state.)"""
        self.state = state
        log = state.log
        leo = log.log_end_offset
        log.epoch_cache.assign(state.leader_epoch, leo)
        state.hw = min(state.hw, leo)
        self.isr = IsrState.start(state.broker, state.leader_epoch, leo, state.replicas, state.isr, state.partition_epoch, now_ms)
        self.produce_waiters: deque[ProduceWaiter] = deque()
        self.fetch_waiters: dict[Any, FetchWaiter] = {}
        # Idempotent batches that arrived ahead of their predecessors, per producer id.
        self.parked: dict[int, list[ParkedBatch]] = {}
        self.delete_waiters: list[DeleteWaiter] = []
        self._deletes_checked_ms = now_ms  # when the low watermark was last compared with them

    # ------------------------------------------------------------------------------------
    # request validation
    # ------------------------------------------------------------------------------------
    def _epoch_error(self, current_leader_epoch: int) -> tuple[int, str] | None:
        epoch = self.state.leader_epoch
        if current_leader_epoch >= 0:
            if current_leader_epoch < epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, f"request epoch {current_leader_epoch} < leader epoch {epoch}"
            if current_leader_epoch > epoch:
                return ErrorCode.UNKNOWN_LEADER_EPOCH, f"request epoch {current_leader_epoch} > leader epoch {epoch}"
        return None

    # ------------------------------------------------------------------------------------
    # Produce
    # ------------------------------------------------------------------------------------
    def produce(self, req: ProduceRequest, token: Any, now_ms: int) -> None:
        st = self.state
        st.metrics["produce_requests"] += 1
        err = self._epoch_error(req.current_leader_epoch)
        if err is None and (req.topic != st.topic or req.partition != st.partition):
            err = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this replica holds {st.name}")
        if err is None:
            err = _internal_topic_error(req)
        if err is None and req.acks not in (0, 1, -1):
            err = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1 (all), got {req.acks}")
        if err is None and req.acks == -1 and len(st.isr) < st.config.min_insync_replicas:
            err = (
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"ISR {st.isr} has {len(st.isr)} member(s); min.insync.replicas is {st.config.min_insync_replicas}",
            )
        if err is not None:
            st.reply(token, ProduceResponse(err[0], err[1], leader_epoch=st.leader_epoch))
            return
        # The batch header is parsed here, once per request; what follows is handed it.
        h = record.read_header(req.records) if len(req.records) >= record.HEADER_SIZE else None
        if h is not None and self._park_if_ahead(req, h, token, now_ms):
            return
        self._append(req, h, token, now_ms)

    def _park_if_ahead(self, req: ProduceRequest, h: record.BatchHeader, token: Any, now_ms: int) -> bool:
        """An idempotent batch whose sequence is ahead of what its producer wrote last waits
        (a while) for the batches before it. Ray does not keep the order of calls to an
        actor, so a producer's pipelined requests may arrive out of order; answering the
        early one OUT_OF_ORDER_SEQUENCE_NUMBER would make every client resend it."""
        if h.producer_id < 0 or h.base_sequence <= 0:
            return False
        entry = self.state.log.producer_state.get(h.producer_id)
        if entry is not None:
            if h.producer_epoch < entry.epoch:
                return False
            if h.producer_epoch == entry.epoch and h.base_sequence <= entry.last_seq + 1:
                return False
        parked = self.parked.setdefault(h.producer_id, [])
        if len(parked) >= MAX_PARKED_PER_PRODUCER:
            return False
        parked.append(ParkedBatch(req, h, token, now_ms + self.state.config.out_of_order_wait_ms))
        return True

    def _release_parked(self, producer_id: int, now_ms: int) -> None:
        """Append the parked batches of ``producer_id`` that are next in sequence now."""
        parked = self.parked.get(producer_id)
        while parked:
            entry = self.state.log.producer_state.get(producer_id)
            if entry is None:
                return
            nxt = next((b for b in parked if b.header.producer_epoch == entry.epoch and b.header.base_sequence == entry.last_seq + 1), None)
            if nxt is None:
                return
            parked.remove(nxt)
            if not parked:
                del self.parked[producer_id]
            self._append(nxt.request, nxt.header, nxt.token, now_ms)
            parked = self.parked.get(producer_id)

    def _append(self, req: ProduceRequest, h: record.BatchHeader | None, token: Any, now_ms: int) -> None:
        """Append the request's batch, whose header ``h`` is parsed already (None: the
        bytes are too short for one, which the log's checks report)."""
        st = self.state
        data = req.records
        append_time = -1
        try:
            if st.config.message_timestamp_type == LOG_APPEND_TIME:
                h = record.validate_batch(data, header=h)  # the producer's CRC, before it is replaced
                append_time = now_ms
                data, h = record.with_log_append_time(data, now_ms, h)
            info = st.log.append_as_leader(data, st.leader_epoch, now_ms, header=h)
        except KafkaError as exc:
            if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
                raise  # the log failed: the replica goes offline
            st.reply(token, ProduceResponse(int(exc.code), exc.message, leader_epoch=st.leader_epoch))
            return

        if not info.duplicate:
            st.metrics["produce_bytes"] += len(data)
            self._wake_fetchers(now_ms, followers=True)
            self.maybe_advance_hw(now_ms)
        response = ProduceResponse(
            base_offset=info.base_offset,
            log_append_time=append_time,
            log_start_offset=st.log.log_start_offset,
            leader_epoch=st.leader_epoch,
            duplicate=bool(info.duplicate),
        )
        if req.acks != -1:
            st.reply(token, response)
            if self.parked and not info.duplicate:
                self._release_parked(info.header.producer_id, now_ms)
            return
        required = info.last_offset + 1
        if st.hw >= required:
            st.reply(token, self._acked(response))
        else:
            self.produce_waiters.append(ProduceWaiter(token, required, now_ms + max(0, req.timeout_ms), response))
        if self.parked and not info.duplicate and info.header.producer_id in self.parked:
            self._release_parked(info.header.producer_id, now_ms)

    def write_txn_marker(self, req: WriteTxnMarkerRequest, token: Any, now_ms: int) -> None:
        """A WriteTxnMarker from a transaction coordinator (txn_markers.py), answered as an
        acks=all produce."""
        response, required = append_marker(self.state, req, self._epoch_error(req.current_leader_epoch), now_ms)
        if required < 0:
            self.state.reply(token, response)
        else:
            self.wait_for_replication(token, required, now_ms + max(0, req.timeout_ms), response, now_ms)

    def wait_for_replication(self, token: Any, required_offset: int, deadline_ms: int, response: Any, now_ms: int) -> None:
        """Answer ``response`` once the HW reaches ``required_offset`` (an append of ours
        that must be committed before anyone hears of it, as acks=all)."""
        self._wake_fetchers(now_ms, followers=True)
        self.maybe_advance_hw(now_ms)
        if self.state.hw >= required_offset:
            self.state.reply(token, self._acked(response))
        else:
            self.produce_waiters.append(ProduceWaiter(token, required_offset, deadline_ms, response))

    def _acked(self, response: ProduceResponse) -> ProduceResponse:
        st = self.state
        if len(st.isr) < st.config.min_insync_replicas:
            return dataclasses.replace(
                response,
                error_code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                error_message=(
                    f"written, but the ISR {st.isr} shrank below min.insync.replicas="
                    f"{st.config.min_insync_replicas} before it was replicated"
                ),
            )
        return response

    # ------------------------------------------------------------------------------------
    # Fetch (consumers and followers), long-poll
    # ------------------------------------------------------------------------------------
    def fetch(self, req: FetchRequest, token: Any, now_ms: int) -> None:
        st = self.state
        st.metrics["fetch_requests"] += 1
        err = self._epoch_error(req.current_leader_epoch)
        if err is None and (req.topic != st.topic or req.partition != st.partition):
            err = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this replica holds {st.name}")
        from_follower = req.replica_id >= 0
        if err is None and from_follower and (req.replica_id not in st.replicas or req.replica_id == st.broker):
            err = (ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {req.replica_id} is not a follower of {st.name} (replicas {st.replicas})")
        if err is None and req.max_bytes <= 0:
            err = (ErrorCode.INVALID_FETCH_SIZE, f"max_bytes must be positive, got {req.max_bytes}")
        if err is None and req.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            err = (ErrorCode.INVALID_REQUEST, f"isolation_level must be 0 (read_uncommitted) or 1 (read_committed), got {req.isolation_level}")
        if err is not None:
            st.reply(token, FetchResponse(err[0], err[1], leader_epoch=st.leader_epoch))
            return
        log = st.log
        leo = log.log_end_offset
        if req.fetch_offset < log.log_start_offset or req.fetch_offset > leo:
            st.reply(
                token,
                FetchResponse(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"offset {req.fetch_offset} is outside the log [{log.log_start_offset}, {leo}] of {st.name}",
                    high_watermark=st.hw,
                    log_start_offset=log.log_start_offset,
                    log_end_offset=leo,
                    leader_epoch=st.leader_epoch,
                ),
            )
            return
        if from_follower:
            progress = self.isr.followers.get(req.replica_id)
            if progress is not None:
                progress.on_fetch(
                    req.fetch_offset,
                    leo,
                    now_ms,
                    req.replica_incarnation,
                    req.replica_storage,
                    req.replica_partition_epoch,
                    req.replica_directory_id,
                    req.replica_log_start_offset,
                )
                self.isr.heard(req.replica_id, now_ms, st.config.replica_lag_time_max_ms)
            self.maybe_advance_hw(now_ms)
            self.maybe_propose_isr(now_ms)
            self._complete_deletes(now_ms)
        waiter = FetchWaiter(token, req, now_ms + max(0, req.max_wait_ms), from_follower)
        response = self._read_for(waiter, force=req.max_wait_ms <= 0)
        if response is not None:
            st.reply(token, response)
        else:
            self.fetch_waiters[token] = waiter

    def hw_is_stale(self) -> bool:
        """A new leader's HW is the one it learned as a follower, which may lag what the
        previous leader showed consumers. Until it reaches the start of this leader's epoch
        (which every HW shown before is at most: the leader came from the ISR) it is not
        shown to consumers, so the HW they see never goes backwards across a failover."""
        return self.state.hw < self.isr.epoch_start_offset

    def _read_for(self, waiter: FetchWaiter, force: bool) -> FetchResponse | None:
        """The response for a fetch if it can be answered now (enough bytes or forced)."""
        st = self.state
        req = waiter.request
        if not waiter.from_follower and self.hw_is_stale():
            if not force:
                return None  # parked until the HW catches up (or the wait ends)
            return FetchResponse(
                ErrorCode.OFFSET_NOT_AVAILABLE,
                f"{st.name}: leader {st.broker} became leader at epoch {st.leader_epoch} "
                f"and its high watermark has not caught up yet; retry",
                leader_epoch=st.leader_epoch,
            )
        log = st.log
        if waiter.from_follower:
            max_offset = None
            lso = -1
        else:
            lso = log.last_stable_offset(st.hw)
            max_offset = lso if req.isolation_level == READ_COMMITTED else st.hw
        data = b""
        spans = None
        size = 0
        if req.fetch_offset < (log.log_end_offset if max_offset is None else max_offset):
            if st.node_id and req.node_id == st.node_id:
                spans = log.locate(req.fetch_offset, req.max_bytes, max_offset)
            if spans is None:
                data = log.read(req.fetch_offset, req.max_bytes, max_offset)
                size = len(data)
            else:
                size = sum(span[2] for span in spans)
        if not force and size < max(1, req.min_bytes):
            return None
        st.metrics["fetch_bytes"] += size
        aborted = None
        if req.isolation_level == READ_COMMITTED and not waiter.from_follower and size:
            aborted = [(e.producer_id, e.first_offset) for e in log.txn_index.collect(req.fetch_offset, lso)]
        return FetchResponse(
            high_watermark=st.hw,
            log_start_offset=log.log_start_offset,
            log_end_offset=log.log_end_offset,
            leader_epoch=st.leader_epoch,
            records=data,
            file_hint=spans or None,
            last_stable_offset=lso,
            aborted_transactions=aborted,
        )

    def _wake_fetchers(self, now_ms: int, *, followers: bool, force: bool = False) -> None:
        """Answer the parked fetches of followers (or of consumers) that can be answered
        now; ``force``: all of them, with whatever there is."""
        if not self.fetch_waiters:
            return
        for token, w in list(self.fetch_waiters.items()):
            if w.from_follower != followers:
                continue
            response = self._read_for(w, force=force)
            if response is not None:
                del self.fetch_waiters[token]
                self.state.reply(token, response)

    # ------------------------------------------------------------------------------------
    # HW and ISR
    # ------------------------------------------------------------------------------------
    def maybe_advance_hw(self, now_ms: int) -> None:
        st = self.state
        if st.log.config.flush_messages != 1 and len(self.isr.isr) < st.config.min_insync_replicas:
            # KIP-966: below min.insync.replicas the HW stands still on topics that do not
            # fsync every append. Their election falls back to the ELR (who left the ISR
            # while it was too small), which holds everything below the HW only if the HW
            # did not move without them; a consumer must not read what a failover undoes.
            # The committed ISR counts, not the maximal one: a member whose addition the
            # controller has not confirmed is in neither its ISR nor its ELR, so an
            # election there could not pick it.
            return
        candidate = self.isr.high_watermark_candidate(st.log.log_end_offset)
        if candidate <= st.hw:
            return
        st.hw = candidate
        while self.produce_waiters and self.produce_waiters[0].required_offset <= candidate:
            w = self.produce_waiters.popleft()
            st.reply(w.token, self._acked(w.response))
        self._wake_fetchers(now_ms, followers=False)

    def maybe_propose_isr(self, now_ms: int) -> None:
        st = self.state
        isr = self.isr
        if isr.alter_request is not None or now_ms < isr.retry_alter_at_ms:
            return
        isr.retry_alter_at_ms = 0  # the backoff is over (a stale value would be a past deadline)
        proposal = isr.proposed_isr(st.log.log_end_offset, st.hw, now_ms, st.config.replica_lag_time_max_ms, st.log.log_start_offset)
        if proposal is None:
            return
        request = AlterPartitionRequest(
            topic=st.topic,
            partition=st.partition,
            leader=st.broker,
            leader_epoch=st.leader_epoch,
            partition_epoch=st.partition_epoch,
            new_isr=proposal,
            incarnations={b: p.incarnation for b, p in isr.followers.items() if b in proposal and p.incarnation},
            config_version=st.config_version,
        )
        isr.admit(request)  # a pending addition counts for the HW (KIP-497), from that process only
        isr.pending_isr = proposal
        isr.alter_request = request
        st.emit(SendAlterPartition(request))

    def on_alter_partition_response(self, request: AlterPartitionRequest, response: AlterPartitionResponse | None, now_ms: int) -> None:
        """The answer to our AlterPartition ``request``; None means the controller could
        not be reached (or could not say whether it applied the change)."""
        st = self.state
        isr = self.isr
        if isr.alter_request is not request:
            return  # an answer to a proposal we no longer wait for
        isr.alter_request = None
        isr.pending_isr = None
        if response is not None and response.error_code in UNKNOWN_OUTCOME:
            response = None
        if response is None:
            # Unknown outcome: the controller may have applied it. Its members keep counting
            # for the HW until a LeaderAndIsr or an answer tells the truth.
            isr.unconfirmed = sorted(set(isr.unconfirmed) | set(request.new_isr))
        newer = (
            response is not None
            and response.leader == st.broker
            and response.leader_epoch == st.leader_epoch
            and response.partition_epoch > st.partition_epoch
        )
        if response is None or response.error_code != ErrorCode.NONE:
            # Fenced or stale partition epoch: retry later with a fresh proposal. An answer
            # that carries a newer state of our own leadership is the truth all the same --
            # a duplicate of this very request may have been applied (Kafka's idempotent
            # AlterPartition), and the controller may have changed the ISR since -- so it
            # is adopted like a LeaderAndIsr rather than guessed at.
            isr.retry_alter_at_ms = now_ms + st.config.alter_partition_backoff_ms
            if not newer:
                return
        elif not newer:
            return
        assert response is not None
        old, new = set(st.isr), set(response.isr)
        if new - old:
            st.metrics["isr_expands"] += 1
            isr.isr_expands += 1
        if old - new:
            st.metrics["isr_shrinks"] += 1
            isr.isr_shrinks += 1
        st.isr = list(response.isr)
        st.partition_epoch = response.partition_epoch
        if response.error_code == ErrorCode.NONE:
            isr.admit(request)
        changed = isr.adopt_isr(response.isr)
        isr.unconfirmed = []  # the controller's whole ISR as of now: nothing left to guess
        isr.partition_epoch = response.partition_epoch
        if changed:
            # their LEOs count for the HW again only after a new fetch (see isr.py); a
            # parked fetch would hold the HW until its wait ends, and proves nothing about
            # the follower's process today (it may have lost power since sending it)
            self._wake_fetchers(now_ms, followers=True, force=True)
        self.maybe_advance_hw(now_ms)
        self._complete_deletes(now_ms)  # a member that left counts no more
        if response.error_code == ErrorCode.NONE:
            self.maybe_propose_isr(now_ms)

    def on_assignment(self, now_ms: int) -> None:
        """A LeaderAndIsr at our epoch with a newer partition epoch (the controller changed
        the ISR or the replicas): adopt it and drop any proposal built on the old view."""
        st = self.state
        if self.isr.update_from_controller(st.isr, st.replicas, st.partition_epoch, now_ms):
            self._wake_fetchers(now_ms, followers=True, force=True)  # as in on_alter_partition_response
        self.maybe_advance_hw(now_ms)
        self._complete_deletes(now_ms)

    # ------------------------------------------------------------------------------------
    # queries
    # ------------------------------------------------------------------------------------
    def delete_records(self, req: DeleteRecordsRequest, token: Any, now_ms: int) -> None:
        """Kafka's DeleteRecords: move the log start offset up to ``req.offset`` (-1: the HW),
        never above the HW -- what consumers cannot see yet may still be cut by a failover.
        Followers follow from the log start offset in their fetch answers (as for
        retention). Answered (with the low watermark) once the partition's low watermark
        has reached the offset -- before, a failover could make the records readable again
        (Kafka's DelayedDeleteRecords) -- or REQUEST_TIMED_OUT after ``req.timeout_ms``."""
        refused = self._delete_records(req)
        if refused is not None:
            self.state.reply(token, refused)
            return
        offset = self.state.hw if req.offset == -1 else req.offset
        self.delete_waiters.append(DeleteWaiter(token, offset, now_ms + max(0, req.timeout_ms)))
        self._complete_deletes(now_ms)

    def low_watermark(self, now_ms: int) -> int:
        st = self.state
        cfg = st.config
        return self.isr.low_watermark(st.log.log_start_offset, now_ms, cfg.replica_lag_time_max_ms, cfg.min_insync_replicas)

    def _complete_deletes(self, now_ms: int) -> None:
        if not self.delete_waiters:
            return
        self._deletes_checked_ms = now_ms
        low = self.low_watermark(now_ms)
        st = self.state
        waiting = []
        for w in self.delete_waiters:
            if low >= w.offset:
                st.reply(w.token, DeleteRecordsResponse(low_watermark=low, leader_epoch=st.leader_epoch))
            else:
                waiting.append(w)
        self.delete_waiters = waiting

    def _delete_records(self, req: DeleteRecordsRequest) -> DeleteRecordsResponse | None:
        """Validate, and move the leader's log start; a refusal, or None."""
        st = self.state
        err = self._epoch_error(req.current_leader_epoch)
        if err is None and (req.topic != st.topic or req.partition != st.partition):
            err = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this replica holds {st.name}")
        if err is None and names.is_internal_topic(st.topic):
            err = (ErrorCode.POLICY_VIOLATION, f"records of internal topic {st.topic!r} are its coordinators' state and cannot be deleted")
        if err is None and self.hw_is_stale():
            err = (ErrorCode.OFFSET_NOT_AVAILABLE, f"leader {st.broker} of {st.name} has not caught its high watermark up yet; retry")
        offset = st.hw if req.offset == -1 else req.offset
        if err is None and not 0 <= offset <= st.hw:
            err = (ErrorCode.OFFSET_OUT_OF_RANGE, f"cannot delete records of {st.name} before offset {req.offset}: it must be in [0, {st.hw}] (the high watermark), or -1 for the high watermark")
        if err is not None:
            return DeleteRecordsResponse(err[0], err[1], leader_epoch=st.leader_epoch)
        st.log.advance_log_start_offset(offset)
        return None

    def list_offsets(self, req: ListOffsetsRequest, token: Any, now_ms: int) -> None:
        self.state.reply(token, self._list_offsets(req))

    def _list_offsets(self, req: ListOffsetsRequest) -> ListOffsetsResponse:
        st = self.state
        err = self._epoch_error(req.current_leader_epoch)
        if err is None and req.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            err = (ErrorCode.INVALID_REQUEST, f"isolation_level must be 0 (read_uncommitted) or 1 (read_committed), got {req.isolation_level}")
        if err is not None:
            return ListOffsetsResponse(err[0], err[1], leader_epoch=st.leader_epoch)
        log = st.log
        if req.timestamp == EARLIEST_TIMESTAMP:
            return ListOffsetsResponse(offset=log.log_start_offset, leader_epoch=st.leader_epoch)
        if self.hw_is_stale():
            return ListOffsetsResponse(
                ErrorCode.OFFSET_NOT_AVAILABLE,
                f"leader {st.broker} of {st.name} has not caught its high watermark up yet; retry",
                leader_epoch=st.leader_epoch,
            )
        visible = log.last_stable_offset(st.hw) if req.isolation_level == READ_COMMITTED else st.hw
        if req.timestamp == LATEST_TIMESTAMP:
            return ListOffsetsResponse(offset=visible, leader_epoch=st.leader_epoch)
        if req.timestamp < 0:
            return ListOffsetsResponse(ErrorCode.INVALID_REQUEST, f"timestamp {req.timestamp} is not -1, -2 or >= 0")
        found = log.offset_for_timestamp(req.timestamp)
        if found is None or found[0] >= visible:
            return ListOffsetsResponse(offset=-1, timestamp=-1, leader_epoch=st.leader_epoch)
        return ListOffsetsResponse(offset=found[0], timestamp=found[1], leader_epoch=st.leader_epoch)

    def offsets_for_leader_epoch(self, req: OffsetsForLeaderEpochRequest, token: Any, now_ms: int) -> None:
        st = self.state
        err = self._epoch_error(req.current_leader_epoch)
        if err is not None:
            st.reply(token, OffsetsForLeaderEpochResponse(err[0], err[1]))
            return
        epoch, end = st.log.epoch_cache.end_offset_for(req.leader_epoch, st.log.log_end_offset)
        st.reply(token, OffsetsForLeaderEpochResponse(leader_epoch=epoch, end_offset=end))

    def describe_producers(self, req: DescribeProducersRequest, token: Any, now_ms: int) -> None:
        """Kafka's DescribeProducers: each idempotent producer's epoch and last sequence, with
        the HW, below which they are committed."""
        st = self.state
        err = self._epoch_error(req.current_leader_epoch)
        if err is not None:
            st.reply(token, DescribeProducersResponse(err[0], err[1], leader_epoch=st.leader_epoch))
            return
        state = st.log.producer_state
        wanted = state.producer_ids() if req.producer_ids is None else req.producer_ids
        found = []
        for pid in wanted:
            entry = state.get(pid)
            if entry is not None and (entry.batches or entry.txn_first_offset >= 0 or entry.coordinator_epoch >= 0):
                last = entry.batches[-1].last_offset if entry.batches else -1
                found.append(ProducerState(pid, entry.epoch, entry.last_seq, last, entry.coordinator_epoch, entry.txn_first_offset))
        st.reply(token, DescribeProducersResponse(producers=found, high_watermark=st.hw, leader_epoch=st.leader_epoch))

    # ------------------------------------------------------------------------------------
    # timers and stepping down
    # ------------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> None:
        st = self.state
        if self.produce_waiters:
            kept: deque[ProduceWaiter] = deque()
            for w in self.produce_waiters:
                if w.deadline_ms <= now_ms:
                    st.reply(
                        w.token,
                        type(w.response)(
                            ErrorCode.REQUEST_TIMED_OUT,
                            f"offset {w.required_offset - 1} not replicated to the ISR {st.isr} in time (HW {st.hw})",
                            leader_epoch=st.leader_epoch,
                        ),
                    )
                else:
                    kept.append(w)
            self.produce_waiters = kept
        if self.fetch_waiters:
            # When one follower's fetch is due, the others' due within a quarter of their
            # wait are answered with it (early and empty, as a fetch may always be): an idle
            # leader's followers then fetch in step, and it wakes once per round for all of
            # them instead of once per follower (an idle partition's cost is its wake-ups).
            followers_due = any(w.from_follower and w.deadline_ms <= now_ms for w in self.fetch_waiters.values())
            for token, w in list(self.fetch_waiters.items()):
                if w.deadline_ms <= now_ms or (
                    followers_due and w.from_follower and w.deadline_ms - now_ms <= w.request.max_wait_ms // 4
                ):
                    del self.fetch_waiters[token]
                    response = self._read_for(w, force=True)
                    assert response is not None
                    st.reply(token, response)
        if self.delete_waiters:
            self._complete_deletes(now_ms)  # a follower that stopped fetching counts no more
            for w in [w for w in self.delete_waiters if w.deadline_ms <= now_ms]:
                self.delete_waiters.remove(w)
                st.reply(
                    w.token,
                    DeleteRecordsResponse(
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"{st.name}: records before {w.offset} are deleted on the leader, but the low watermark "
                        f"(the smallest log start over the replicas that could be elected) did not reach it in time",
                        leader_epoch=st.leader_epoch,
                    ),
                )
        if self.parked:
            for producer_id in sorted(self.parked):
                for b in [b for b in self.parked.get(producer_id, []) if b.deadline_ms <= now_ms]:
                    # The gap never filled: the append now answers what the log says
                    # (OUT_OF_ORDER_SEQUENCE_NUMBER), and the producer resends.
                    self.parked[producer_id].remove(b)
                    if not self.parked[producer_id]:
                        del self.parked[producer_id]
                    self._append(b.request, b.header, b.token, now_ms)
        self.maybe_propose_isr(now_ms)

    def next_deadline(self) -> int | None:
        deadlines: list[int] = []
        if self.produce_waiters:
            deadlines.append(min(w.deadline_ms for w in self.produce_waiters))
        if self.fetch_waiters:
            deadlines.append(min(w.deadline_ms for w in self.fetch_waiters.values()))
        if self.parked:
            deadlines.append(min(b.deadline_ms for bs in self.parked.values() for b in bs))
        isr = self.isr
        if self.delete_waiters:
            deadlines.append(min(w.deadline_ms for w in self.delete_waiters))
            # a follower counted for fetching lately that stops fetching counts no more
            change = isr.next_liveness_change(self._deletes_checked_ms, self.state.config.replica_lag_time_max_ms)
            if change is not None:
                deadlines.append(change)
        if isr.alter_request is None:
            # Only what tick() can act on: while an AlterPartition is in flight nothing can be
            # proposed, and during a backoff nothing before it ends (a past deadline here
            # makes the driver's timer spin).
            lag = isr.next_lag_deadline(self.state.config.replica_lag_time_max_ms)
            if lag is not None:
                deadlines.append(max(lag, isr.retry_alter_at_ms))
            if isr.retry_alter_at_ms:
                deadlines.append(isr.retry_alter_at_ms)
        return min(deadlines) if deadlines else None

    def step_down(self, code: int, message: str) -> None:
        """Leadership moved (or the log failed): every pending produce and fetch gets
        ``code`` now (an idempotent producer's retry is deduplicated by whoever leads next)."""
        st = self.state
        while self.produce_waiters:
            w = self.produce_waiters.popleft()
            st.reply(w.token, type(w.response)(code, message, leader_epoch=st.leader_epoch))
        for w in self.fetch_waiters.values():
            st.reply(w.token, FetchResponse(code, message, leader_epoch=st.leader_epoch))
        self.fetch_waiters.clear()
        for batches in self.parked.values():
            for b in batches:
                st.reply(b.token, ProduceResponse(code, message, leader_epoch=st.leader_epoch))
        self.parked.clear()
        for d in self.delete_waiters:
            st.reply(d.token, DeleteRecordsResponse(code, message, leader_epoch=st.leader_epoch))
        self.delete_waiters.clear()

    def heard(self, now_ms: int) -> dict[int, tuple[int, int, str, str, int, str]]:
        """What this leader can vouch for each follower that fetched in its leadership
        (HeartbeatResponse.followers_heard): how long ago its latest fetch arrived -- 0
        while a fetch of that process is parked here, since a follower in a long poll
        is as alive as one answering a heartbeat -- and what that fetch said of it."""
        parked = {
            (w.request.replica_id, w.request.replica_incarnation) for w in self.fetch_waiters.values() if w.from_follower
        }
        out: dict[int, tuple[int, int, str, str, int, str]] = {}
        for b, p in self.isr.followers.items():
            if p.last_fetch_ms < 0:
                continue
            ago = 0 if (b, p.incarnation) in parked else max(0, now_ms - p.last_fetch_ms)
            out[b] = (ago, p.log_end_offset, p.incarnation, p.storage, p.partition_epoch, p.directory_id)
        return out

    def parked_fetches(self) -> dict[str, int]:
        """Long-poll fetches waiting for data, by kind (for operators and tests)."""
        followers = sum(1 for w in self.fetch_waiters.values() if w.from_follower)
        return {"followers": followers, "consumers": len(self.fetch_waiters) - followers}
