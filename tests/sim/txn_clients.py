"""Transactional applications in the simulation, talking to the transaction coordinators.

A :class:`TxnApp` is one process (instance) of a transactional id ``tx<i>``: kcoord's own
client state machine (:class:`kcoord.client.producer.transaction_manager.TransactionManager`,
the one ``kcoord.Producer`` runs) decides what to send and what an answer means; this class
only carries the requests: InitProducerId to the id's coordinator, AddPartitionsToTxn before
the first batch to a partition (or none: an id with implicit adds, as ``kcoord.Producer``,
sends its batches at once marked ``implicit_add`` and the leaders add the partitions, KIP-890
part 2; with ``IMPLICIT_ADDS``, the default: id 0 always, id 1 on odd seeds), transactional
Produce to the partition leaders (one batch in flight per partition, sequences per producer
id, epoch and partition), AddOffsetsToTxn and TxnOffsetCommit to the group's coordinator
(groups runs), and EndTxn (commit about two times in three, abort otherwise, and always after
an abortable error), retried until answered.

What the harness does to them (a side generator seeded by the seed and the id):

* **zombies**: now and then a new instance of the id starts while the old one keeps working;
  the old one is fenced (its next transactional request, or a batch, is refused) and stops;
* **crashed instances**: an instance stops dead in a transaction; the next starts later
  (the coordinator aborts the transaction: the new InitProducerId, or the timeout);
* **delayed EndTxn** (KAFKA-17754): a copy of a transaction's EndTxn is sent again after the
  next transaction began;
* **wire clients at EndTxn v0-3**: with ``WIRE_V0_3_EVERY`` an id ends transactions without
  the epoch bump (``bump_epoch=False``), as librdkafka and kafka-python do before KIP-890
  part 2 (off in the sweep; the window test turns it on).

Every record value names its transaction (``T<id>.<instance>.<txn>.<n>``), so the final logs
say which transaction each record belongs to (``txn_ledger.py`` checks them).
"""

from __future__ import annotations

import dataclasses
import random
from functools import partial
from typing import TYPE_CHECKING, Any

from kcoord import records
from kcoord.client.producer.transaction_manager import TransactionManager, TransactionState, Verdict
from kcoord.client.types import TopicPartition
from kcoord.group import coordinator_for as group_coordinator_for
from kcoord.protocol import names
from kcoord.protocol.codec import Message
from kcoord.protocol.controller import MetadataRequest, MetadataResponse
from kcoord.protocol.errors import ErrorCode as E
from kcoord.protocol.errors import KafkaError
from kcoord.protocol.group import OffsetCommitPartition
from kcoord.protocol.replication import ProduceRequest, ProduceResponse
from kcoord.protocol.txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnInitProducerIdRequest,
    TxnInitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kcoord.txn.placement import coordinator_for

from .clients import METHOD, RETRIABLE_METADATA, RETRIABLE_WRITE, Client
from .kernel import OK
from .processes import CLUSTER

if TYPE_CHECKING:
    from .simulation import Simulation
    from .txn_ledger import AppLedger

METHOD.setdefault(TxnInitProducerIdRequest, "init_producer_id")
METHOD.setdefault(AddPartitionsToTxnRequest, "add_partitions_to_txn")
METHOD.setdefault(AddOffsetsToTxnRequest, "add_offsets_to_txn")
METHOD.setdefault(EndTxnRequest, "end_txn")
METHOD.setdefault(TxnOffsetCommitRequest, "txn_offset_commit")

TIMEOUT_MS = 4_000  # transaction.timeout.ms of every app
BATCH_DEADLINE_MS = 3_000  # a batch unacknowledged this long fails (delivery.timeout.ms)
IN_TOPIC = "txn-app-in"  # the input topic whose offsets the transactions commit (never read)
# A delayed EndTxn of a wire client at EndTxn v0-3 (no epoch bump) ends whatever transaction
# is ongoing at that epoch: Kafka's KAFKA-17754 window (docs/transactions.md). Off in the
# sweep; test_simulation turns it on to show the window.
STALE_END_WITHOUT_BUMP = False
# Every n-th transactional id ends its transactions without the bump, as a wire client at
# EndTxn v0-3 does (0: none). Off in the sweep for now: its seeds were checked without it
# (the planted-defect seeds of test_txn_world.py); the window test turns it on.
WIRE_V0_3_EVERY = 0
# Ids with implicit adds (KIP-890 part 2, kcoord.Producer's path): id 0, and id 1 on odd
# seeds; id 1 on even seeds adds explicitly (wire clients' path). False: every id adds
# explicitly (a test of the explicit path turns it off).
IMPLICIT_ADDS = True
RETRY_PRODUCE = (*RETRIABLE_WRITE, E.CONCURRENT_TRANSACTIONS)


