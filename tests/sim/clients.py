"""Simulated clients: an idempotent producer with acks=all, and a consumer.

The producer behaves as an idempotent Kafka producer: it gets a producer id from the
controller, numbers its batches per partition, keeps up to ``max_in_flight`` batches in
flight in order, and retries a failed or unanswered batch with the *same* producer id, epoch
and sequence (the same bytes) until it succeeds, refreshing the leader from the controller's
metadata when told it asked the wrong replica or got no answer. A success (error code 0) is
an acknowledgement the system must honour (invariant 1); the history keeps each one.

The consumer reads from the leader with long polls, and reports every batch it was served
with the HW it was served under (invariant 4).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from kcoord import records
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import FetchRequest, FetchResponse, ProduceRequest, ProduceResponse

from .checks import AckedBatch, record_value
from .kernel import OK
from .nodes import CONTROLLER, TOPIC, replica_name

if TYPE_CHECKING:
    from .simulation import Simulation


class _MetadataClient:
    """Leader discovery through the controller's Metadata API (what ClusterClient does)."""

    name: str
    sim: "Simulation"
    up = True
    incarnation = 1

    def _init_metadata(self) -> None:
        self.leader = -1
        self.leader_epoch = -1
        self._metadata_in_flight = False
        self._metadata_wanted = False

    def refresh_metadata(self) -> None:
        if self._metadata_in_flight:
            self._metadata_wanted = True
            return
        self._metadata_in_flight = True
        self._metadata_wanted = False
        self.sim.net.call(self, CONTROLLER, "metadata", MetadataRequest([TOPIC]), MetadataResponse, self._metadata_done, self.sim.config.call_timeout_ms)

    def _metadata_done(self, response: Message | None, kind: str) -> None:
        self._metadata_in_flight = False
        if isinstance(response, MetadataResponse) and response.topics and response.topics[0].partitions:
            p = response.topics[0].partitions[0]
            if p.leader_epoch >= self.leader_epoch:
                self.leader, self.leader_epoch = p.leader, p.leader_epoch
        if self._metadata_wanted or self.leader < 0:
            self.sim.kernel.after(self.sim.config.client_backoff_ms, self.refresh_metadata)
        self.on_metadata()

    def on_metadata(self) -> None:
        raise NotImplementedError


@dataclass(eq=False)
class PendingBatch:
    seq: int
    count: int
    data: bytes
    in_flight: bool = False
    acked: bool = False
    acked_offset: int = -1
    attempts: int = 0


RETRIABLE_METADATA = (
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.LEADER_NOT_AVAILABLE,
)


