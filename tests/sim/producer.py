"""The simulated producer. :class:`Producer` (idempotent, acks=all) gets a producer id from
the controller, numbers its batches, keeps up to ``max_in_flight`` in flight in order, and
retries a failed or unanswered batch with the same bytes until it succeeds, refreshing the
leader from the controller's metadata when told it asked the wrong replica; it reports
every acknowledged write to the history (invariant 1). With ``acks=1`` it is a plain
producer (no idempotence, no durability promise): it adds load and leader changes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from kcoord import records
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import InitProducerIdRequest, InitProducerIdResponse
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.replication import ProduceRequest, ProduceResponse

from .clients import CONTROLLER, RETRIABLE_METADATA, Client, LeaderDiscovery
from .kernel import OK
from .log_reading import is_tombstone, record_value
from .partition_history import AckedBatch

if TYPE_CHECKING:
    from .scenario import TopicSpec
    from .simulation import Simulation

E = ErrorCode


@dataclass(eq=False)
class PendingBatch:
    seq: int
    count: int
    data: bytes
    in_flight: bool = False
    acked: bool = False
    acked_offset: int = -1
    attempts: int = 0


class Producer(Client, LeaderDiscovery):
    transactional_id: str | None = None  # a transactional producer's (transactions.py)

    def __init__(
        self, sim: "Simulation", index: int, spec: "TopicSpec", partition: int, *, acks: int, max_in_flight: int, max_batch: int, keys: int = 0
    ) -> None:
        super().__init__(sim, f"client/producer{index}")
        self.spec = spec
        self.keys = keys  # > 0: keyed records (compacted topics), keys k0..k<keys-1>
        self.acks = acks
        self.idempotent = acks == -1
        self.max_in_flight = max_in_flight if self.idempotent else 1
        self.max_batch = max_batch
        self.producer_id = -1
        self.batches: list[PendingBatch] = []
        self.next_seq = 0
        self.fatal: str | None = None
        self.sends = 0
        self._retry_at = 0
        self._first_unacked = 0  # batches before it are all acknowledged
        self._in_flight = 0
        self.foreign_seqs: set[int] = set()  # sequences another writer sent under our identity (txn_verify.LateWriter)
        self._init_metadata(spec.name, partition)

    def start(self) -> None:
        if self.idempotent:
            self._ask_producer_id()
        else:
            self.producer_id = 10**9 + int(self.name.rsplit("producer", 1)[1])  # only names values
            self.refresh_metadata()

    def _ask_producer_id(self) -> None:
        self.call(CONTROLLER, InitProducerIdRequest(1), InitProducerIdResponse, self._producer_id_done)

    def _producer_id_done(self, response: Message | None, kind: str) -> None:
        if isinstance(response, InitProducerIdResponse) and response.error_code == 0:
            self.producer_id = response.producer_id
            self.sim.history.sim_producer_ids.add(self.producer_id)
            self.sim.trace(f"{self.name} got producer id {self.producer_id}")
            self.refresh_metadata()
        else:
            self.later(self.sim.config.client_backoff_ms, self._ask_producer_id)

    def _advance(self) -> None:
        while self._first_unacked < len(self.batches) and self.batches[self._first_unacked].acked:
            self._first_unacked += 1

    @property
    def idle(self) -> bool:
        self._advance()
        return self.fatal is not None or self._first_unacked == len(self.batches)

    def unacked(self) -> int:
        self._advance()
        return sum(1 for b in self.batches[self._first_unacked :] if not b.acked)

    def send_new(self) -> None:
        """The application calls send(): one new batch of 1..max_batch records."""
        if self.producer_id < 0 or self.fatal is not None:
            return
        rng = self.sim.kernel.rng
        n = rng.randint(1, self.max_batch)
        seq = self.next_seq
        self.next_seq += n
        keys = None
        values: list[bytes | None] = [record_value(self.producer_id, seq + i) for i in range(n)]
        if self.keys:
            keys = [b"k%d" % rng.randrange(self.keys) for _ in range(n)]
            values = [None if is_tombstone(seq + i) else v for i, v in enumerate(values)]
            self.sim.history.partition(self.tp).on_keys(self.producer_id, seq, keys)
        data = records.build_batch_columns(
            values,
            keys,
            timestamp_ms=max(0, self.sim.kernel.now - self.spec.clock_skew_ms) if self.keys else self.sim.kernel.now,
            producer_id=self.producer_id if self.idempotent else -1,
            producer_epoch=0 if self.idempotent else -1,
            base_sequence=seq if self.idempotent else -1,
        )
        self.batches.append(PendingBatch(seq, n, data))
        self.pump()

    def on_metadata(self) -> None:
        self.pump()

    def pump(self) -> None:
        if self.fatal is not None or self.producer_id < 0 or self.sim.kernel.now < self._retry_at or self.leader < 0:
            return
        self._advance()
        in_flight = sum(1 for b in self.batches[self._first_unacked :] if b.in_flight)
        # As a Kafka client: at most max_in_flight batches sent and not yet acked, timed-out
        # attempts included, so a retry is always among the leader's last five batches.
        for b in self.batches[self._first_unacked : self._first_unacked + self.max_in_flight]:
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
        req = ProduceRequest(
            self.topic, self.partition, b.data, acks=self.acks, timeout_ms=cfg.produce_timeout_ms, current_leader_epoch=self.leader_epoch, transactional_id=self.transactional_id
        )
        predecessors_acked = all(x.acked for x in self.batches[self._first_unacked :] if x.seq < b.seq)
        self.call(self.leader_name(), req, ProduceResponse, partial(self._done, b, self.leader, predecessors_acked), cfg.produce_timeout_ms + cfg.call_timeout_ms)

    def _done(self, b: PendingBatch, broker: int, predecessors_acked: bool, response: Message | None, kind: str) -> None:
        b.in_flight = False
        now = self.sim.kernel.now
        if isinstance(response, ProduceResponse) and response.error_code == E.NONE:
            if not b.acked:
                b.acked = True
                b.acked_offset = response.base_offset
                if self.idempotent:
                    self.sim.history.partition(self.tp).on_acked(AckedBatch(self.producer_id, b.seq, b.count, response.base_offset, now, response.leader_epoch))
            elif self.idempotent and response.base_offset >= 0 and b.acked_offset >= 0 and response.base_offset != b.acked_offset:
                self.sim.history.fail("1", now, f"{self.name} batch seq {b.seq} acked at offset {b.acked_offset} and again at {response.base_offset}")
            self.pump()
            return
        if b.acked:
            return  # a late failure of an attempt whose retry already succeeded
        code = response.error_code if isinstance(response, ProduceResponse) else None
        if self.idempotent and code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and predecessors_acked and self._deleted_below(broker):
            # Retention or DeleteRecords removed every batch we wrote: the leader rightly
            # forgot us (Kafka answers UNKNOWN_PRODUCER_ID; a producer then starts over
            # with a new epoch, KIP-360). This one stops here instead.
            self.fatal = f"{self.name}: every batch it wrote is below broker {broker}'s log start; it stops (Kafka: UNKNOWN_PRODUCER_ID)"
            self.sim.trace(self.fatal)
            return
        if self.idempotent and code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and predecessors_acked and any(s > b.seq for s in self.foreign_seqs):
            # A late write under our identity added a batch after this one: with our own
            # max_in_flight it may push this one out of the leader's window of the producer's
            # last 5 batches (Kafka's too), and the retry is then behind, not a duplicate.
            self.fatal = f"{self.name}: leader {broker} answered OUT_OF_ORDER_SEQUENCE_NUMBER for seq {b.seq}, out of its window after a late write; it stops"
            self.sim.history.late_window_stops += 1
            self.sim.trace(self.fatal)
            return
        if self.idempotent and code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and predecessors_acked and self._retry_below_log_start(b, broker):
            # A later batch of ours was acknowledged at or below the broker's log start, so this
            # one (written before it, in sequence) is below it too: a leader that rebuilt our
            # state from its log since forgot it, and its retry is behind (Kafka's too).
            self.fatal = f"{self.name}: leader {broker} answered OUT_OF_ORDER_SEQUENCE_NUMBER for seq {b.seq}, written below its log start; it stops"
            self.sim.history.deleted_retry_stops += 1
            self.sim.trace(self.fatal)
            return
        if (
            self.idempotent
            and code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
            and predecessors_acked
            and self.sim.history.partition(self.tp).forgetting.get(self.producer_id, (None,))[0] == broker
        ):
            # The leader had forgotten us (every batch of ours below its log start) and took
            # retries of our first batches as new, so it expects the sequence after them, not
            # after our last (sim seed 60942; Kafka's the same, KIP-360).
            self.fatal = f"{self.name}: leader {broker} answered OUT_OF_ORDER_SEQUENCE_NUMBER for seq {b.seq} after taking retries of deleted batches as new; it stops"
            self.sim.trace(self.fatal)
            return
        if self.idempotent and code == E.OUT_OF_ORDER_SEQUENCE_NUMBER and predecessors_acked:
            # Every earlier batch had been acknowledged when this one was sent, so the
            # leader must know our last sequence: it lost an acknowledged batch.
            self.fatal = f"{self.name}: leader {broker} answered OUT_OF_ORDER_SEQUENCE_NUMBER for seq {b.seq}, sent after every earlier batch was acked: {response.error_message}"
            self.sim.history.partition(self.tp).producer_anomalies.append((self.producer_id, self.fatal))
            self.sim.trace(self.fatal)
            return
        if not self.idempotent and kind == OK and code is not None and code not in RETRIABLE_METADATA and code not in (
            E.NOT_ENOUGH_REPLICAS,
            E.REQUEST_TIMED_OUT,
            E.OFFSET_NOT_AVAILABLE,
        ):
            b.acked = True  # a plain producer gives up on a non-retriable error
            return
        if kind != OK or code in RETRIABLE_METADATA:
            self.refresh_metadata()
        self._retry_at = now + self.sim.config.client_backoff_ms
        self.later(self.sim.config.client_backoff_ms, self.pump)

    def _deleted_below(self, broker: int) -> bool:
        """Whether every record we had acknowledged is below ``broker``'s log start."""
        last = max((x.acked_offset + x.count - 1 for x in self.batches if x.acked and x.acked_offset >= 0), default=-1)
        start = self.sim.history.partition(self.tp).log_starts.get(broker, 0)
        return 0 <= last < start

    def _retry_below_log_start(self, b: PendingBatch, broker: int) -> bool:
        """Whether a batch of ours after ``b`` was acknowledged below ``broker``'s log start
        (so ``b``, which the leader took before it, was written there too)."""
        later = [x.acked_offset for x in self.batches if x.acked and x.acked_offset >= 0 and x.seq > b.seq]
        return bool(later) and min(later) <= self.sim.history.partition(self.tp).log_starts.get(broker, 0)

    @property
    def tp(self) -> tuple[str, int]:
        return (self.topic, self.partition)