def record_value(tid: str, instance: int, txn: int, n: int) -> bytes:
    return f"T{tid}.{instance}.{txn}.{n}".encode()


def parse_value(value: Any) -> tuple[str, int, int] | None:
    """The transaction (id, instance, txn) a record value names, or None."""
    if not isinstance(value, bytes) or not value.startswith(b"T"):
        return None
    try:
        tid, instance, txn, _ = value[1:].decode().split(".")
        return tid, int(instance), int(txn)
    except ValueError:
        return None


@dataclasses.dataclass
class Batch:
    tp: tuple[str, int]
    values: list[bytes]
    data: bytes = b""
    in_flight: bool = False
    acked: bool = False
    first_sent: int = -1


class TxnApp(Client):
    """One instance of a transactional id (see the module doc)."""

    def __init__(self, sim: "Simulation", slot: "TxnSlot", instance: int) -> None:
        super().__init__(sim, f"client/{slot.tid}.{instance}")
        self.slot = slot
        self.tid = slot.tid
        self.instance = instance
        self.side = slot.side
        self.ledger: "AppLedger" = slot.ledger
        self.tm = TransactionManager(self.tid, TIMEOUT_MS, implicit_adds=slot.implicit)
        self.coordinator = names.transaction_coordinator(CLUSTER, coordinator_for(self.tid, slot.tc_count))
        self.coordinator_index = coordinator_for(self.tid, slot.tc_count)
        self.leaders: dict[tuple[str, int], tuple[int, int]] = {}
        self.sequences: dict[tuple[int, int, tuple[str, int]], int] = {}
        self.txn = 0
        self.batches: list[Batch] = []
        self.offsets: dict[int, int] = {}
        self.offsets_state = "none"  # none | adding | committing | done
        self.ending: bool | None = None  # decided: commit?
        self.end_sent = False
        self.requests = 0  # transactional requests in flight
        self.stopped: str | None = None  # why it stopped (fenced, crashed...)
        self.last_end: EndTxnRequest | None = None
        self.stall_until = 0  # a zombie's batches wait (a GC pause) until the new instance initialised

    # -- life ---------------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        if self.stopped is not None:
            return True
        return self.tm.state in (TransactionState.READY, TransactionState.FATAL_ERROR) and not self.requests and not any(b.in_flight for b in self.batches)

    def start(self) -> None:
        self._init()

    def stop(self, why: str) -> None:
        if self.stopped is None:
            self.stopped = why
            self.sim.trace(f"{self.name} stops: {why}")

    def _fatal(self, err: BaseException) -> None:
        self.ledger.on_fatal(self, err)
        self.stop(f"fatal: {err}")

    def _tx_call(self, request: Message, response_type: type[Message], done, target: str | None = None) -> None:
        self.requests += 1

        def answered(response: Message | None, kind: str) -> None:
            self.requests -= 1
            if self.stopped is not None:
                return
            if kind != OK or not isinstance(response, response_type):
                response = None
            try:
                done(response)
            except KafkaError as err:
                if self.tm.state is TransactionState.FATAL_ERROR:
                    self._fatal(err)
                else:
                    self._decide(False)

        self.call(target or self.coordinator, request, response_type, answered)

    def _retry(self, fn, *args: Any) -> None:
        self.later(self.sim.config.client_backoff_ms, fn, *args)

    # -- init_transactions ----------------------------------------------------------------------
    def _init(self) -> None:
        if self.stopped is not None:
            return
        req = self.tm.init_request()
        if req is None:
            return
        self._tx_call(req, TxnInitProducerIdResponse, self._inited)

    def _inited(self, response: TxnInitProducerIdResponse | None) -> None:
        if response is None or self.tm.on_init(response) is Verdict.RETRY:
            self._retry(self._init)
            return
        self.ledger.on_init(self, *self.tm.identity)
        self.sim.trace(f"{self.name} initialised: producer {self.tm.producer_id} epoch {self.tm.epoch}")
        self.later(self.side.randint(10, 200), self._begin)

    # -- one transaction ------------------------------------------------------------------------
    def _begin(self) -> None:
        if self.stopped is not None or self.sim.phase != "faults":
            return
        if self.slot.current is self and self.side.random() < 0.1:
            self.slot.new_instance(zombie=True)  # this one keeps going: a zombie...
            self.stall_until = self.sim.kernel.now + self.side.randint(200, 600)  # ...its batches sent after the fence
        elif self.slot.current is self and self.side.random() < 0.03:
            self.slot.crash_and_replace(self)
            return
        self.tm.begin_transaction()
        self.txn += 1
        self.batches, self.offsets, self.offsets_state = [], {}, "none"
        self.ending, self.end_sent = None, False
        parts = self.side.sample(self.slot.outputs, self.side.randint(1, min(3, len(self.slot.outputs))))
        n = 0
        for tp in parts:
            for _ in range(self.side.randint(1, 2)):
                count = self.side.randint(1, 3)
                values = [record_value(self.tid, self.instance, self.txn, n + i) for i in range(count)]
                n += count
                self.batches.append(Batch(tp, values))
            self.tm.check_append()
            self.tm.register(TopicPartition(*tp))
        if self.slot.group is not None and self.side.random() < 0.6:
            self.offsets = {p: self.ledger.offset_for(self.tid, self.instance, self.txn) for p in range(self.side.randint(1, 2))}
        self.ledger.on_begin(self, self.txn, parts, self.offsets, [(b.tp, v) for b in self.batches for v in b.values])
        if self.last_end is not None and self.side.random() < 0.3 and (self.slot.bump or STALE_END_WITHOUT_BUMP):
            self._send_stale_end(self.last_end)
        if self.tm.implicit_adds:  # the batches go at once; the offsets' add alongside
            self._pump()
            if self.offsets and self.offsets_state == "none" and self.tm.state is TransactionState.IN_TRANSACTION:
                self._add_offsets()
            return
        self._add_partitions()

    def _add_partitions(self) -> None:
        if self.stopped is not None:
            return
        req = self.tm.add_partitions_request()
        if req is None:
            self._pump()
            return
        self._tx_call(req, AddPartitionsToTxnResponse, self._added)

    def _added(self, response: AddPartitionsToTxnResponse | None) -> None:
        if response is None:
            # no answer: what landed is unknown; Kafka's client retries (the pending partitions)
            self._retry(self._resend_add)
            return
        if self.tm.on_add_partitions(response) is Verdict.RETRY:
            self._retry(self._resend_add)
            return
        self._pump()
        if self.offsets and self.offsets_state == "none":
            self._add_offsets()

    def _resend_add(self) -> None:
        if self.stopped is not None or self.tm.state is not TransactionState.IN_TRANSACTION:
            self._pump()
            return
        # the partitions stay pending in the manager: ask for them again
        self.tm.new_partitions |= self.tm.pending_partitions
        self.tm.pending_partitions.clear()
        self._add_partitions()

    def _add_offsets(self) -> None:
        if self.stopped is not None:
            return
        if self.tm.state is not TransactionState.IN_TRANSACTION:
            self._decide(False)  # an error meanwhile (a retry's wait): only an abort is left
            return
        self.offsets_state = "adding"
        self._tx_call(self.tm.add_offsets_request(self.slot.group), AddOffsetsToTxnResponse, self._offsets_added)

    def _offsets_added(self, response: AddOffsetsToTxnResponse | None) -> None:
        if response is None:
            self.tm.on_unknown_outcome(KafkaError(int(E.REQUEST_TIMED_OUT), "AddOffsetsToTxn: no answer"))
            self._decide(False)
            return
        if self.tm.on_add_offsets(response) is Verdict.RETRY:
            self._retry(self._add_offsets)
            return
        self._commit_offsets()

    def _commit_offsets(self) -> None:
        if self.stopped is not None:
            return
        if self.tm.state is not TransactionState.IN_TRANSACTION:
            self._decide(False)
            return
        self.offsets_state = "committing"
        topics = {IN_TOPIC: {p: OffsetCommitPartition(o) for p, o in self.offsets.items()}}
        pid, epoch = self.tm.identity
        req = TxnOffsetCommitRequest(self.tid, self.slot.group, pid, epoch, topics=topics)
        target = names.group_coordinator(CLUSTER, group_coordinator_for(self.slot.group, self.sim.scenario.coordinators))
        self._tx_call(req, TxnOffsetCommitResponse, self._offsets_committed, target)

    def _offsets_committed(self, response: TxnOffsetCommitResponse | None) -> None:
        if response is None:
            self.tm.on_unknown_outcome(KafkaError(int(E.REQUEST_TIMED_OUT), "TxnOffsetCommit: no answer"))
            self._decide(False)
            return
        if self.tm.on_txn_offset_commit(response) is Verdict.RETRY:
            self._retry(self._commit_offsets)
            return
        self.offsets_state = "done"
        self._maybe_end()

    # -- produce --------------------------------------------------------------------------------
    def _pump(self) -> None:
        if self.stopped is not None:
            return
        if self.sim.kernel.now < self.stall_until:
            self.later(self.stall_until - self.sim.kernel.now, self._pump)
            return
        busy = {b.tp for b in self.batches if b.in_flight}
        for b in self.batches:
            if b.acked or b.tp in busy:
                continue
            busy.add(b.tp)
            if self.ending is not None or self.tm.state is not TransactionState.IN_TRANSACTION:
                continue
            if self.tm.implicit_adds:
                self.tm.implicit_add(b.tp)  # its leader adds it (KIP-890 part 2)
            elif not self.tm.is_added(TopicPartition(*b.tp)):
                continue
            self._send(b)
        self._maybe_end()

    def _send(self, b: Batch) -> None:
        leader = self.leaders.get(b.tp)
        if leader is None:
            self._find_leader(b.tp)
            return
        now = self.sim.kernel.now
        if not b.data:
            pid, epoch = self.tm.identity
            key = (pid, epoch, b.tp)
            seq = self.sequences.get(key, 0)
            self.sequences[key] = seq + len(b.values)
            b.data = records.build_batch_columns(b.values, timestamp_ms=now, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
            b.first_sent = now
            self.ledger.on_sent(self, b.values, b.tp, now)
        elif now - b.first_sent > BATCH_DEADLINE_MS:
            self.tm.on_batch_failed(KafkaError(int(E.REQUEST_TIMED_OUT), f"batch to {b.tp} not acknowledged in {BATCH_DEADLINE_MS} ms"))
            self._decide(False)
            return
        b.in_flight = True
        cfg = self.sim.config
        req = ProduceRequest(
            b.tp[0], b.tp[1], b.data, acks=-1, timeout_ms=cfg.produce_timeout_ms, current_leader_epoch=leader[1], transactional_id=self.tid, implicit_add=self.tm.implicit_adds
        )
        self.call(names.replica(CLUSTER, b.tp[0], b.tp[1], leader[0]), req, ProduceResponse, partial(self._produced, b), cfg.produce_timeout_ms + cfg.call_timeout_ms)

    def _produced(self, b: Batch, response: Message | None, kind: str) -> None:
        b.in_flight = False
        if self.stopped is not None:
            return
        code = response.error_code if isinstance(response, ProduceResponse) and kind == OK else None
        if code == E.NONE:
            b.acked = True
            self.ledger.on_acked(self, b.values, b.tp, response.base_offset)
        elif code is None or code in RETRY_PRODUCE:
            if code is None or code in RETRIABLE_METADATA:
                self.leaders.pop(b.tp, None)
            self.later(self.sim.config.client_backoff_ms, self._pump)
            return
        else:
            self.tm.on_batch_failed(KafkaError(int(code), f"produce to {b.tp}: {response.error_message}"))
            if self.tm.state is TransactionState.FATAL_ERROR:
                self._fatal(self.tm.last_error or KafkaError(int(code), "fenced"))
                return
            self._decide(False)
        self._pump()

    def _find_leader(self, tp: tuple[str, int]) -> None:
        def answered(response: Message | None, kind: str) -> None:
            if isinstance(response, MetadataResponse) and response.topics and tp[1] < len(response.topics[0].partitions):
                p = response.topics[0].partitions[tp[1]]
                if p.leader >= 0:
                    self.leaders[tp] = (p.leader, p.leader_epoch)
            self._retry(self._pump)

        self.call(names.controller(CLUSTER), MetadataRequest([tp[0]]), MetadataResponse, answered)

    # -- ending ---------------------------------------------------------------------------------
    def _decide(self, commit: bool) -> None:
        if self.ending is None:
            self.ending = commit and not self.tm.has_error
        self._maybe_end()

    def _maybe_end(self) -> None:
        if self.stopped is not None or self.end_sent or self.tm.state is TransactionState.READY:
            return
        if self.ending is None:
            if self.offsets_state in ("adding", "committing") or not all(b.acked for b in self.batches):
                return
            if self.offsets and self.offsets_state == "none":
                return  # AddOffsetsToTxn first (after the partitions)
            self.ending = self.side.random() < 0.67 and not self.tm.has_error
        if any(b.in_flight for b in self.batches) or self.requests:
            return  # the flush before EndTxn
        self.end_sent = True
        try:
            if self.ending:
                self.tm.begin_commit()
            else:
                self.tm.begin_abort()
            req = self.tm.end_request(self.ending)
        except KafkaError as err:
            if self.tm.state is TransactionState.FATAL_ERROR:
                self._fatal(err)
                return
            self.ending = False  # a failed batch: only an abort is left
            self.end_sent = False
            self._maybe_end()
            return
        if req is None:
            self.tm.complete()
            self._ended(None)
            return
        if not self.slot.bump:
            req = dataclasses.replace(req, bump_epoch=False)
        self._send_end(req)

    def _send_end(self, req: EndTxnRequest) -> None:
        if self.stopped is not None:
            return
        self.ledger.on_end_sent(self, self.txn, req)
        self.slot.faults.crash_during_end(self.coordinator_index)
        self._tx_call(req, EndTxnResponse, partial(self._end_answered, req))

    def _end_answered(self, req: EndTxnRequest, response: EndTxnResponse | None) -> None:
        if response is None or self.tm.on_end(response) is Verdict.RETRY:
            self._retry(self._send_end, req)
            return
        self._ended(req)

    def _ended(self, req: EndTxnRequest | None) -> None:
        self.ledger.on_ended(self, self.txn, bool(self.ending), req)
        self.sim.trace(f"{self.name} {'committed' if self.ending else 'aborted'} transaction {self.txn} (now producer {self.tm.producer_id} epoch {self.tm.epoch})")
        self.last_end = req
        self.later(self.side.randint(0, 100), self._begin)

    def _send_stale_end(self, req: EndTxnRequest) -> None:
        """KAFKA-17754: the previous transaction's EndTxn, delayed in the network, arrives
        while this transaction runs."""
        txn = self.txn
        self.slot.stale_ends += 1

        def send() -> None:
            # N+1 holds a partition already (with implicit adds: a batch of it was acknowledged)
            started = self.txn == txn and (self.tm.started or any(b.acked for b in self.batches))

            # what the original EndTxn left: the identity this transaction runs at
            current = (self.tm.producer_id, self.tm.epoch) if self.txn == txn else None

            def answered(response: Message | None, kind: str) -> None:
                if isinstance(response, EndTxnResponse):
                    self.ledger.on_stale_end(self, txn, req, response, started, current)

            self.call(self.coordinator, req, EndTxnResponse, answered)

        self.later(self.side.randint(0, 300), send)

    # -- heal -----------------------------------------------------------------------------------
    def finish(self) -> None:
        """Healing: the open transaction ends (no new one begins)."""
        if self.stopped is None and self.tm.state is TransactionState.IN_TRANSACTION and self.ending is None:
            self._pump()


class TxnSlot:
    """A transactional id and its instances (the current one, and zombies)."""

    def __init__(self, sim: "Simulation", index: int, tc_count: int, outputs: list[tuple[str, int]], ledger: "AppLedger", faults: Any) -> None:
        self.sim = sim
        self.tid = f"tx{index}"
        self.side = random.Random(f"txn-app:{sim.config.seed}:{index}")
        self.tc_count = tc_count
        self.outputs = outputs
        self.ledger = ledger
        self.faults = faults
        # every WIRE_V0_3_EVERY-th id is a wire client at EndTxn v0-3 (no epoch bump)
        self.bump = not (WIRE_V0_3_EVERY and index % WIRE_V0_3_EVERY == WIRE_V0_3_EVERY - 1)
        # KIP-890 part 2 needs the bump; id 1 adds explicitly on even seeds (both paths run)
        self.implicit = IMPLICIT_ADDS and self.bump and (index % 2 == 0 or sim.config.seed % 2 == 1)
        self.group = f"txa{index}" if sim.scenario.coordinators else None
        self.instances: list[TxnApp] = []
        self.current: TxnApp | None = None
        self.stale_ends = 0

    def new_instance(self, zombie: bool = False) -> TxnApp:
        app = TxnApp(self.sim, self, len(self.instances))
        self.instances.append(app)
        self.sim.net.add(app)
        if zombie:
            self.sim.trace(f"{self.tid}: a new instance {app.name} starts while {self.current.name if self.current else '-'} runs on (a zombie)")
        self.current = app
        self.ledger.on_instance(app)
        self.sim.kernel.after(self.side.randint(0, 50), app.start)
        return app

    def crash_and_replace(self, app: TxnApp) -> None:
        app.stop("crashed")
        self.current = None
        self.sim.kernel.after(self.side.randint(100, 1500), self._replace)

    def _replace(self) -> None:
        if self.current is None:
            self.new_instance()

    @property
    def idle(self) -> bool:
        return self.current is not None and all(a.idle for a in self.instances)

    def busy(self) -> str | None:
        if self.current is None:
            return f"{self.tid} has no instance"
        for a in self.instances:
            if not a.idle:
                return f"{a.name} is {a.tm.state.name} (txn {a.txn}, {a.requests} requests in flight)"
        return None
