"""The produce path on the leader: Produce's checks, idempotent batches parked until their
predecessors arrive, the append, and the answer (at once, or once committed for acks=all);
WriteTxnMarker's append (:mod:`.markers`) is answered the same way.

Record batches are never decoded here: the log validates framing and CRC and stamps base
offset and epoch into the header; the header is parsed once, in :meth:`ProducePath.produce`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ... import record
from ...protocol.errors import ErrorCode, KafkaError
from ...protocol.replication import ProduceRequest, ProduceResponse
from ...protocol.txn import WriteTxnMarkerRequest
from ..config import LOG_APPEND_TIME
from ..context import ReplicaContext
from .checks import internal_topic_error, min_isr_error, partition_error
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
        for producer_id in sorted(self.parked):
            for b in [b for b in self.parked.get(producer_id, []) if b.deadline_ms <= now_ms]:
                # The gap never filled: the append now answers what the log says
                # (OUT_OF_ORDER_SEQUENCE_NUMBER), and the producer resends.
                self.parked[producer_id].remove(b)
                if not self.parked[producer_id]:
                    del self.parked[producer_id]
                self._append(b.request, b.header, b.token, now_ms)

    def next_deadline(self) -> int | None:
        return min(b.deadline_ms for bs in self.parked.values() for b in bs) if self.parked else None

    def fail_all(self, code: int, message: str) -> None:
        st = self.state
        for batches in self.parked.values():
            for b in batches:
                st.reply(b.token, ProduceResponse(code, message, leader_epoch=st.leader_epoch))
        self.parked.clear()
