"""The produce path on the leader: Produce's checks, idempotent batches parked until their
predecessors arrive, the append, and the answer (at once, or once committed for acks=all);
WriteTxnMarker's append (:mod:`.markers`) is answered the same way. A transactional batch
that would start a transaction is verified with its transaction coordinator first
(:mod:`.txn_verification`, KIP-890 part 1).

Record batches are never decoded here: the log validates framing and CRC and stamps base
offset and epoch into the header; the header is parsed once, in :meth:`ProducePath.produce`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ... import record
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.replication import ProduceRequest, ProduceResponse
from ...log.producer_state import NO_GUARD, VerificationGuard
from ...protocol.txn import AddPartitionsToTxnResponse, WriteTxnMarkerRequest
from ..config import LOG_APPEND_TIME
from ..context import ReplicaContext
from .checks import internal_topic_error, min_isr_error, partition_error
from . import txn_verification
from .markers import append_marker
from .watermark import HighWatermark


@dataclass
class ParkedBatch:
    request: ProduceRequest
    header: record.BatchHeader  # its batch's, parsed on arrival
    token: Any
    deadline_ms: int


MAX_PARKED_PER_PRODUCER = 16


class ProducePath:
    """Produce and WriteTxnMarker. ``appended(now_ms)`` is called after each append that
    wrote something: it wakes the followers' parked fetches and moves the HW if it can."""

    def __init__(self, state: ReplicaContext, watermark: HighWatermark, appended: Callable[[int], None]) -> None:
        self.state = state
        self.watermark = watermark
        self.appended = appended
        # Idempotent batches that arrived ahead of their predecessors, per producer id.
        self.parked: dict[int, list[ParkedBatch]] = {}
        # Transactional batches waiting for their coordinator's answer, by verify id.
        self.verifying: dict[int, txn_verification.PendingVerification] = {}

    def produce(self, req: ProduceRequest, token: Any, now_ms: int) -> None:
        st = self.state
        st.metrics["produce_requests"] += 1
        err = partition_error(st, req)
        if err is None:
            err = internal_topic_error(req)
        if err is None and req.acks not in (0, 1, -1):
            err = (ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1 (all), got {req.acks}")
        if err is None and req.acks == -1:
            err = min_isr_error(st)
        if err is not None:
            st.reply(token, ProduceResponse(err[0], err[1], leader_epoch=st.leader_epoch))
            return
        # The batch header is parsed here, once per request; what follows is handed it.
        h = record.read_header(req.records) if len(req.records) >= record.HEADER_SIZE else None
        if h is not None and self._park_if_ahead(req, h, token, now_ms):
            return
        if h is not None and h.attributes & record.TRANSACTIONAL_BIT:
            self._admit(req, h, token, now_ms)
        else:
            self._append(req, h, token, now_ms)  # the hot path: no transaction to verify

    def _admit(self, req: ProduceRequest, h: record.BatchHeader | None, token: Any, now_ms: int, attempt: int = 1) -> None:
        """Append the batch, or first verify it with its transaction coordinator when it
        would start a transaction (KIP-890; ``attempt``: the how-many-th ask for this batch,
        :func:`.txn_verification.guard_dropped`); the append then needs the guard taken here."""
        if h is None or not h.attributes & record.TRANSACTIONAL_BIT:
            self._append(req, h, token, now_ms)
            return
        if not self.state.config.transaction_partition_verification and not req.implicit_add:
            # verification off; an implicit add is still made: it is the producer's only add
            self._append(req, h, token, now_ms)
            return
        st = self.state
        ps = st.log.producer_state
        if not ps.needs_verification(h) or not ps.check(h).ok:
            # its transaction is ongoing here; or the append answers a duplicate or a refusal
            # (a stale epoch, a sequence gap) without asking anyone
            self._append(req, h, token, now_ms, NO_GUARD)
            return
        if not req.transactional_id:
            msg = f"producer {h.producer_id}: a transactional batch that would start a transaction in {st.name} needs the request's transactional_id (to verify it with its coordinator)"
            st.reply(token, ProduceResponse(ErrorCode.INVALID_TXN_STATE, msg, leader_epoch=st.leader_epoch))
            return
        txn_verification.start(st, req, h, token, self.verifying, attempt)

    def on_txn_verified(self, verify_id: int, response: AddPartitionsToTxnResponse | None, now_ms: int) -> None:
        """The coordinator's answer to verification ``verify_id``: append with the guard
        taken before asking (refused if a marker or another epoch dropped it since), or
        answer the coordinator's refusal. An id this leadership did not start is stale."""
        pending = self.verifying.pop(verify_id, None)
        if pending is None:
            return
        st = self.state
        err = txn_verification.verification_error(st, pending, response)
        if err is not None:
            st.reply(pending.token, ProduceResponse(err[0], err[1], leader_epoch=st.leader_epoch))
            return
        if txn_verification.guard_dropped(st, pending):
            # an implicit add answered after a marker dropped the guard: ask with a fresh one
            if pending.attempt < txn_verification.MAX_ASKS:
                self._admit(pending.request, pending.header, pending.token, now_ms, pending.attempt + 1)
            else:
                msg = f"producer {pending.header.producer_id}: its state in {st.name} kept changing while the partition was added to its transaction; retry"
                st.reply(pending.token, ProduceResponse(ErrorCode.NOT_ENOUGH_REPLICAS, msg, leader_epoch=st.leader_epoch))
            return
        try:
            self._append(pending.request, pending.header, pending.token, now_ms, pending.guard)
        except BaseException:
            if not st.replied(pending.token):
                st.reply(pending.token, ProduceResponse(ErrorCode.KAFKA_STORAGE_ERROR, "the log failed", leader_epoch=st.leader_epoch))
            raise

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
            self._admit(nxt.request, nxt.header, nxt.token, now_ms)
            parked = self.parked.get(producer_id)

    def _append(self, req: ProduceRequest, h: record.BatchHeader | None, token: Any, now_ms: int, guard: VerificationGuard | None = None) -> None:
        """Append the request's batch, whose header ``h`` is parsed already (None: the
        bytes are too short for one, which the log's checks report). ``guard``: the
        producer's verification guard (:meth:`_admit`), checked by the log with the append."""
        st = self.state
        data = req.records
        append_time = -1
        try:
            if st.config.message_timestamp_type == LOG_APPEND_TIME:
                h = record.validate_batch(data, header=h)  # the producer's CRC, before it is replaced
                append_time = now_ms
                data, h = record.with_log_append_time(data, now_ms, h)
            info = st.log.append_as_leader(data, st.leader_epoch, now_ms, header=h, verification_guard=guard)
        except KafkaError as exc:
            if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
                raise  # the log failed: the replica goes offline
            st.reply(token, ProduceResponse(int(exc.code), exc.message, leader_epoch=st.leader_epoch))
            return

        if not info.duplicate:
            st.metrics["produce_bytes"] += len(data)
            self.appended(now_ms)
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
        self.watermark.answer_when_committed(token, info.last_offset + 1, now_ms + max(0, req.timeout_ms), response)
        if self.parked and not info.duplicate and info.header.producer_id in self.parked:
            self._release_parked(info.header.producer_id, now_ms)

    def write_txn_marker(self, req: WriteTxnMarkerRequest, token: Any, now_ms: int) -> None:
        """A WriteTxnMarker from a transaction coordinator (:mod:`.markers`), answered as an
        acks=all produce."""
        response, required = append_marker(self.state, req, now_ms)
        if required < 0:
            self.state.reply(token, response)
        else:
            self.appended(now_ms)
            self.watermark.answer_when_committed(token, required, now_ms + max(0, req.timeout_ms), response)

    def expire(self, now_ms: int) -> None:
        """Parked batches whose wait ended are appended as they are."""
        if not self.parked:
            return
        # a producer whose earlier batch is being added by its coordinator (an implicit add
        # may be held while the previous transaction's markers are written): its batches wait on
        asking = {v.header.producer_id for v in self.verifying.values() if v.request.implicit_add}
        for producer_id in sorted(self.parked):
            if producer_id in asking:
                for b in self.parked[producer_id]:
                    b.deadline_ms = max(b.deadline_ms, now_ms + self.state.config.out_of_order_wait_ms)
                continue
            for b in [b for b in self.parked.get(producer_id, []) if b.deadline_ms <= now_ms]:
                # The gap never filled: the append now answers what the log says
                # (OUT_OF_ORDER_SEQUENCE_NUMBER), and the producer resends.
                self.parked[producer_id].remove(b)
                if not self.parked[producer_id]:
                    del self.parked[producer_id]
                self._admit(b.request, b.header, b.token, now_ms)

    def next_deadline(self) -> int | None:
        return min(b.deadline_ms for bs in self.parked.values() for b in bs) if self.parked else None

    def fail_all(self, code: int, message: str) -> None:
        st = self.state
        for batches in self.parked.values():
            for b in batches:
                st.reply(b.token, ProduceResponse(code, message, leader_epoch=st.leader_epoch))
        self.parked.clear()
        for v in self.verifying.values():
            st.reply(v.token, ProduceResponse(code, message, leader_epoch=st.leader_epoch))
        self.verifying.clear()