class Producer(_MetadataClient):
    def __init__(self, sim: "Simulation", index: int, max_in_flight: int, max_batch: int) -> None:
        self.sim = sim
        self.name = f"p{index}"
        self.max_in_flight = max_in_flight
        self.max_batch = max_batch
        self.producer_id = -1
        self.batches: list[PendingBatch] = []
        self.next_seq = 0
        self.fatal: str | None = None
        self.sends = 0
        self._retry_at = 0
        self._init_metadata()

    def start(self) -> None:
        self._ask_producer_id()

    def _ask_producer_id(self) -> None:
        self.sim.net.call(
            self, CONTROLLER, "init_producer_id", InitProducerIdRequest(1), InitProducerIdResponse, self._producer_id_done, self.sim.config.call_timeout_ms
        )

    def _producer_id_done(self, response: Message | None, kind: str) -> None:
        if isinstance(response, InitProducerIdResponse) and response.error_code == 0:
            self.producer_id = response.producer_id
            self.sim.trace(f"{self.name} got producer id {self.producer_id}")
            self.refresh_metadata()
        else:
            self.sim.kernel.after(self.sim.config.client_backoff_ms, self._ask_producer_id)

    @property
    def idle(self) -> bool:
        return self.fatal is not None or all(b.acked for b in self.batches)

    def unacked(self) -> int:
        return sum(1 for b in self.batches if not b.acked)

    # -- producing --------------------------------------------------------------------------
    def send_new(self) -> None:
        """Queue one new batch of 1..max_batch records (the application called send())."""
        if self.producer_id < 0 or self.fatal is not None:
            return
        n = self.sim.kernel.rng.randint(1, self.max_batch)
        seq = self.next_seq
        self.next_seq += n
        data = records.build_batch_columns(
            [record_value(self.producer_id, seq + i) for i in range(n)],
            timestamp_ms=self.sim.kernel.now,
            producer_id=self.producer_id,
            producer_epoch=0,
            base_sequence=seq,
        )
        self.batches.append(PendingBatch(seq, n, data))
        self.pump()

    def on_metadata(self) -> None:
        self.pump()

    def pump(self) -> None:
        """Send batches in sequence order, at most ``max_in_flight`` at a time."""
        if self.fatal is not None or self.producer_id < 0:
            return
        now = self.sim.kernel.now
        if now < self._retry_at:
            return
        if self.leader < 0:
            return  # offline or unknown: a metadata refresh is already scheduled
        in_flight = sum(1 for b in self.batches if b.in_flight)
        for b in self.batches:
            if in_flight >= self.max_in_flight:
                break
            if b.acked or b.in_flight:
                continue
            self._send(b)
            in_flight += 1

    def _send(self, b: PendingBatch) -> None:
        cfg = self.sim.config
        b.in_flight = True
        b.attempts += 1
        self.sends += 1
        req = ProduceRequest(TOPIC, 0, b.data, acks=-1, timeout_ms=cfg.produce_timeout_ms, current_leader_epoch=self.leader_epoch)
        predecessors_acked = all(x.acked for x in self.batches if x.seq < b.seq)
        self.sim.net.call(
            self,
            replica_name(self.leader),
            "produce",
            req,
            ProduceResponse,
            partial(self._done, b, self.leader, predecessors_acked),
            cfg.produce_timeout_ms + cfg.call_timeout_ms,
        )

    def _done(self, b: PendingBatch, broker: int, predecessors_acked: bool, response: Message | None, kind: str) -> None:
        b.in_flight = False
        now = self.sim.kernel.now
        if isinstance(response, ProduceResponse) and response.error_code == ErrorCode.NONE:
            if not b.acked:
                b.acked = True
                b.acked_offset = response.base_offset
                self.sim.history.on_acked(AckedBatch(self.producer_id, b.seq, b.count, response.base_offset, now))
            elif response.base_offset >= 0 and b.acked_offset >= 0 and response.base_offset != b.acked_offset:
                self.sim.history.fail("1", now, f"{self.name} batch seq {b.seq} acked at offset {b.acked_offset} and again at {response.base_offset}")
            self.pump()
            return
        if b.acked:
            return  # a late failure of an attempt whose retry already succeeded
        code = response.error_code if isinstance(response, ProduceResponse) else None
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and predecessors_acked:
            # Every earlier batch had been acknowledged when this one was sent, so the
            # leader must know our last sequence: it lost an acknowledged batch (or its
            # producer state). With earlier batches still in flight, this one merely
            # overtook them and is retried.
            self.fatal = f"{self.name}: leader {broker} answered OUT_OF_ORDER_SEQUENCE_NUMBER for seq {b.seq}, sent after every earlier batch was acked: {response.error_message}"
            self.sim.history.producer_anomalies.append(self.fatal)
            self.sim.trace(self.fatal)
            return
        if kind != OK or code in RETRIABLE_METADATA:
            self.refresh_metadata()
        # Every other error (NOT_ENOUGH_REPLICAS[_AFTER_APPEND], REQUEST_TIMED_OUT, ...) is
        # retriable for an idempotent producer: the retry is deduplicated.
        self._retry_at = now + self.sim.config.client_backoff_ms
        self.sim.kernel.after(self.sim.config.client_backoff_ms, self.pump)


class Consumer(_MetadataClient):
    def __init__(self, sim: "Simulation", index: int) -> None:
        self.sim = sim
        self.name = f"c{index}"
        self.position = 0
        self.fetches = 0
        self._fetching = False
        self._init_metadata()

    def start(self) -> None:
        self.refresh_metadata()

    def on_metadata(self) -> None:
        self.poll()

    def poll(self) -> None:
        if self._fetching or self.leader < 0:
            return  # a leaderless partition: a metadata refresh is already scheduled
        cfg = self.sim.config
        self._fetching = True
        self.fetches += 1
        req = FetchRequest(TOPIC, 0, self.position, max_bytes=1 << 16, max_wait_ms=cfg.consumer_wait_ms, current_leader_epoch=self.leader_epoch)
        self.sim.net.call(self, replica_name(self.leader), "fetch", req, FetchResponse, partial(self._done, self.leader), cfg.consumer_wait_ms + cfg.call_timeout_ms)

    def _done(self, broker: int, response: Message | None, kind: str) -> None:
        self._fetching = False
        sim = self.sim
        if isinstance(response, FetchResponse) and response.error_code == ErrorCode.NONE:
            if response.records:
                sim.history.on_consumer_fetch(broker, response.high_watermark, response.records, sim.kernel.now)
                last = None
                for _, h in records.iter_headers(response.records):
                    last = h
                if last is not None:
                    self.position = max(self.position, last.next_offset)
            self.poll()
            return
        if isinstance(response, FetchResponse) and response.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            # Our position is beyond the leader's log: what we read there is gone.
            sim.trace(f"{self.name}: position {self.position} out of range at broker {broker} (LEO {response.log_end_offset})")
            self.position = max(0, min(self.position, response.high_watermark))
        elif kind != OK or (isinstance(response, FetchResponse) and response.error_code in RETRIABLE_METADATA):
            self.refresh_metadata()
        sim.kernel.after(sim.config.client_backoff_ms, self.poll)
